"""Start-up as a new user meets it: which config is read, what ``check-config`` catches, how a failed start
looks, the banner, ``loopgate init`` and the OpenAPI description.

The command runs in a subprocess (``python -m gateway``) where its output and exit status are the
contract; the pieces it is built from are tested in process.
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import httpx
import pytest

from gateway import cli
from gateway.api.app import create_app
from gateway.api.openapi import SPEC
from gateway.api.startup_failure import describe
from gateway.config import INIT_NAME, PACKAGED_PATH, ConfigError, find_config, load_config, parse_config
from gateway.observability.banner import banner
from gateway.tools.preflight import preflight
from gateway.tools.python_source import ToolTargetError
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
STARTER = PACKAGED_PATH.read_text()


def run_cli(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120
            ) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("LOOPGATE_CONFIG", "OPENAI_API_KEY",
                                                                "ANTHROPIC_API_KEY", "GEMINI_API_KEY")}
    environ["PYTHONPATH"] = str(ROOT)
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "gateway", *args], cwd=cwd, env=environ, capture_output=True,
                          text=True, timeout=timeout)


def test_the_config_is_the_named_one_then_the_environment_then_the_conventional_places_then_the_packaged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert find_config(None, {}) == PACKAGED_PATH
    (tmp_path / INIT_NAME).write_text("{}")
    assert find_config(None, {}) == Path(INIT_NAME)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "gateway.yaml").write_text("{}")
    assert find_config(None, {}) == Path("config/gateway.yaml")  # the DESIGN contract comes first
    assert find_config(None, {"LOOPGATE_CONFIG": "elsewhere.yaml"}) == Path("elsewhere.yaml")
    assert find_config("mine.yaml", {"LOOPGATE_CONFIG": "elsewhere.yaml"}) == Path("mine.yaml")
    with pytest.raises(ConfigError, match=r"config file not found: elsewhere\.yaml"):
        load_config(None, {"LOOPGATE_CONFIG": "elsewhere.yaml"})  # named and missing: never the packaged one


def test_the_packaged_config_is_keyless_and_package_data() -> None:
    config = load_config(PACKAGED_PATH, {})
    assert config.providers["demo"].type == "mock" and not config.auth.enabled
    assert {"demo", "gpt", "claude", "gemini", "smart"} <= set(config.models)
    assert config.tools["book_meeting"].approval == "required"
    assert set(config.models["demo"].tools) == {"get_weather", "book_meeting"}
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        assert f"${{{name}:-}}" in STARTER
    assert preflight(config, None) == []
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["gateway"]
    relative = PACKAGED_PATH.relative_to(ROOT / "gateway").as_posix()
    assert any(fnmatch.fnmatch(relative, pattern) for pattern in patterns), (relative, patterns)


def test_the_example_config_has_an_approval_required_demo_tool() -> None:
    config = load_config(ROOT / "config" / "gateway.yaml", {})
    approval = [name for name, tool in config.tools.items() if tool.approval == "required"]
    assert approval and set(approval) <= set(config.models["demo"].tools)
    assert preflight(config, ROOT / "config" / "gateway.yaml") == []


def _config_with(tool_target: str, extra: str = "") -> str:
    return (f"providers: {{demo: {{type: mock}}}}\ntools:\n  t:\n    python: '{tool_target}'\n"
            f"models: {{demo: {{targets: [{{provider: demo, model: m}}], tools: [t]}}}}\n{extra}")


def test_preflight_names_the_key_of_each_problem(tmp_path: Path) -> None:
    config = parse_config(_config_with("gateway.demo:get_wether", "mcp_servers: {fs: {command: [no-such-binary-xyz]}}"),
                          {})
    problems = [str(p) for p in preflight(config, tmp_path / "c.yaml")]
    assert problems == ["tools.t.python: 'gateway.demo' has no attribute 'get_wether' (did you mean 'get_weather'?)",
                        "mcp_servers.fs.command: 'no-such-binary-xyz' is not an executable on PATH"]
    missing = parse_config(_config_with("not_a_module_anywhere:f"), {})
    (problem,) = preflight(missing, tmp_path / "c.yaml")
    assert problem.path == "tools.t.python" and "beside the config file" in problem.problem


@pytest.mark.slow
def test_a_tool_module_beside_the_config_imports_without_pythonpath(tmp_path: Path) -> None:
    beside = tmp_path / "project"
    beside.mkdir()
    (beside / "first_hour_tools.py").write_text("def shout(text: str) -> str:\n    return text.upper()\n")
    (beside / INIT_NAME).write_text(_config_with("first_hour_tools:shout"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = run_cli("check-config", "--config", str(beside / INIT_NAME), cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert "config OK" in done.stdout and "1 tools (imported)" in done.stdout


def test_a_tls_file_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    secret = tmp_path / "ca.pem"
    secret.write_text("x")
    secret.chmod(0)
    text = f"store: {{url: 'rediss://r:6380/0', tls: {{ca_file: '{secret}'}}}}"
    if os.geteuid() != 0:
        with pytest.raises(ConfigError, match=r"store.tls.ca_file: file not readable"):
            parse_config(text, {})
        return
    # Root reads every file only through its capabilities to override file modes (CAP_DAC_OVERRIDE,
    # CAP_DAC_READ_SEARCH): the check runs in a process still root but without them (util-linux setpriv).
    script = ("import sys\nfrom gateway.config import ConfigError, parse_config\n"
              "try:\n    parse_config(sys.argv[1], {})\nexcept ConfigError as exc:\n    print(exc)\n    sys.exit(3)\n")
    command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", sys.executable, "-c", script, text]
    done = subprocess.run(command, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "store.tls.ca_file: file not readable" in done.stdout, done.stdout


@pytest.mark.slow
def test_check_config_catches_a_misspelt_tool_and_serve_fails_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(STARTER.replace("gateway.demo:get_weather", "gateway.demo:get_wether"))
    expected = "tools.get_weather.python: 'gateway.demo' has no attribute 'get_wether' (did you mean 'get_weather'?)"
    checked = run_cli("check-config", "--config", "bad.yaml", cwd=tmp_path)
    assert checked.returncode == 2 and checked.stderr.strip() == f"loopgate: config error: {expected}"
    served = run_cli("serve", "--config", "bad.yaml", "--port", str(free_port()), cwd=tmp_path)
    assert served.returncode == 2 and served.stderr.strip() == f"loopgate: config error: {expected}"


def test_a_missing_or_broken_config_file_is_named_as_the_file_not_as_a_key(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """``check-config`` said ``<file>: config file not found``, as if ``<file>`` were a bad key."""
    missing = tmp_path / "nowhere.yaml"
    assert cli.main(["check-config", "--config", str(missing)]) == 2
    assert capsys.readouterr().err.strip() == f"loopgate: config error: config file not found: {missing}"
    (tmp_path / "broken.yaml").write_text("server: [")
    assert cli.main(["check-config", "--config", str(tmp_path / "broken.yaml")]) == 2
    said = capsys.readouterr().err.strip()
    assert said.startswith(f"loopgate: config error: {tmp_path / 'broken.yaml'} is not valid YAML")
    assert "<file>" not in said


def _serve_past_the_checks(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """``serve`` with the config checks skipped, so the failure happens inside the app's start-up."""
    script = "\n".join([
        "import argparse, sys", "from pathlib import Path", "from gateway import cli",
        "from gateway.config import load_config", "config = load_config('bad.yaml')",
        "args = argparse.Namespace(host=None, port=int(sys.argv[1]), workers=None, log_level=None,"
        " debug='--debug' in sys.argv)",
        "sys.exit(cli._serve(args, config, Path('bad.yaml'), False))"])
    (tmp_path / "bad.yaml").write_text(STARTER.replace("gateway.demo:get_weather", "gateway.demo:get_wether"))
    env = {k: v for k, v in os.environ.items() if k != "LOOPGATE_CONFIG"} | {"PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", script, str(free_port()), *flags], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_a_failure_inside_the_apps_start_up_is_one_line_exit_2_and_leaves_nothing_open(tmp_path: Path) -> None:
    done = _serve_past_the_checks(tmp_path)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, done.stderr
    assert errors[0].endswith("start-up failed: tools.get_weather.python: 'gateway.demo' has no attribute "
                              "'get_wether' (did you mean 'get_weather'?)")
    assert "Traceback" not in done.stderr and "\\n" not in done.stderr
    assert "Unclosed" not in done.stderr  # the tools' HTTP session and the store were closed again
    debug = _serve_past_the_checks(tmp_path, "--debug")
    assert debug.returncode == 2 and "Traceback (most recent call last)" in debug.stderr
    assert "Unclosed" not in debug.stderr


