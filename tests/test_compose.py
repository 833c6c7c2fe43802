"""docker-compose.yml, checked without a Docker engine (``docker compose config`` cannot run here).

The compose file is parsed as YAML and its services, images, build, healthchecks, mounts and
hardening are checked against the Dockerfile and the gateway config it mounts; that config is
validated by the real ``loopgate check-config`` with the environment compose would give the
replicas; the HAProxy config is checked by ``haproxy -c`` when haproxy is installed.
Not checked: the file against the compose-spec JSON schema, and a real ``docker compose up``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config import PACKAGED_PATH, load_config
from gateway.config.loader import interpolate
from tests.ports import free_port
from tests.test_first_run import readme_block, with_port

ROOT = Path(__file__).resolve().parent.parent
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
SERVICES: dict[str, Any] = COMPOSE["services"]
DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}")


def _bind_mounts(service: dict[str, Any]) -> dict[str, tuple[Path, str]]:
    """Container path -> (host path, options) for the service's ``./host:/container[:ro]`` volumes."""
    mounts = {}
    for spec in service.get("volumes", []):
        host, container, *options = spec.split(":")
        if host.startswith("./"):
            mounts[container] = (ROOT / host, ",".join(options))
    return mounts


def _compose_environment(service: dict[str, Any]) -> dict[str, str]:
    """The service's ``environment``, interpolated as compose does with no shell variables and no .env set.

    Only ``${VAR}`` / ``${VAR:-default}`` are used in the file: the gateway's own interpolation
    implements exactly those two forms.
    """
    environment = service.get("environment", {})
    assert isinstance(environment, dict), "environment as a mapping"
    return {str(k): str(v) for k, v in interpolate(environment, {}).items()}


def _env_example() -> dict[str, str]:
    pairs = {}
    for line in (ROOT / ".env.example").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.partition("=")
            pairs[name.strip()] = value.strip()
    return pairs


def _image_uid() -> int:
    found = re.search(r"useradd [^\n]*--uid (\d+)", DOCKERFILE)
    assert found, "the Dockerfile creates its user with a fixed uid"
    return int(found.group(1))


def _healthcheck_url(service: dict[str, Any]) -> str:
    test = service["healthcheck"]["test"]
    assert test[0] == "CMD"
    found = re.search(r"http://127\.0\.0\.1:\d+/[a-z-]+", " ".join(test))
    assert found, test
    return found.group(0)


def test_the_services_are_redis_two_gateway_replicas_and_a_load_balancer() -> None:
    assert set(SERVICES) == {"redis", "gateway", "lb"}
    for name, service in SERVICES.items():
        assert service["healthcheck"]["test"], name
        assert service.get("restart") == "unless-stopped", name
        image = service["image"]
        assert ":" in image and not image.endswith(":latest"), f"{name}: pin the image ({image})"
    gateway = SERVICES["gateway"]
    assert gateway["deploy"]["replicas"] == 2
    # Replicas cannot share a container name or a host port: only the load balancer publishes one.
    assert "container_name" not in gateway and "ports" not in gateway
    assert SERVICES["lb"]["ports"] == ["127.0.0.1:8080:8080"]


