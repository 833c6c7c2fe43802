"""The README's first run, as written, on a fresh venv: its first command, then its ``curl`` and SDK snippet.

The commands are read out of README.md, so the test fails when the README drifts from what
works. The project is copied to a temporary directory (the README's ``.venv`` is created
there, not in the checkout) and installed from PyPI by the README's own ``pip install``
(pip's cache makes a re-run quick; about 30 s). Two substitutions, both asserted to apply:
port 8080 becomes a free port (in the copied config and in the client commands), and the
first command runs in two parts, the install with network and ``loopgate serve`` (after
activating the venv again) with every proxy variable pointing at a closed port and no
provider keys, so the answer provably needs no network: route ``smart`` fails in the same
process while route ``demo`` answers from a real server-side tool loop. Where unprivileged
network namespaces exist (``unshare -rn``), the installed gateway and the curl also run in one
whose only interface is loopback.

The same fresh install then goes through the rest of a first hour, outside the checkout: ``loopgate
init`` and ``serve`` in an empty directory (its banner, its answer), ``serve`` with no config at all
(the packaged default), a misspelt tool caught by ``check-config`` and by ``serve`` in one line, a
tool module beside the config, and the wheel carrying the starting config and the license.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
_BLOCK = re.compile(r"```(\w*)\n(.*?)```", re.DOTALL)
_PROXY_VARS = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "all_proxy",
               "no_proxy")
_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "OPENAI_BASE_URL", "LOOPGATE_STORE_URL",
         "LOOPGATE_CONFIG")
CLOSED = "http://127.0.0.1:9"
#: a fresh venv, pip, real gateways: not for the quick edit-test loop (pytest -m "not slow")
pytestmark = [pytest.mark.slow, pytest.mark.long(seconds=35)]


def readme_block(language: str, must_contain: str) -> str:
    """The first fenced block of ``language`` in the README that contains ``must_contain``."""
    for found_language, body in _BLOCK.findall(README.read_text()):
        if found_language == language and must_contain in body:
            return body.strip()
    raise AssertionError(f"README.md has no ```{language} block containing {must_contain!r}")


def first_command() -> str:
    block = readme_block("bash", "loopgate serve")
    (line,) = [line for line in block.splitlines() if "loopgate serve" in line]
    return line.strip()


def split_first_command(command: str) -> tuple[str, str]:
    """(install, serve): the steps before ``loopgate serve``, and the venv activation plus that step."""
    steps = [step.strip() for step in command.split("&&")]
    serve_at = next(i for i, step in enumerate(steps) if step.startswith("loopgate serve"))
    activate = [step for step in steps[:serve_at] if step.startswith((". ", "source "))]
    assert activate, f"the first command never activates its venv: {command}"
    return " && ".join(steps[:serve_at]), " && ".join([*activate, *steps[serve_at:]])


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without the test venv, the checkout on PYTHONPATH, proxies or provider keys."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", *_PROXY_VARS, *_KEYS)}
    if sys.prefix != sys.base_prefix:
        ours = str(Path(sys.prefix) / "bin")
        env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != ours)
    env.update(extra)
    return env


def with_port(text: str, port: int) -> str:
    assert "127.0.0.1:8080" in text, f"expected the README's address 127.0.0.1:8080 in: {text}"
    return text.replace("127.0.0.1:8080", f"127.0.0.1:{port}")


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int, Path]]:
    """The project copied, installed and served as the README's first command says; yields (url, port, copy)."""
    project = tmp_path_factory.mktemp("first-run") / "loopgate"
    # What a fresh clone has: no venv, caches or build output, and no tests/clients/node_modules (416 MB of
    # Node.js clients the first run never uses).
    shutil.copytree(ROOT, project, ignore=shutil.ignore_patterns(
        ".venv", ".git", "__pycache__", "*.pyc", ".pytest_cache", ".ruff_cache", ".mypy_cache", ".hypothesis",
        "*.egg-info", "build", "dist", ".ci-pytest.log", ".ci-logs", "site", "node_modules"))
    config = project / "config" / "gateway.yaml"
    text = config.read_text()
    assert text.count("port: 8080") == 1, "config/gateway.yaml should listen on port 8080 as the README says"
    install, serve = split_first_command(first_command())
    installed = subprocess.run(["bash", "-c", install], cwd=project, env=clean_env(), capture_output=True,
                               timeout=900)
    assert installed.returncode == 0, installed.stdout.decode()[-3000:] + installed.stderr.decode()[-3000:]
    no_egress = {name: CLOSED for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy")}
    log_path = project / "gateway.log"
    # The port is picked once the install is done, and picked again if another process of the run took it
    # between the pick and the bind (a free port is only free until someone binds it).
    for _ in range(3):
        port = free_port()
        config.write_text(text.replace("port: 8080", f"port: {port}"))
        with log_path.open("wb") as log:
            server = subprocess.Popen(["bash", "-c", serve], cwd=project, env=clean_env(**no_egress), stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        if _answers_health(server, f"http://127.0.0.1:{port}", log_path):
            break
    else:
        pytest.fail(f"the port was taken at each of three tries:\n{log_path.read_text(errors='replace')}")
    try:
        yield f"http://127.0.0.1:{port}", port, project
    finally:
        _stop_session(server)


def _answers_health(server: subprocess.Popen[bytes], url: str, log_path: Path) -> bool:
    """True once the served gateway answers /healthz; False if it exited because its port was taken."""
    deadline = time.monotonic() + 60
    while True:
        if server.poll() is not None:
            log = log_path.read_text(errors="replace")
            if "Address already in use" in log:
                return False
            raise AssertionError(f"the gateway exited:\n{log}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1, trust_env=False).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"the gateway did not start:\n{log_path.read_text(errors='replace')}"
        time.sleep(0.1)


def _stop_session(server: subprocess.Popen[bytes]) -> None:
    """Stop bash and the gateway it runs (the session ``start_new_session`` made), gone already or not."""
    try:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(5)
    except ProcessLookupError:
        server.wait(5)


def _assert_tool_loop_answer(answer: dict[str, object]) -> None:
    content = answer["choices"][0]["message"]["content"]  # type: ignore[index]
    assert content.startswith("The get_weather tool returned: {"), content
    assert orjson.loads(content.removeprefix("The get_weather tool returned: "))["city"] == "Paris"
    gateway = answer["gateway"]
    assert gateway["status"] == "completed" and gateway["iterations"] == 2  # type: ignore[index]
    assert [(c["name"], c["status"]) for c in gateway["tool_calls"]] == [("get_weather", "ok")]  # type: ignore[index]


@pytest.mark.skipif(shutil.which("curl") is None, reason="the README's first-run request is a curl command")
def test_the_readme_curl_gets_a_tool_loop_answer_without_keys_or_network(first_run: tuple[str, int, Path]) -> None:
    url, port, _ = first_run
    curl = with_port(readme_block("bash", "curl"), port)
    assert '"model": "demo"' in curl
    done = subprocess.run(["bash", "-c", curl], env=clean_env(), capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    _assert_tool_loop_answer(orjson.loads(done.stdout))
    # The same process cannot reach any provider: the keyed routes fail while demo answered.
    smart = httpx.post(f"{url}/v1/chat/completions", trust_env=False, timeout=120,
                       json={"model": "smart", "messages": [{"role": "user", "content": "hi"}]})
    assert smart.status_code >= 500, smart.text


def test_the_readme_sdk_snippet_gets_the_same_answer(first_run: tuple[str, int, Path]) -> None:
    _, port, _ = first_run
    snippet = with_port(readme_block("python", 'model="demo"'), port)
    done = subprocess.run([sys.executable, "-c", snippet], env=clean_env(), capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    printed = done.stdout.decode()
    assert printed.startswith("The get_weather tool returned: {") and '"city":"Paris"' in printed
    assert "'name': 'get_weather'" in printed and "'status': 'ok'" in printed


def _network_namespaces() -> bool:
    if shutil.which("unshare") is None or shutil.which("ip") is None or shutil.which("curl") is None:
        return False
    probe = subprocess.run(["unshare", "-rn", "ip", "link", "set", "lo", "up"], capture_output=True, timeout=30)
    return probe.returncode == 0


@pytest.mark.skipif(not _network_namespaces(), reason="needs unprivileged network namespaces (unshare -rn) and ip")
def test_the_first_run_in_a_network_namespace_with_only_loopback(first_run: tuple[str, int, Path]) -> None:
    """Stronger than closed proxies: no route to anywhere, DNS included; the installed gateway and the curl
    run in a fresh network namespace whose only interface is loopback."""
    _, port, project = first_run
    _, serve = split_first_command(first_command())
    activate, _, serve_step = serve.rpartition(" && ")
    curl = with_port(readme_block("bash", "curl"), port)
    script = f"""
set -u
ip link set lo up
( {activate} && exec {serve_step} ) > netns-gateway.log 2>&1 &
server=$!
for _ in $(seq 1 300); do curl -sf http://127.0.0.1:{port}/healthz > /dev/null && break; sleep 0.1; done
{curl}
status=$?
kill $server
wait $server
exit $status
"""
    done = subprocess.run(["unshare", "-rn", "bash", "-c", script], cwd=project, env=clean_env(),
                          capture_output=True, timeout=120)
    log = (project / "netns-gateway.log").read_text(errors="replace")
    assert done.returncode == 0, done.stderr.decode() + log
    _assert_tool_loop_answer(orjson.loads(done.stdout))


# --- the first hour past the first answer, with the same fresh install ---------------------------------


def _installed(project: Path, *args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The fresh venv's ``loopgate`` command, outside the checkout, with no keys and no proxies."""
    return subprocess.run([str(project / ".venv" / "bin" / "loopgate"), *args], cwd=cwd, env=clean_env(),
                          capture_output=True, text=True, timeout=timeout)


def _serve_until_started(command: list[str], cwd: Path, log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as log:
        server = subprocess.Popen(command, cwd=cwd, env=clean_env(), stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    deadline = time.monotonic() + 60
    while "Application startup complete" not in log_path.read_text(errors="replace"):
        if server.poll() is not None or time.monotonic() > deadline:
            _stop(server)
            raise AssertionError(f"the gateway did not start:\n{log_path.read_text(errors='replace')}")
        time.sleep(0.05)
    return server


def _stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(5)


def test_init_then_serve_outside_the_checkout(first_run: tuple[str, int, Path], tmp_path: Path) -> None:
    """``loopgate init`` in an empty directory, then ``loopgate serve`` there: the written config, its banner, and
    route demo's answer; a second ``init`` keeps the file."""
    _, _, project = first_run
    work = tmp_path / "my-gateway"
    written = _installed(project, "init", str(work), cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    config = work / "loopgate.yaml"
    assert config.read_text() == (ROOT / "gateway" / "config" / "starter.yaml").read_text()
    config.write_text(config.read_text() + "# mine\n")
    again = _installed(project, "init", str(work), cwd=tmp_path)
    assert again.returncode == 1 and "already exists" in again.stderr and config.read_text().endswith("# mine\n")
    port = free_port()
    log_path = tmp_path / "serve.log"
    server = _serve_until_started([str(project / ".venv" / "bin" / "loopgate"), "serve", "--port", str(port)], work,
                                  log_path)
    try:
        url = f"http://127.0.0.1:{port}"
        question = "What is the weather in Paris? Use get_weather."
        answer = httpx.post(f"{url}/v1/chat/completions", trust_env=False, timeout=60, json={
            "model": "demo", "messages": [{"role": "user", "content": question}]})
        _assert_tool_loop_answer(answer.json())
        log = log_path.read_text(errors="replace")
        assert "config: loopgate.yaml" in log and "packaged" not in log
        assert f"listening on {url}" in log and "route smart -> openai/gpt-4.1" in log
        assert "providers without a key (their calls fail with auth): openai, anthropic, gemini" in log
        assert "auth: OFF" in log and f"{url}/openapi.json" in log and f"{url}/ui/approvals" in log
        assert httpx.get(f"{url}/openapi.json", trust_env=False, timeout=10).json()["openapi"].startswith("3.1")
    finally:
        _stop(server)


def test_serve_with_no_config_anywhere_runs_the_packaged_default(first_run: tuple[str, int, Path],
                                                                 tmp_path: Path) -> None:
    """The installed package carries its starting config: ``serve`` in an empty directory answers route demo."""
    _, _, project = first_run
    port = free_port()
    log_path = tmp_path / "serve.log"
    server = _serve_until_started([str(project / ".venv" / "bin" / "loopgate"), "serve", "--port", str(port)],
                                  tmp_path, log_path)
    try:
        paused = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", trust_env=False, timeout=60, json={
            "model": "demo", "messages": [{"role": "user", "content": "Book a meeting on Friday. Use book_meeting."}]})
        gateway = paused.json()["gateway"]
        assert gateway["status"] == "paused" and gateway["pending"][0]["name"] == "book_meeting"
        log = log_path.read_text(errors="replace")
        assert "using the packaged starting config" in log and "config: the packaged starting config" in log
    finally:
        _stop(server)


def test_check_config_catches_a_misspelt_tool_and_finds_a_module_beside_the_config(
        first_run: tuple[str, int, Path], tmp_path: Path) -> None:
    _, _, project = first_run
    starter = (ROOT / "gateway" / "config" / "starter.yaml").read_text()
    (tmp_path / "bad.yaml").write_text(starter.replace("gateway.demo:get_weather", "gateway.demo:get_wether"))
    bad = _installed(project, "check-config", "--config", "bad.yaml", cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.strip() == ("loopgate: config error: tools.get_weather.python: 'gateway.demo' has no attribute "
                                  "'get_wether' (did you mean 'get_weather'?)")
    served = _installed(project, "serve", "--config", "bad.yaml", "--port", str(free_port()), cwd=tmp_path)
    assert served.returncode == 2 and served.stderr.strip() == bad.stderr.strip()
    assert "Traceback" not in served.stderr and "Unclosed" not in served.stderr

    # A tool module of one's own beside the config, run from another directory, with no PYTHONPATH.
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "first_hour_tools.py").write_text("def shout(text: str) -> str:\n    return text.upper() + '!'\n")
    (mine / "loopgate.yaml").write_text(starter.replace("tools:\n", "tools:\n  shout:\n    description: Shout it\n"
                                                        "    parameters: {type: object, properties: {text: {type: "
                                                        "string, examples: [hello]}}, required: [text]}\n"
                                                        "    python: \"first_hour_tools:shout\"\n", 1)
                                        .replace("tools: [get_weather, book_meeting]",
                                                 "tools: [get_weather, book_meeting, shout]"))
    checked = _installed(project, "check-config", "--config", str(mine / "loopgate.yaml"), cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    port = free_port()
    log_path = tmp_path / "mine.log"
    server = _serve_until_started([str(project / ".venv" / "bin" / "loopgate"), "serve", "--config",
                                   str(mine / "loopgate.yaml"), "--port", str(port)], tmp_path, log_path)
    try:
        answer = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", trust_env=False, timeout=60, json={
            "model": "demo", "messages": [{"role": "user", "content": "Say it loud. Use shout."}]}).json()
        assert answer["choices"][0]["message"]["content"] == "The shout tool returned: HELLO!", answer
    finally:
        _stop(server)


def test_the_built_wheel_carries_the_starting_config_and_the_license(first_run: tuple[str, int, Path],
                                                                      tmp_path: Path) -> None:
    """The editable install above reads the checkout; a wheel is what ``pip install loopgate`` gets."""
    _, _, project = first_run
    built = subprocess.run([str(project / ".venv" / "bin" / "pip"), "wheel", "--no-deps", "--quiet", "-w",
                            str(tmp_path), str(project)], env=clean_env(), capture_output=True, text=True,
                           timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = tmp_path.glob("loopgate-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        starter = "gateway/config/starter.yaml"
        assert starter in names and archive.read(starter) == (ROOT / starter).read_bytes()
        assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names), names