def test_the_banner_says_what_is_served_and_where_and_shows_no_secret() -> None:
    config = parse_config(STARTER.replace("memory://", "redis://:hunter2@cache.internal:6380/3"),
                          {"OPENAI_API_KEY": "sk-secret-value"})
    lines = banner(config, "9.9.9", "0.0.0.0", 8080, PACKAGED_PATH, True)
    text = "\n".join(lines)
    assert lines[0].startswith("Loopgate 9.9.9 listening on http://127.0.0.1:8080 (every interface")
    assert "store: redis://cache.internal:6380/3" in text and "hunter2" not in text and "sk-secret" not in text
    assert "route demo -> demo/loopgate-mock (tools: get_weather, book_meeting)" in lines
    assert "route smart -> openai/gpt-4.1, anthropic/claude-sonnet-4-5, gemini/gemini-2.5-pro" in lines
    assert "providers without a key (their calls fail with auth): anthropic, gemini" in lines
    assert "auth: OFF (no keys configured: any string works as a key; development only)" in lines
    for path in ("/ui/approvals", "/metrics", "/openapi.json"):
        assert f"http://127.0.0.1:8080{path}" in lines[-1]
    # The console's address, and that it is off with auth off (it needs an admin key), with how to enable it.
    assert "console: http://127.0.0.1:8080/ui/ (off: set auth.admin_keys to enable it)" in lines
    keyed = parse_config(STARTER.replace("keys: []", "keys: [{key: abc, tenant: t}]"), {})
    keyed_lines = banner(keyed, "1", "h", 1, PACKAGED_PATH, False)
    assert "auth: on (1 key in the config, 0 admin keys)" in keyed_lines  # "1 keys" before: counted right
    assert "console: http://h:1/ui/ (off: set auth.admin_keys to enable it)" in keyed_lines
    admin = parse_config(STARTER.replace("keys: []", "admin_keys: [{key: root-secret, name: ops}]"), {})
    admin_lines = banner(admin, "1", "h", 1, PACKAGED_PATH, False)
    assert "console: http://h:1/ui/ (on: sign in with an admin key; 1 configured)" in admin_lines
    assert "auth: on (0 keys in the config, 1 admin key)" in admin_lines
    assert "root-secret" not in "\n".join(admin_lines)


