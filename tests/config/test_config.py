"""Config loading and validation: one test per kind of mistake, each naming its key path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config import ConfigError, load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]

GOOD = """
server: {host: 127.0.0.1, port: 8080, max_body_bytes: 1000}
auth:
  keys:
    - {key: "${TEAM_A_KEY}", tenant: team-a}
    - {key: cron, tenant: jobs, headless: true}
store: {url: "${STORE:-memory://}", continuation_ttl_s: 60}
providers:
  openai: {type: openai, base_url: https://api.openai.com/v1, api_key: "${OPENAI_API_KEY:-}"}
  claude: {type: anthropic, api_key: k}
  gemini: {type: gemini, timeout_s: 30}
tools:
  get_weather:
    description: Weather
    parameters: {type: object, properties: {city: {type: string}}, required: [city]}
    http: {url: "http://weather.internal/run", timeout_s: 10}
  delete_record:
    description: Delete
    parameters: {type: object, properties: {id: {type: string}}}
    python: "tests.e2e.sample_tools:delete_record"
    approval: required
models:
  smart:
    targets:
      - {provider: openai, model: gpt-4.1}
      - {provider: claude, model: claude-sonnet-4-5}
    tools: [get_weather, delete_record]
    max_tool_iterations: 10
    context_window: 128000
    retries: 2
    context: {threshold: 0.7, max_tool_result_tokens: 2000}
"""
ENV = {"TEAM_A_KEY": "secret-a"}


def mistake(text: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, ENV if env is None else env)
    return str(caught.value)


def test_the_contract_example_parses_into_typed_objects() -> None:
    config = parse_config(GOOD, ENV)
    assert config.server.max_body_bytes == 1000
    assert [(k.key, k.tenant, k.headless) for k in config.auth.keys] == [("secret-a", "team-a", False),
                                                                         ("cron", "jobs", True)]
    assert config.store.url == "memory://" and config.store.kind == "memory"
    assert config.providers["claude"].base_url == "https://api.anthropic.com"
    assert config.providers["gemini"].timeouts.read == 30.0
    assert config.providers["openai"].api_key == ""
    route = config.models["smart"]
    assert [t.label for t in route.targets] == ["openai:gpt-4.1", "claude:claude-sonnet-4-5"]
    assert route.retries == 2 and route.max_tool_iterations == 10 and route.context.threshold == 0.7
    assert config.tools["delete_record"].approval == "required"
    assert config.tools["get_weather"].http is not None and config.tools["get_weather"].http.timeout_s == 10


def test_interpolation_with_defaults_and_types() -> None:
    config = parse_config("server: {port: '${PORT:-9090}'}\nstore: {url: '${STORE:-redis://r:6379/0}'}", {})
    assert config.server.port == 9090 and config.store.kind == "redis"
    assert parse_config("server: {port: '${PORT}'}", {"PORT": "7070"}).server.port == 7070


def test_unset_variable_names_where() -> None:
    assert mistake(GOOD, {}) == "auth.keys[0].key: environment variable TEAM_A_KEY is not set"


def test_unknown_provider_in_target() -> None:
    text = GOOD.replace("{provider: claude, model", "{provider: claud, model")
    assert mistake(text) == "models.smart.targets[1].provider: unknown provider 'claud' (did you mean 'claude'?)"


def test_unknown_provider_type() -> None:
    message = mistake(GOOD.replace("type: gemini", "type: bard"))
    assert message.startswith("providers.gemini.type: unknown provider type")


def test_unknown_key_is_a_typo() -> None:
    assert mistake(GOOD.replace("    targets:\n", "    targts:\n")) == (
        "models.smart.targts: unknown key (did you mean 'targets'?)")


@pytest.mark.parametrize(("find", "replace", "expected"), [
    ("    retries: 2\n", "    max_tool_result_tokens: 2000\n",
     "models.smart.max_tool_result_tokens: unknown key (did you mean models.smart.context.max_tool_result_tokens?)"),
    ("    retries: 2\n", "    request_timeout_s: 30\n",
     "models.smart.request_timeout_s: unknown key (did you mean routing.request_timeout_s?)"),
    ("{provider: openai, model: gpt-4.1}", "{provider: openai, model: gpt-4.1, retries: 1}",
     "models.smart.targets[0].retries: unknown key (did you mean models.smart.retries?)"),
    ("  smart:\n", "  gpt-4.1:\n", None),  # a route name with a dot: the hint keeps it whole
    ("max_body_bytes: 1000}", "max_body_bytes: 1000, continuation_ttl_s: 5}",
     "server.continuation_ttl_s: unknown key (did you mean store.continuation_ttl_s?)"),
    ("claude: {type: anthropic, api_key: k}", "claude: {type: anthropic, api_key: k, retries: 1}",
     "providers.claude.retries: unknown key (did you mean models.<name>.retries?)"),
    ('http: {url: "http://weather.internal/run", timeout_s: 10}', 'url: "http://weather.internal/run"',
     "tools.get_weather.url: unknown key (did you mean tools.get_weather.http.url?)"),
])
def test_a_key_in_the_wrong_section_names_the_right_one(find: str, replace: str, expected: str | None) -> None:
    if expected is None:
        text = GOOD.replace(find, replace).replace("    retries: 2\n", "    max_tool_result_tokens: 2000\n")
        expected = ("models.gpt-4.1.max_tool_result_tokens: unknown key "
                    "(did you mean models.gpt-4.1.context.max_tool_result_tokens?)")
    else:
        text = GOOD.replace(find, replace)
    assert text != GOOD
    assert mistake(text) == expected


@pytest.mark.parametrize(("value", "expected"), [("", "auto"), ("reasoning_passback: auto", "auto"),
                                                 ("reasoning_passback: true", True),
                                                 ("reasoning_passback: 'false'", False)])
def test_reasoning_passback(value: str, expected: object) -> None:
    text = GOOD.replace("gemini: {type: gemini, timeout_s: 30}",
                        "gemini: {type: gemini, timeout_s: 30}\n  ds: {type: openai" + (", " + value if value else "")
                        + "}")
    assert parse_config(text, ENV).providers["ds"].reasoning_passback == expected
    bad = GOOD.replace("gemini: {type: gemini, timeout_s: 30}",
                       "gemini: {type: gemini, timeout_s: 30}\n  ds: {type: openai, reasoning_passback: 1}")
    assert mistake(bad) == "providers.ds.reasoning_passback: must be auto, true or false, got 1"


def test_wrong_type() -> None:
    message = mistake(GOOD.replace("retries: 2", "retries: two"))
    assert message == "models.smart.retries: expected an integer, got a string"


def test_bad_url() -> None:
    assert mistake(GOOD.replace("https://api.openai.com/v1", "api.openai.com")).startswith("providers.openai.base_url:")


def test_line_breaks_in_header_values_are_refused() -> None:
    base = "providers:\n  p: {type: openai, base_url: 'http://h/v1', api_key: '${KEY}'%s}\n"
    assert mistake(base % "", {"KEY": "sk-secret\n"}) == ("providers.p.api_key: contains a line break (a trailing "
                                                         "newline from a secret file or an environment variable?)")
    assert mistake(base % ", headers: {X-Team: '${TEAM}'}", {"KEY": "k", "TEAM": "a\r\nInjected: 1"}).startswith(
        "providers.p.headers.X-Team: contains a line break")
    tool = "tools:\n  t: {description: d, http: {url: 'http://h/run', headers: {A: '${V}'}}}\n"
    assert mistake(tool, {"V": "x\n"}).startswith("tools.t.http.headers.A: contains a line break")
    assert parse_config(base % "", {"KEY": "sk-fine"}).providers["p"].api_key == "sk-fine"


def test_unknown_tool_on_route() -> None:
    assert mistake(GOOD.replace("tools: [get_weather, delete_record]", "tools: [get_wether]")) == (
        "models.smart.tools[0]: unknown tool 'get_wether' (did you mean 'get_weather'?)")


def test_tool_needs_exactly_one_source() -> None:
    text = GOOD.replace('    python: "tests.e2e.sample_tools:delete_record"\n', "")
    assert mistake(text) == "tools.delete_record: needs exactly one of 'http' or 'python'"


def test_invalid_json_schema() -> None:
    text = GOOD.replace("properties: {id: {type: string}}", "properties: {id: {type: strng}}")
    assert mistake(text).startswith("tools.delete_record.parameters: invalid JSON Schema")


def test_route_without_targets() -> None:
    assert mistake("models: {x: {targets: []}}") == "models.x.targets: needs at least one target"


def test_bad_store_url() -> None:
    assert mistake("store: {url: 'mysql://db'}").startswith("store.url: unsupported store")


def test_out_of_range_values() -> None:
    assert mistake("server: {port: 70000}") == "server.port: must be between 1 and 65535, got 70000"
    assert mistake(GOOD.replace("threshold: 0.7", "threshold: 1.5")) == (
        "models.smart.context.threshold: must be in (0, 1], got 1.5")


def test_duplicate_and_empty_keys() -> None:
    text = GOOD.replace("{key: cron, tenant: jobs", "{key: secret-a, tenant: jobs")
    assert mistake(text) == "auth.keys[1].key: duplicates an earlier key"
    message = mistake("auth: {keys: [{key: '', tenant: a}]}")
    assert message == "auth.keys[0].key: is empty (is its environment variable set?)"


def test_compress_with_must_name_a_route() -> None:
    text = GOOD.replace("threshold: 0.7,", "threshold: 0.7, compress_with: summarizr,")
    assert mistake(text) == "models.smart.context.compress_with: unknown model route 'summarizr'"


def test_not_yaml() -> None:
    assert "not valid YAML" in mistake("models: [unclosed")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml", {})


def test_loopgate_config_env_var(tmp_path: Path) -> None:
    path = tmp_path / "g.yaml"
    path.write_text("server: {port: 1234}")
    assert load_config(None, {"LOOPGATE_CONFIG": str(path)}).server.port == 1234


@pytest.mark.slow
def test_check_config_cli(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("{provider: claude, model", "{provider: claud, model"))
    run = subprocess.run([sys.executable, "-m", "gateway", "check-config", "--config", str(bad)], cwd=ROOT,
                         capture_output=True, text=True, env={"TEAM_A_KEY": "x", "PATH": "/usr/bin:/bin"}, timeout=60)
    assert run.returncode == 2
    assert "models.smart.targets[1].provider: unknown provider 'claud'" in run.stderr
    assert "Traceback" not in run.stderr
    good = subprocess.run([sys.executable, "-m", "gateway", "check-config", "--config",
                           str(ROOT / "config" / "gateway.yaml")], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert good.returncode == 0 and "config OK" in good.stdout


def test_mcp_servers() -> None:
    text = GOOD.replace("models:\n", "mcp_servers:\n  github: {url: 'https://mcp.example/mcp', approval: required}\n"
                        "  files: {command: [python, -m, files_server], env: {ROOT: /srv}, refresh_s: 60}\nmodels:\n")
    config = parse_config(text.replace("tools: [get_weather, delete_record]",
                                       "tools: [get_weather, 'mcp:github', 'mcp:files']"), ENV)
    assert config.models["smart"].tools == ("get_weather",)
    assert config.models["smart"].mcp_servers == ("github", "files")
    assert config.mcp_servers["github"].approval == "required"
    assert config.mcp_servers["files"].command == ("python", "-m", "files_server")
    assert mistake(text.replace("tools: [get_weather, delete_record]", "tools: ['mcp:gitlab']")) == (
        "models.smart.tools[0]: unknown MCP server 'gitlab' (did you mean 'github'?)")
    assert mistake("mcp_servers: {x: {timeout_s: 3}}") == (
        "mcp_servers.x: needs exactly one of 'url' (streamable HTTP) or 'command' (stdio)")
    assert config.mcp_servers["files"].env_inherit == "safe"
    assert mistake("mcp_servers: {x: {command: [srv], env_inherit: everything}}") == (
        "mcp_servers.x.env_inherit: must be one of safe, all; got 'everything'")
    assert mistake("mcp_servers: {x: {url: 'https://m.example/mcp', env_inherit: all}}") == (
        "mcp_servers.x.env_inherit: applies to a stdio server ('command') only")
    assert mistake("mcp_servers: {x: {command: [srv], elicitation: ask}}") == (
        "mcp_servers.x.elicitation: must be one of pause, decline; got 'ask'")
    assert mistake("mcp_servers: {x: {command: [srv], sampling_max_tokens: 0}}") == (
        "mcp_servers.x.sampling_max_tokens: must be an integer from 1 to 128000")


def test_sampling_route_must_name_a_chat_route() -> None:
    servers = "mcp_servers:\n  files: {url: 'http://mcp.internal/mcp', sampling_route: %s}\nmodels:\n"
    assert mistake(GOOD.replace("models:\n", servers % "smrt", 1)) == (
        "mcp_servers.files.sampling_route: unknown model route 'smrt' (chat routes: smart)")
    assert parse_config(GOOD.replace("models:\n", servers % "smart", 1), ENV).mcp_servers["files"].sampling_route == \
        "smart"


def test_a_routes_count_tokens_is_upstream_by_default_and_local_or_nothing_else() -> None:
    assert parse_config(GOOD, ENV).models["smart"].count_tokens == "upstream"
    local = GOOD.replace("    retries: 2\n", "    retries: 2\n    count_tokens: local\n")
    assert parse_config(local, ENV).models["smart"].count_tokens == "local"
    problem = mistake(GOOD.replace("    retries: 2\n", "    retries: 2\n    count_tokens: exact\n"))
    assert "models.smart.count_tokens" in problem and "'upstream' or 'local'" in problem


@pytest.mark.parametrize("value", ["map", "drop", "refuse"])
def test_a_routes_hosted_tools_is_map_drop_or_refuse(value: str) -> None:
    assert parse_config(GOOD, ENV).models["smart"].hosted_tools == "map"
    chosen = GOOD.replace("    retries: 2\n", f"    retries: 2\n    hosted_tools: {value}\n")
    assert parse_config(chosen, ENV).models["smart"].hosted_tools == value
    problem = mistake(GOOD.replace("    retries: 2\n", "    retries: 2\n    hosted_tools: pass\n"))
    assert "models.smart.hosted_tools" in problem and "map, drop, refuse" in problem