def test_the_gateway_is_built_from_this_repository_and_hardened_like_the_chart() -> None:
    gateway = SERVICES["gateway"]
    assert gateway["build"] == "."
    assert (ROOT / "Dockerfile").is_file()
    assert gateway["user"] == f"{_image_uid()}:{_image_uid()}"
    assert gateway["read_only"] is True and gateway["tmpfs"] == ["/tmp"]
    assert gateway["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in gateway["security_opt"]
    grace = re.fullmatch(r"(\d+)s", gateway["stop_grace_period"])
    assert grace and int(grace.group(1)) > 30, "longer than the gateway's 30 s drain"
    assert gateway["depends_on"] == {"redis": {"condition": "service_healthy"}}
    assert SERVICES["lb"]["depends_on"] == {"gateway": {"condition": "service_healthy"}}


def test_the_mounted_config_is_the_one_the_image_reads() -> None:
    gateway = SERVICES["gateway"]
    image_path = re.search(r"LOOPGATE_CONFIG=(\S+)", DOCKERFILE).group(1)  # type: ignore[union-attr]
    host, options = _bind_mounts(gateway)[image_path]
    assert host == ROOT / "config" / "compose.yaml" and host.is_file()
    assert options == "ro"
    command = gateway["command"]
    assert command[command.index("--config") + 1] == image_path
    assert command[command.index("--workers") + 1] == "1"
    assert gateway["env_file"] == [{"path": ".env", "required": False}]
    assert ".env" in (ROOT / ".gitignore").read_text(encoding="utf-8").split()


@pytest.mark.slow
def test_the_compose_config_passes_loopgate_check_config() -> None:
    gateway = SERVICES["gateway"]
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), **_env_example(),
           **_compose_environment(gateway)}
    result = subprocess.run([sys.executable, "-m", "gateway", "check-config", "--config", "config/compose.yaml"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "store redis" in result.stdout
    config = load_config(ROOT / "config" / "compose.yaml", env)
    assert config.store.url == "redis://redis:6379/0"
    assert config.server.host == "0.0.0.0"
    # No key needed for the first curl (the load balancer publishes on 127.0.0.1 only).
    assert not config.auth.enabled
    assert config.providers["demo"].type == "mock" and config.models["demo"].tools
    # Every ${VAR} without a default is set by compose or listed in .env.example.
    lines = (ROOT / "config" / "compose.yaml").read_text(encoding="utf-8").splitlines()
    text = "\n".join(line for line in lines if not line.lstrip().startswith("#"))  # comments are not read
    for name, default in _VAR.findall(text):
        if not default:
            assert name in _compose_environment(gateway) or name in _env_example(), name


def test_the_healthchecks_probe_the_ports_the_services_listen_on() -> None:
    config = load_config(ROOT / "config" / "compose.yaml", {"LOOPGATE_API_KEY": "k"})
    assert _healthcheck_url(SERVICES["gateway"]) == f"http://127.0.0.1:{config.server.port}/readyz"
    assert SERVICES["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    haproxy = (ROOT / "config" / "compose-haproxy.cfg").read_text(encoding="utf-8")
    monitor = re.search(r"monitor-uri (\S+)", haproxy).group(1)  # type: ignore[union-attr]
    assert _healthcheck_url(SERVICES["lb"]) == f"http://127.0.0.1:8080{monitor}"


def test_the_load_balancer_sends_traffic_to_ready_gateway_replicas() -> None:
    lb = SERVICES["lb"]
    cfg_path = "/usr/local/etc/haproxy/haproxy.cfg"
    host, options = _bind_mounts(lb)[cfg_path]
    assert host == ROOT / "config" / "compose-haproxy.cfg" and options == "ro"
    haproxy = host.read_text(encoding="utf-8")
    config = load_config(ROOT / "config" / "compose.yaml", {"LOOPGATE_API_KEY": "k"})
    template = re.search(r"server-template \S+ 1-(\d+) (\S+):(\d+)", haproxy)
    assert template, "replicas are found by DNS, so --scale needs no config change"
    assert template.group(2) == "gateway" and int(template.group(3)) == config.server.port
    assert int(template.group(1)) >= SERVICES["gateway"]["deploy"]["replicas"]
    assert "option httpchk GET /readyz" in haproxy
    assert re.search(r"bind :8080\b", haproxy)
    # Long model calls and streams must not be cut by the proxy before the gateway's own deadline.
    timeouts = dict(re.findall(r"timeout (client|server) (\d+)s", haproxy))
    deadline = config.routing.request_timeout_s
    assert int(timeouts["client"]) >= deadline and int(timeouts["server"]) >= deadline


@pytest.mark.skipif(shutil.which("haproxy") is None and os.environ.get("CI") != "true",
                    reason="haproxy is not installed (apt-get install haproxy; .ci/run installs it)")
def test_haproxy_accepts_the_load_balancer_config() -> None:
    result = subprocess.run(["haproxy", "-c", "-f", str(ROOT / "config" / "compose-haproxy.cfg")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_image_carries_the_packaged_keyless_config_where_it_reads_its_config() -> None:
    image_path = re.search(r"LOOPGATE_CONFIG=(\S+)", DOCKERFILE).group(1)  # type: ignore[union-attr]
    source = PACKAGED_PATH.relative_to(ROOT).as_posix()
    assert re.search(rf"^COPY {re.escape(source)} {re.escape(image_path)}$", DOCKERFILE, re.MULTILINE), DOCKERFILE
    # The build stage copies the package whole, so the file is also in the installed package.
    assert "COPY gateway ./gateway" in DOCKERFILE
    config = load_config(PACKAGED_PATH, {})
    assert config.providers["demo"].type == "mock" and not config.auth.enabled


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("curl") is None, reason="the README's first-run request is a curl command")
def test_the_compose_config_answers_the_readmes_curl_without_keys(tmp_path: Path) -> None:
    """A replica as compose runs it (its config and environment, no .env) on the suite's Redis: the README's curl."""
    gateway = SERVICES["gateway"]
    port = free_port()
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), **_compose_environment(gateway),
           "LOOPGATE_STORE_URL": os.environ["LOOPGATE_TEST_REDIS_URL"]}
    command = [arg for arg in gateway["command"]]
    command[command.index("--config") + 1] = "config/compose.yaml"
    log_path = tmp_path / "replica.log"
    with log_path.open("wb") as log:
        replica = subprocess.Popen([sys.executable, "-m", "gateway", "serve", *command, "--host", "127.0.0.1",
                                    "--port", str(port)], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        curl = with_port(readme_block("bash", "curl"), port)
        deadline = time.monotonic() + 60
        while "Application startup complete" not in log_path.read_text(errors="replace"):
            assert replica.poll() is None and time.monotonic() < deadline, log_path.read_text(errors="replace")
            time.sleep(0.05)
        done = subprocess.run(["bash", "-c", curl], env={"PATH": env["PATH"]}, capture_output=True, timeout=60)
        answer = json.loads(done.stdout)
        assert answer["choices"][0]["message"]["content"].startswith("The get_weather tool returned: {"), answer
        assert answer["gateway"]["tool_calls"][0]["status"] == "ok"
    finally:
        replica.terminate()
        replica.wait(30)