def test_init_writes_the_starting_config_and_never_overwrites_without_force(tmp_path: Path) -> None:
    target = tmp_path / "new" / INIT_NAME
    done = run_cli("init", str(tmp_path / "new"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert target.read_text() == STARTER and f"--config {target}" in done.stdout
    target.write_text("# mine\n")
    refused = run_cli("init", str(tmp_path / "new"), cwd=tmp_path)
    assert refused.returncode == 1 and "already exists; use --force" in refused.stderr
    assert target.read_text() == "# mine\n"
    assert run_cli("init", str(tmp_path / "new"), "--force", cwd=tmp_path).returncode == 0
    assert target.read_text() == STARTER


@pytest.mark.slow
def test_serve_with_no_config_anywhere_serves_the_packaged_default_with_a_notice(tmp_path: Path) -> None:
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if k not in ("LOOPGATE_CONFIG", "OPENAI_API_KEY")}
    environ["PYTHONPATH"] = str(ROOT)
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        server = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--port", str(port)], cwd=tmp_path,
                                  env=environ, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while "Application startup complete" not in log.read_text():
            assert server.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        answer = httpx.post(f"{url}/v1/chat/completions", json={"model": "demo", "messages": [
            {"role": "user", "content": "Book a meeting. Use book_meeting."}]}, timeout=30, trust_env=False).json()
        assert answer["gateway"]["status"] == "paused"  # the approval-required demo tool waits for a person
        text = log.read_text()
        assert "using the packaged starting config" in text
        assert f"listening on {url}" in text and "route demo -> demo/loopgate-mock" in text
        assert f"approvals inbox: {url}/ui/approvals" in text
    finally:
        server.terminate()
        server.wait(30)


async def test_openapi_json_is_a_valid_description_of_routes_the_app_serves() -> None:
    from openapi_spec_validator import validate

    validate(SPEC)  # raises on an invalid document
    app = create_app(load_config(PACKAGED_PATH, {}))
    served = {(route.path, method.lower()) for route in app.app.routes
              for method in (getattr(route, "methods", None) or ())}
    described = {(path, method) for path, item in SPEC["paths"].items() for method in item if method != "parameters"}
    assert described <= served, described - served
    for path in ("/v1/continuations/{id}", "/v1/continuations", "/v1/audit", "/admin/keys", "/admin/usage"):
        assert path in SPEC["paths"]
    transport = httpx.ASGITransport(app=app.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        response = await client.get("/openapi.json")
    assert response.status_code == 200 and response.json() == SPEC


def test_describe_names_the_key_of_start_up_errors() -> None:
    assert describe(ToolTargetError("t", "cannot import module 'x'")) == "tools.t.python: cannot import module 'x'"
    assert describe(ConfigError("store.url", "bad")) == "store.url: bad"
    assert describe(ValueError("tool 'x' (source 'python'): invalid JSON Schema:\n  y")) == \
        "tools.x: tool 'x' (source 'python'): invalid JSON Schema: y"
    assert describe(OSError("line one\nline two")) == "OSError: line one line two"


@pytest.mark.parametrize(("keys", "shown"), [("[]", True), ("[{key: abc, tenant: t}]", False)])
async def test_the_inbox_says_any_key_works_when_auth_is_off(keys: str, shown: bool) -> None:
    app = create_app(parse_config(STARTER.replace("keys: []", f"keys: {keys}"), {}))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app.app), base_url="http://gateway") as client:
        page = (await client.get("/ui/approvals")).text
    assert ("any string\n      works as a key here" in page) and ('<p id="auth-off" class="note">' in page) == shown
    assert ('<p id="auth-off" class="note" hidden>' in page) == (not shown)


