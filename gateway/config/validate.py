"""Turning a parsed YAML tree into typed config, with one message per mistake naming its key path.

Unknown keys are errors: a typo such as ``targts`` would otherwise silently fall back to a
default and surface later as a confusing runtime behaviour.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

from gateway.config.approval_section import approval_policy
from gateway.config.background_section import background_section
from gateway.config.checks import (
    CONTEXT_KEYS,
    HTTP_TOOL_KEYS,
    MCP_KEYS,
    PROVIDER_KEYS,
    ROUTE_KEYS,
    ROUTING_KEYS,
    SERVER_KEYS,
    TARGET_KEYS,
    TOOL_KEYS,
    TOP_KEYS,
    ConfigError,
    T,
    closest,
    get,
    header_map,
    mapping,
    one_line,
    positive,
    string_map,
    type_name,
)
from gateway.config.keys_section import auth_section, check_key_models, tenants_section
from gateway.config.model import (
    PROVIDER_TYPES,
    Config,
    ContextConfig,
    HttpToolConfig,
    McpServerConfig,
    ProviderConfig,
    ReasoningPassback,
    RouteConfig,
    RoutingConfig,
    ServerConfig,
    TargetConfig,
    ToolConfig,
)
from gateway.config.notifications_section import notifications_section, public_url
from gateway.config.observability_section import logging_section, observability_section
from gateway.config.prices import check_target_prices, parse_price, parse_prices, usage_section
from gateway.config.store_section import store_section
from gateway.providers.urls import model_problem

__all__ = ["ConfigError", "build_config", "deadline_warnings"]

# Keys only ``type: mock`` reads; bounds keep a typo (60000000) from parking requests for days.
_MOCK_KEYS = ("latency_ms", "tokens_per_s")
_MAX_MOCK_LATENCY_MS = 600_000.0
_MAX_MOCK_TOKENS_PER_S = 1_000_000.0

def _server(raw: Any) -> ServerConfig:
    section = mapping(raw, "server", SERVER_KEYS)
    port = get(section, "port", "server", int, 8080)
    if not 0 < port < 65536:
        raise ConfigError("server.port", f"must be between 1 and 65535, got {port}")
    return ServerConfig(
        host=get(section, "host", "server", str, "127.0.0.1"),
        port=port,
        max_body_bytes=int(positive(get(section, "max_body_bytes", "server", int, 4 * 1024 * 1024),
                                     "server.max_body_bytes")),
        workers=int(positive(get(section, "workers", "server", int, 1), "server.workers")),
        max_header_bytes=int(positive(get(section, "max_header_bytes", "server", int, 64 * 1024),
                                       "server.max_header_bytes")),
        header_timeout_s=_server_timeout(section, "header_timeout_s", 10.0),
        body_timeout_s=_server_timeout(section, "body_timeout_s", 30.0),
        keepalive_timeout_s=_server_timeout(section, "keepalive_timeout_s", 5.0),
        public_url=public_url(section.get("public_url")),
        gc_young_threshold=_gc_threshold(section),
    )


def _gc_threshold(section: dict[str, Any]) -> int:
    value = get(section, "gc_young_threshold", "server", int, 10_000)
    if value != 0 and not 700 <= value <= 1_000_000:
        raise ConfigError("server.gc_young_threshold", f"must be 0 (Python's settings) or 700 to 1000000, got {value}")
    return int(value)


def _server_timeout(section: dict[str, Any], key: str, default: float) -> float:
    """A connection timer: positive and finite (an infinite one would switch the protection off)."""
    value = positive(get(section, key, "server", float, default), f"server.{key}")
    if not math.isfinite(value):
        raise ConfigError(f"server.{key}", f"must be a finite number of seconds, got {value}")
    return value


_DEFAULT_BASE_URLS = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com",
    "litellm": "",
    "mock": "",
}


def _provider(name: str, raw: Any) -> ProviderConfig:
    path = f"providers.{name}"
    section = mapping(raw, path, PROVIDER_KEYS)
    kind = get(section, "type", path, str, None)
    if kind is None:
        raise ConfigError(f"{path}.type", f"is required (one of {', '.join(PROVIDER_TYPES)})")
    if kind not in PROVIDER_TYPES:
        raise ConfigError(f"{path}.type", f"unknown provider type '{kind}' (one of {', '.join(PROVIDER_TYPES)})")
    base_url = get(section, "base_url", path, str, _DEFAULT_BASE_URLS[kind]).rstrip("/")
    if kind == "mock":
        latency_ms, tokens_per_s = _mock_pace(section, path)
    else:
        latency_ms = tokens_per_s = 0.0
        for key in _MOCK_KEYS:
            if key in section:
                raise ConfigError(f"{path}.{key}", "is only for providers of type mock")
    if kind not in ("litellm", "mock"):
        parsed = urlparse(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(f"{path}.base_url", f"must be an http(s) URL, got '{base_url}'")
    if kind == "litellm" and importlib.util.find_spec("litellm") is None:
        raise ConfigError(f"{path}.type", "litellm providers need: pip install 'loopgate[litellm]'")
    return ProviderConfig(
        name=name,
        type=kind,
        base_url=base_url,
        api_key=one_line(get(section, "api_key", path, str, ""), f"{path}.api_key"),
        timeout_s=positive(get(section, "timeout_s", path, float, 600.0), f"{path}.timeout_s"),
        connect_timeout_s=positive(get(section, "connect_timeout_s", path, float, 10.0),
                                    f"{path}.connect_timeout_s"),
        write_timeout_s=positive(get(section, "write_timeout_s", path, float, 30.0), f"{path}.write_timeout_s"),
        pool_timeout_s=positive(get(section, "pool_timeout_s", path, float, 30.0), f"{path}.pool_timeout_s"),
        idle_timeout_s=positive(get(section, "idle_timeout_s", path, float, 4.0), f"{path}.idle_timeout_s",
                                 allow_zero=True),
        max_response_bytes=int(positive(get(section, "max_response_bytes", path, int, 32 * 1024 * 1024),
                                         f"{path}.max_response_bytes")),
        headers=header_map(section.get("headers"), f"{path}.headers"),
        max_connections=int(positive(get(section, "max_connections", path, int, 1000),
                                      f"{path}.max_connections")),
        default_max_tokens=int(positive(get(section, "default_max_tokens", path, int, 4096),
                                         f"{path}.default_max_tokens")),
        api_version=get(section, "api_version", path, str, None),
        reasoning_passback=_passback(section.get("reasoning_passback", "auto"), f"{path}.reasoning_passback"),
        direct=get(section, "direct", path, bool, True),
        latency_ms=latency_ms,
        tokens_per_s=tokens_per_s,
        prices=parse_prices(section.get("prices"), f"{path}.prices"),
    )


def _mock_pace(section: dict[str, Any], path: str) -> tuple[float, float]:
    """``latency_ms`` (0 to 600000, default 0) and ``tokens_per_s`` (0 = unpaced, to 1000000, default 0)."""
    pace = []
    for key, ceiling in (("latency_ms", _MAX_MOCK_LATENCY_MS), ("tokens_per_s", _MAX_MOCK_TOKENS_PER_S)):
        value = positive(get(section, key, path, float, 0.0), f"{path}.{key}", allow_zero=True)
        if not value <= ceiling:  # also refuses nan
            raise ConfigError(f"{path}.{key}", f"must be at most {ceiling:g}, got {value}")
        pace.append(value)
    return pace[0], pace[1]


def _passback(value: Any, path: str) -> ReasoningPassback:
    """``auto`` | ``true`` | ``false``; the strings too, as an environment variable delivers them."""
    if value is None or value == "auto":
        return "auto"
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ConfigError(path, f"must be auto, true or false, got {value!r}")


def _tool(name: str, raw: Any) -> ToolConfig:
    path = f"tools.{name}"
    section = mapping(raw, path, TOOL_KEYS)
    params = get(section, "parameters", path, dict, {"type": "object", "properties": {}})
    if params.get("type", "object") != "object":
        raise ConfigError(f"{path}.parameters", "must be a JSON Schema of type object")
    _check_schema(params, f"{path}.parameters")
    http_raw = section.get("http")
    python = get(section, "python", path, str, None)
    if (http_raw is None) == (python is None):
        raise ConfigError(path, "needs exactly one of 'http' or 'python'")
    http = None
    if http_raw is not None:
        hpath = f"{path}.http"
        hsec = mapping(http_raw, hpath, HTTP_TOOL_KEYS)
        url = get(hsec, "url", hpath, str, "")
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(f"{hpath}.url", f"must be an http(s) URL, got '{url}'")
        http = HttpToolConfig(
            url=url,
            timeout_s=positive(get(hsec, "timeout_s", hpath, float, 30.0), f"{hpath}.timeout_s"),
            headers=header_map(hsec.get("headers"), f"{hpath}.headers"),
        )
    if python is not None and (":" not in python or not all(python.split(":", 1))):
        raise ConfigError(f"{path}.python", f"must look like 'package.module:function', got '{python}'")
    approval, approval_timeout = approval_policy(section, path)
    timeout = http.timeout_s if http else get(section, "timeout_s", path, float, 30.0)
    return ToolConfig(
        name=name,
        description=get(section, "description", path, str, ""),
        parameters=params,
        http=http,
        python=python,
        approval=approval,
        timeout_s=positive(timeout, f"{path}.timeout_s"),
        approval_timeout_s=approval_timeout,
    )


def _check_schema(schema: dict[str, Any], path: str) -> None:
    from jsonschema import Draft202012Validator, SchemaError  # start-up only

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ConfigError(path, f"invalid JSON Schema: {exc.message}") from None


def _mcp_server(name: str, raw: Any) -> McpServerConfig:
    path = f"mcp_servers.{name}"
    section = mapping(raw, path, MCP_KEYS)
    url = get(section, "url", path, str, None)
    command = get(section, "command", path, list, None)
    if (url is None) == (command is None):
        raise ConfigError(path, "needs exactly one of 'url' (streamable HTTP) or 'command' (stdio)")
    if url is not None:
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(f"{path}.url", f"must be an http(s) URL, got '{url}'")
    if command is not None and (not command or not all(isinstance(part, str) and part for part in command)):
        raise ConfigError(f"{path}.command", "must be a non-empty list of strings")
    approval, approval_timeout = approval_policy(section, path)
    return McpServerConfig(
        name=name,
        url=url,
        command=tuple(command or ()),
        headers=header_map(section.get("headers"), f"{path}.headers"),
        env=string_map(section.get("env"), f"{path}.env"),
        timeout_s=positive(get(section, "timeout_s", path, float, 30.0), f"{path}.timeout_s"),
        approval=approval,
        refresh_s=positive(get(section, "refresh_s", path, float, 300.0), f"{path}.refresh_s"),
        approval_timeout_s=approval_timeout,
    )


def _route(name: str, raw: Any, providers: dict[str, ProviderConfig], tools: dict[str, ToolConfig],
           mcp_servers: dict[str, McpServerConfig]) -> RouteConfig:
    path = f"models.{name}"
    section = mapping(raw, path, ROUTE_KEYS)
    raw_targets = get(section, "targets", path, list, None)
    if not raw_targets:
        raise ConfigError(f"{path}.targets", "needs at least one target")
    targets = []
    for i, entry in enumerate(raw_targets):
        tpath = f"{path}.targets[{i}]"
        item = mapping(entry, tpath, TARGET_KEYS)
        provider = get(item, "provider", tpath, str, "")
        if provider not in providers:
            hint = closest(provider, set(providers))
            raise ConfigError(f"{tpath}.provider", f"unknown provider '{provider}'{hint}")
        model = get(item, "model", tpath, str, "")
        if not model:
            raise ConfigError(f"{tpath}.model", "is required")
        problem = model_problem(model)
        if problem is not None:
            raise ConfigError(f"{tpath}.model", f"{model!r} {problem}")
        price = parse_price(item["price"], f"{tpath}.price") if item.get("price") is not None else None
        targets.append(TargetConfig(provider=provider, model=model, price=price))
    tool_names: list[str] = []
    mcp_names: list[str] = []
    for i, tool in enumerate(get(section, "tools", path, list, [])):
        if isinstance(tool, str) and tool.startswith("mcp:"):
            server = tool[4:]
            if server not in mcp_servers:
                hint = closest(server, set(mcp_servers))
                raise ConfigError(f"{path}.tools[{i}]", f"unknown MCP server '{server}'{hint}")
            mcp_names.append(server)
        elif tool not in tools:
            raise ConfigError(f"{path}.tools[{i}]", f"unknown tool '{tool}'{closest(str(tool), set(tools))}")
        else:
            tool_names.append(tool)
    iterations = get(section, "max_tool_iterations", path, int, 25)
    window = get(section, "context_window", path, int, None)
    ctx_raw = mapping(section.get("context"), f"{path}.context", CONTEXT_KEYS)
    threshold = get(ctx_raw, "threshold", f"{path}.context", float, 0.8)
    if not 0 < threshold <= 1:
        raise ConfigError(f"{path}.context.threshold", f"must be in (0, 1], got {threshold}")
    return RouteConfig(
        name=name,
        targets=tuple(targets),
        tools=tuple(tool_names),
        mcp_servers=tuple(mcp_names),
        max_tool_iterations=int(positive(iterations, f"{path}.max_tool_iterations")),
        context_window=None if window is None else int(positive(window, f"{path}.context_window")),
        retries=int(positive(get(section, "retries", path, int, 0), f"{path}.retries", allow_zero=True)),
        tool_concurrency=int(positive(get(section, "tool_concurrency", path, int, 8),
                                       f"{path}.tool_concurrency")),
        context=ContextConfig(
            threshold=threshold,
            compress_with=get(ctx_raw, "compress_with", f"{path}.context", str, None),
            max_tool_result_tokens=get(ctx_raw, "max_tool_result_tokens", f"{path}.context", int, None),
        ),
    )


def _routing(raw: Any) -> RoutingConfig:
    section = mapping(raw, "routing", ROUTING_KEYS)
    defaults = RoutingConfig()

    def number(key: str) -> float:
        return positive(get(section, key, "routing", float, getattr(defaults, key)), f"routing.{key}",
                         allow_zero=True)

    return RoutingConfig(
        backoff_base_s=number("backoff_base_s"),
        backoff_max_s=number("backoff_max_s"),
        retry_after_cap_s=number("retry_after_cap_s"),
        breaker_failures=int(positive(get(section, "breaker_failures", "routing", int, 3),
                                       "routing.breaker_failures")),
        breaker_cooldown_s=number("breaker_cooldown_s"),
        request_timeout_s=positive(get(section, "request_timeout_s", "routing", float, 900.0),
                                    "routing.request_timeout_s"),
    )


def _named(raw: Any, section: str, build: Callable[[str, Any], T]) -> dict[str, T]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(section, f"expected a mapping of names, got {type_name(raw)}")
    return {str(name): build(str(name), value) for name, value in raw.items()}


def build_config(raw: dict[str, Any]) -> Config:
    mapping(raw, "", TOP_KEYS)
    providers = _named(raw.get("providers"), "providers", _provider)
    tools = _named(raw.get("tools"), "tools", _tool)
    mcp_servers = _named(raw.get("mcp_servers"), "mcp_servers", _mcp_server)
    models = _named(raw.get("models"), "models", lambda n, v: _route(n, v, providers, tools, mcp_servers))
    for name, route in models.items():
        target = route.context.compress_with
        if target is not None and target not in models:
            raise ConfigError(f"models.{name}.context.compress_with", f"unknown model route '{target}'")
    check_target_prices(models)
    auth = auth_section(raw.get("auth"))
    check_key_models(auth, set(models), set(providers))
    server = _server(raw.get("server"))
    return Config(
        server=server,
        auth=auth,
        store=store_section(raw.get("store")),
        providers=providers,
        tools=tools,
        mcp_servers=mcp_servers,
        models=models,
        routing=_routing(raw.get("routing")),
        usage=usage_section(raw.get("usage")),
        tenants=tenants_section(raw.get("tenants")),
        background=background_section(raw.get("background")),
        logging=logging_section(raw.get("logging")),
        observability=observability_section(raw.get("observability")),
        notifications=notifications_section(raw.get("notifications"), server.public_url),
    )


def deadline_warnings(config: Config) -> list[str]:
    """Targets that can use up the whole request deadline on their own (valid, but failover then never happens)."""
    limit = config.routing.request_timeout_s
    warnings = []
    for name, route in config.models.items():
        for index, target in enumerate(route.targets):
            worst = (route.retries + 1) * config.providers[target.provider].timeout_s
            if worst >= limit:
                consequence = ("the targets after it may never be tried" if index < len(route.targets) - 1
                               else "its retries cannot all happen")
                warnings.append(f"models.{name}: target {target.label}: (retries + 1) x timeout_s = {worst:g} s >= "
                                f"routing.request_timeout_s = {limit:g} s; a target that stalls uses up the request "
                                f"deadline, so {consequence}")
    return warnings