def test_preflight_loads_the_stores_tls_files_as_the_store_will(tmp_path: Path) -> None:
    from tests.redis_servers import make_tls_certs, start_or_skip

    certs = start_or_skip(make_tls_certs, tmp_path / "certs")

    def problems(ca: str, cert: str, key: str) -> list[str]:
        config = parse_config(f"store: {{url: 'rediss://127.0.0.1:1/0', tls: {{ca_file: '{ca}', cert_file: '{cert}', "
                              f"key_file: '{key}'}}}}", {})
        return [str(problem) for problem in preflight(config, None)]

    assert problems(certs.ca_file, certs.client_cert, certs.client_key) == []
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    (ca_problem,) = problems(str(garbage), certs.client_cert, certs.client_key)
    assert ca_problem.startswith("store.tls.ca_file: not a usable CA certificate file")
    (pair_problem,) = problems(certs.ca_file, certs.client_cert, certs.server_key)  # a key of another certificate
    assert pair_problem.startswith("store.tls.cert_file: the certificate and key_file do not load together")


def test_an_unforeseen_start_up_error_is_still_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Whatever fails before serving (here: the checks themselves, made to fail) is one line, unless --debug."""
    from gateway.tools import preflight as preflight_module

    def broken(*_: object) -> None:
        raise OSError("disk on fire\nsecond line")

    monkeypatch.setattr(preflight_module, "preflight", broken)
    assert cli.main(["check-config", "--config", str(PACKAGED_PATH)]) == 2
    # Named, so no "nothing found" notice: just the one line.
    assert capsys.readouterr().err.strip() == (
        "loopgate: start-up failed: OSError: disk on fire second line (--debug shows the traceback)")
    with pytest.raises(OSError, match="disk on fire"):
        cli.main(["check-config", "--config", str(PACKAGED_PATH), "--debug"])


# A start-up in a fresh interpreter: which configs make it import aiohttp (HTTP tools and webhooks need it)?
_AIOHTTP_WITH = """
import asyncio, sys
from gateway.api.runtime import Runtime
from gateway.config import parse_config

BASE = ("providers: {p: {type: openai, api_key: k, base_url: 'http://127.0.0.1:9/v1'}}\\n"
        "models: {m: {targets: [{provider: p, model: x}], tools: [t]}}\\n")
TOOLS = {"python": "tools: {t: {description: d, python: 'gateway.demo:get_weather'}}\\n",
         "http": "tools: {t: {description: d, http: {url: 'http://127.0.0.1:9/t'}}}\\n"}
HOOKS = "notifications: {webhooks: [{url: 'http://127.0.0.1:9/hook', secret: 0123456789abcdef0123456789abcdef}]}\\n"

async def started(text: str) -> bool:
    runtime = await Runtime.start(parse_config(text, env={}))
    try:
        return "aiohttp" in sys.modules
    finally:
        await runtime.stop()

print(asyncio.run(started(BASE + TOOLS[sys.argv[1]] + (HOOKS if sys.argv[2] == "hooks" else ""))))
"""


@pytest.mark.parametrize(("tools", "hooks", "imported"), [
    ("python", "", False), ("http", "", True), ("python", "hooks", True)])
def test_aiohttp_is_imported_at_start_up_only_for_http_tools_or_webhooks(tools: str, hooks: str,
                                                                         imported: bool) -> None:
    """aiohttp costs a tenth of a gateway's start-up CPU (its import builds TLS contexts): only where used."""
    done = subprocess.run([sys.executable, "-c", _AIOHTTP_WITH, tools, hooks or "none"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(imported)]
