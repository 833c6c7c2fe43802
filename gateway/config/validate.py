"""Turning a parsed YAML tree into typed config, with one message per mistake naming its key path.

Unknown keys are errors: a typo such as ``targts`` would otherwise silently fall back to a
default and surface later as a confusing runtime behaviour.
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlparse

from gateway.config.model import (
    PROVIDER_TYPES,
    REDIS_SCHEMES,
    ApiKey,
    AuthConfig,
    Config,
    ContextConfig,
    HttpToolConfig,
    McpServerConfig,
    ProviderConfig,
    ReasoningPassback,
    RouteConfig,
    RoutingConfig,
    ServerConfig,
    StoreConfig,
    StoreSentinel,
    StoreTls,
    TargetConfig,
    ToolConfig,
)
from gateway.providers.urls import model_problem

T = TypeVar("T")


class ConfigError(Exception):
    """A config mistake: ``path`` is the key path, ``problem`` what is wrong with it."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


# The keys of every section, named by a path template (NAME: an entry's name, N: a list index). One
# table, so a key that is unknown where it was written but valid elsewhere can name where it belongs.
_TOP_KEYS = {"server", "auth", "store", "providers", "tools", "mcp_servers", "models", "routing"}
_SERVER_KEYS = {"host", "port", "max_body_bytes", "workers", "max_header_bytes", "header_timeout_s", "body_timeout_s",
                "keepalive_timeout_s"}
_AUTH_KEYS = {"keys"}
_API_KEY_KEYS = {"key", "tenant", "headless"}
_STORE_KEYS = {"url", "continuation_ttl_s", "username", "password", "tls", "cluster", "sentinel", "wait_replicas",
               "wait_timeout_ms"}
_STORE_TLS_KEYS = {"ca_file", "cert_file", "key_file"}
_SENTINEL_KEYS = {"master", "nodes", "username", "password", "tls"}
_PROVIDER_KEYS = {"type", "base_url", "api_key", "timeout_s", "connect_timeout_s", "headers",
                  "max_connections", "default_max_tokens", "api_version", "reasoning_passback", "direct"}
_TOOL_KEYS = {"description", "parameters", "http", "python", "approval", "timeout_s"}
_HTTP_TOOL_KEYS = {"url", "timeout_s", "headers"}
_MCP_KEYS = {"url", "command", "headers", "env", "timeout_s", "approval", "refresh_s"}
_ROUTE_KEYS = {"targets", "tools", "max_tool_iterations", "context_window", "retries", "tool_concurrency", "context"}
_TARGET_KEYS = {"provider", "model"}
_CONTEXT_KEYS = {"threshold", "compress_with", "max_tool_result_tokens"}
_ROUTING_KEYS = {"backoff_base_s", "backoff_max_s", "retry_after_cap_s", "breaker_failures", "breaker_cooldown_s",
                 "request_timeout_s"}
_SECTIONS: tuple[tuple[str, set[str]], ...] = (
    ("", _TOP_KEYS), ("server", _SERVER_KEYS), ("auth", _AUTH_KEYS), ("auth.keys[N]", _API_KEY_KEYS),
    ("store", _STORE_KEYS), ("store.tls", _STORE_TLS_KEYS), ("store.sentinel", _SENTINEL_KEYS),
    ("providers.NAME", _PROVIDER_KEYS), ("tools.NAME", _TOOL_KEYS),
    ("tools.NAME.http", _HTTP_TOOL_KEYS), ("mcp_servers.NAME", _MCP_KEYS), ("models.NAME", _ROUTE_KEYS),
    ("models.NAME.targets[N]", _TARGET_KEYS), ("models.NAME.context", _CONTEXT_KEYS), ("routing", _ROUTING_KEYS),
)


def _mapping(value: Any, path: str, allowed: set[str]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(path, f"expected a mapping, got {_kind(value)}")
    for key in value:
        if key not in allowed:
            hint = _elsewhere(str(key), path, allowed) or _closest(str(key), allowed)
            raise ConfigError(f"{path}.{key}" if path else str(key), "unknown key" + hint)
    return value


def _elsewhere(key: str, path: str, allowed: set[str]) -> str:
    """`` (did you mean models.x.context.KEY?)`` when ``key`` belongs to another section, else ``""``.

    The section sharing most of this one's path wins (a route key that belongs in its ``context``,
    a target key that belongs to its route); the shared part is filled in from ``path``.
    """
    here = next((template for template, keys in _SECTIONS if keys is allowed), None)
    if here is None:
        return ""
    ours = here.split(".") if here else []
    best: tuple[int, list[str]] | None = None
    for template, keys in _SECTIONS:
        if key not in keys or keys is allowed:
            continue
        theirs = template.split(".") if template else []
        shared = 0
        while shared < min(len(ours), len(theirs)) and ours[shared] == theirs[shared]:
            shared += 1
        if best is None or shared > best[0]:
            best = (shared, theirs)
    if best is None:
        return ""
    shared, theirs = best
    # Names may contain dots (a route called gpt-4.1): cut the fixed-word tail off the path, not its head.
    prefix = [path.rsplit(".", len(ours) - shared)[0] if len(ours) > shared else path] if shared else []
    where = ".".join([*prefix, *theirs[shared:], key]).replace("NAME", "<name>").replace("[N]", "[<n>]")
    return f" (did you mean {where}?)"


def _closest(word: str, choices: set[str]) -> str:
    import difflib  # start-up only

    found = difflib.get_close_matches(word, sorted(choices), n=1)
    return f" (did you mean '{found[0]}'?)" if found else ""


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


def _get(section: dict[str, Any], key: str, path: str, kind: type[T] | tuple[type, ...], default: Any) -> Any:
    if key not in section or section[key] is None:
        return default
    value = section[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        raise ConfigError(f"{path}.{key}", f"expected {_names(kinds)}, got a boolean")
    if float in kinds and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kinds):
        raise ConfigError(f"{path}.{key}", f"expected {_names(kinds)}, got {_kind(value)}")
    return value


def _names(kinds: tuple[type, ...]) -> str:
    words = {str: "a string", int: "an integer", float: "a number", bool: "a boolean", dict: "a mapping",
             list: "a list"}
    return " or ".join(words.get(k, k.__name__) for k in kinds)


def _positive(value: float, path: str, allow_zero: bool = False) -> float:
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(path, f"must be {'>= 0' if allow_zero else '> 0'}, got {value}")
    return value


def _string_map(value: Any, path: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(path, f"expected a mapping, got {_kind(value)}")
    return {str(k): str(v) for k, v in value.items()}


def _header_map(value: Any, path: str) -> dict[str, str]:
    headers = _string_map(value, path)
    for name, text in headers.items():
        _one_line(name, f"{path}.{name}")
        _one_line(text, f"{path}.{name}")
    return headers


def _one_line(text: str, path: str) -> str:
    """Header values end up in an HTTP request head, where a line break would end the header."""
    if "\r" in text or "\n" in text:
        raise ConfigError(path, "contains a line break (a trailing newline from a secret file or "
                                "an environment variable?)")
    return text


def _server(raw: Any) -> ServerConfig:
    section = _mapping(raw, "server", _SERVER_KEYS)
    port = _get(section, "port", "server", int, 8080)
    if not 0 < port < 65536:
        raise ConfigError("server.port", f"must be between 1 and 65535, got {port}")
    return ServerConfig(
        host=_get(section, "host", "server", str, "127.0.0.1"),
        port=port,
        max_body_bytes=int(_positive(_get(section, "max_body_bytes", "server", int, 4 * 1024 * 1024),
                                     "server.max_body_bytes")),
        workers=int(_positive(_get(section, "workers", "server", int, 1), "server.workers")),
        max_header_bytes=int(_positive(_get(section, "max_header_bytes", "server", int, 64 * 1024),
                                       "server.max_header_bytes")),
        header_timeout_s=_server_timeout(section, "header_timeout_s", 10.0),
        body_timeout_s=_server_timeout(section, "body_timeout_s", 30.0),
        keepalive_timeout_s=_server_timeout(section, "keepalive_timeout_s", 5.0),
    )


def _server_timeout(section: dict[str, Any], key: str, default: float) -> float:
    """A connection timer: positive and finite (an infinite one would switch the protection off)."""
    value = _positive(_get(section, key, "server", float, default), f"server.{key}")
    if not math.isfinite(value):
        raise ConfigError(f"server.{key}", f"must be a finite number of seconds, got {value}")
    return value


def _auth(raw: Any) -> AuthConfig:
    section = _mapping(raw, "auth", _AUTH_KEYS)
    keys = _get(section, "keys", "auth", list, [])
    parsed: list[ApiKey] = []
    seen: set[str] = set()
    for i, entry in enumerate(keys):
        path = f"auth.keys[{i}]"
        item = _mapping(entry, path, _API_KEY_KEYS)
        key = _get(item, "key", path, str, "")
        if not key:
            raise ConfigError(f"{path}.key", "is empty (is its environment variable set?)")
        if key in seen:
            raise ConfigError(f"{path}.key", "duplicates an earlier key")
        seen.add(key)
        tenant = _get(item, "tenant", path, str, "")
        if not tenant:
            raise ConfigError(f"{path}.tenant", "is required")
        parsed.append(ApiKey(key=key, tenant=tenant, headless=_get(item, "headless", path, bool, False)))
    return AuthConfig(keys=tuple(parsed))


def _store(raw: Any) -> StoreConfig:
    section = _mapping(raw, "store", _STORE_KEYS)
    sentinel = _sentinel(section.get("sentinel"))
    # With sentinels the URL only carries the scheme, credentials and database: the host comes from them.
    url = _get(section, "url", "store", str, "redis://" if sentinel else "memory://")
    if not url.startswith(("memory://", *REDIS_SCHEMES)):
        raise ConfigError("store.url", f"unsupported store '{_redacted(url)}' (use memory://, "
                          "redis://HOST:PORT/DB, rediss://, redis+cluster://, rediss+cluster:// or unix://)")
    ttl = _get(section, "continuation_ttl_s", "store", int, 86400)
    # An empty value (an unset environment variable) means "not configured".
    username = _get(section, "username", "store", str, "") or None
    password = _get(section, "password", "store", str, "") or None
    cluster = _get(section, "cluster", "store", bool, False) or url.startswith(("redis+cluster://", "rediss+cluster://"))
    tls = _store_tls(section.get("tls"))
    wait_replicas = _get(section, "wait_replicas", "store", int, 0)
    if not 0 <= wait_replicas <= 16:
        raise ConfigError("store.wait_replicas", f"must be between 0 and 16, got {wait_replicas}")
    wait_timeout_ms = _get(section, "wait_timeout_ms", "store", int, 500)
    if not 1 <= wait_timeout_ms <= 60_000:
        raise ConfigError("store.wait_timeout_ms", f"must be between 1 and 60000, got {wait_timeout_ms}")
    config = StoreConfig(url=url, continuation_ttl_s=int(_positive(ttl, "store.continuation_ttl_s")),
                         username=username, password=password, tls=tls, cluster=cluster, sentinel=sentinel,
                         wait_replicas=wait_replicas, wait_timeout_ms=wait_timeout_ms)
    _check_store(config, section)
    return config


def _redacted(url: str) -> str:
    """``url`` with any password replaced, for error messages."""
    parts = urlparse(url)
    if parts.password is None:
        return url
    return url.replace(f":{parts.password}@", ":***@", 1)


def _check_store(config: StoreConfig, section: dict[str, Any]) -> None:
    """Combinations of store options that cannot work, reported at start-up rather than at the first request."""
    url = config.url
    if config.kind != "redis":
        for key in ("username", "password", "tls", "cluster", "sentinel"):
            if section.get(key) not in (None, False, "", {}):
                raise ConfigError(f"store.{key}", "only applies to a Redis store (store.url redis://...)")
        if config.wait_replicas:
            raise ConfigError("store.wait_replicas", "needs a Redis store with replicas (store.url redis://...)")
        return
    try:
        parts = urlparse(url)
        port, db = parts.port, parts.path.strip("/")
    except ValueError as exc:
        raise ConfigError("store.url", f"cannot parse '{_redacted(url)}': {exc}") from None
    if config.password is not None and parts.password is not None:
        raise ConfigError("store.password", "the password is also in store.url: set it in one place")
    if config.username is not None and parts.username:
        raise ConfigError("store.username", "a username is also in store.url: set it in one place")
    unix = url.startswith("unix://")
    if not unix and db and not db.isdigit():
        raise ConfigError("store.url", f"the database must be a number, got '{db}'")
    if port is not None and not 0 < port < 65536:
        raise ConfigError("store.url", f"port {port} is out of range")
    tls_url = url.startswith(("rediss://", "rediss+cluster://"))
    if config.tls is not None and not tls_url and not (config.sentinel and config.sentinel.tls):
        raise ConfigError("store.tls", "TLS files need a rediss:// (or rediss+cluster://) store.url")
    if config.cluster:
        if unix:
            raise ConfigError("store.cluster", "a Redis Cluster is reached over TCP, not a unix:// socket")
        if config.sentinel is not None:
            raise ConfigError("store.sentinel", "use either store.cluster or store.sentinel, not both")
        if db not in ("", "0"):
            raise ConfigError("store.url", f"a Redis Cluster has only database 0, got /{db}")
    if config.sentinel is not None and unix:
        raise ConfigError("store.url", "with store.sentinel use redis:// or rediss:// (the host comes from the "
                          "sentinels)")


def _store_tls(raw: Any) -> StoreTls | None:
    if raw is None:
        return None
    section = _mapping(raw, "store.tls", _STORE_TLS_KEYS)
    files: dict[str, str | None] = {}
    for key in ("ca_file", "cert_file", "key_file"):
        path = _get(section, key, "store.tls", str, "") or None
        if path is not None and not os.path.isfile(path):
            raise ConfigError(f"store.tls.{key}", f"file not found: '{path}'")
        files[key] = path
    if (files["cert_file"] is None) != (files["key_file"] is None):
        raise ConfigError("store.tls", "a client certificate needs both cert_file and key_file")
    return StoreTls(**files)


def _sentinel(raw: Any) -> StoreSentinel | None:
    if raw is None:
        return None
    section = _mapping(raw, "store.sentinel", _SENTINEL_KEYS)
    master = _get(section, "master", "store.sentinel", str, "")
    if not master:
        raise ConfigError("store.sentinel.master", "is required: the name the sentinels monitor")
    nodes_raw = _get(section, "nodes", "store.sentinel", list, [])
    if not nodes_raw:
        raise ConfigError("store.sentinel.nodes", "is required: a list of \"host:port\" sentinel addresses")
    nodes: list[tuple[str, int]] = []
    for i, node in enumerate(nodes_raw):
        path = f"store.sentinel.nodes[{i}]"
        if not isinstance(node, str):
            raise ConfigError(path, f"expected a \"host:port\" string, got {_kind(node)}")
        host, _, port_text = node.rpartition(":")
        host = host.strip("[]")
        if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ConfigError(path, f"expected \"host:port\", got '{node}'")
        nodes.append((host, int(port_text)))
    return StoreSentinel(master=master, nodes=tuple(nodes),
                         username=_get(section, "username", "store.sentinel", str, "") or None,
                         password=_get(section, "password", "store.sentinel", str, "") or None,
                         tls=_get(section, "tls", "store.sentinel", bool, False))


_DEFAULT_BASE_URLS = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com",
    "litellm": "",
}


def _provider(name: str, raw: Any) -> ProviderConfig:
    path = f"providers.{name}"
    section = _mapping(raw, path, _PROVIDER_KEYS)
    kind = _get(section, "type", path, str, None)
    if kind is None:
        raise ConfigError(f"{path}.type", f"is required (one of {', '.join(PROVIDER_TYPES)})")
    if kind not in PROVIDER_TYPES:
        raise ConfigError(f"{path}.type", f"unknown provider type '{kind}' (one of {', '.join(PROVIDER_TYPES)})")
    base_url = _get(section, "base_url", path, str, _DEFAULT_BASE_URLS[kind]).rstrip("/")
    if kind != "litellm":
        parsed = urlparse(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(f"{path}.base_url", f"must be an http(s) URL, got '{base_url}'")
    if kind == "litellm" and importlib.util.find_spec("litellm") is None:
        raise ConfigError(f"{path}.type", "litellm providers need: pip install 'loopgate[litellm]'")
    return ProviderConfig(
        name=name,
        type=kind,
        base_url=base_url,
        api_key=_one_line(_get(section, "api_key", path, str, ""), f"{path}.api_key"),
        timeout_s=_positive(_get(section, "timeout_s", path, float, 600.0), f"{path}.timeout_s"),
        connect_timeout_s=_positive(_get(section, "connect_timeout_s", path, float, 10.0),
                                    f"{path}.connect_timeout_s"),
        headers=_header_map(section.get("headers"), f"{path}.headers"),
        max_connections=int(_positive(_get(section, "max_connections", path, int, 1000),
                                      f"{path}.max_connections")),
        default_max_tokens=int(_positive(_get(section, "default_max_tokens", path, int, 4096),
                                         f"{path}.default_max_tokens")),
        api_version=_get(section, "api_version", path, str, None),
        reasoning_passback=_passback(section.get("reasoning_passback", "auto"), f"{path}.reasoning_passback"),
        direct=_get(section, "direct", path, bool, True),
    )


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
    section = _mapping(raw, path, _TOOL_KEYS)
    params = _get(section, "parameters", path, dict, {"type": "object", "properties": {}})
    if params.get("type", "object") != "object":
        raise ConfigError(f"{path}.parameters", "must be a JSON Schema of type object")
    _check_schema(params, f"{path}.parameters")
    http_raw = section.get("http")
    python = _get(section, "python", path, str, None)
    if (http_raw is None) == (python is None):
        raise ConfigError(path, "needs exactly one of 'http' or 'python'")
    http = None
    if http_raw is not None:
        hpath = f"{path}.http"
        hsec = _mapping(http_raw, hpath, _HTTP_TOOL_KEYS)
        url = _get(hsec, "url", hpath, str, "")
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(f"{hpath}.url", f"must be an http(s) URL, got '{url}'")
        http = HttpToolConfig(
            url=url,
            timeout_s=_positive(_get(hsec, "timeout_s", hpath, float, 30.0), f"{hpath}.timeout_s"),
            headers=_header_map(hsec.get("headers"), f"{hpath}.headers"),
        )
    if python is not None and (":" not in python or not all(python.split(":", 1))):
        raise ConfigError(f"{path}.python", f"must look like 'package.module:function', got '{python}'")
    approval = _get(section, "approval", path, str, "never")
    if approval not in ("never", "required"):
        raise ConfigError(f"{path}.approval", f"must be 'required' or 'never', got '{approval}'")
    timeout = http.timeout_s if http else _get(section, "timeout_s", path, float, 30.0)
    return ToolConfig(
        name=name,
        description=_get(section, "description", path, str, ""),
        parameters=params,
        http=http,
        python=python,
        approval=approval,
        timeout_s=_positive(timeout, f"{path}.timeout_s"),
    )


def _check_schema(schema: dict[str, Any], path: str) -> None:
    from jsonschema import Draft202012Validator, SchemaError  # start-up only

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ConfigError(path, f"invalid JSON Schema: {exc.message}") from None


def _mcp_server(name: str, raw: Any) -> McpServerConfig:
    path = f"mcp_servers.{name}"
    section = _mapping(raw, path, _MCP_KEYS)
    url = _get(section, "url", path, str, None)
    command = _get(section, "command", path, list, None)
    if (url is None) == (command is None):
        raise ConfigError(path, "needs exactly one of 'url' (streamable HTTP) or 'command' (stdio)")
    if url is not None:
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(f"{path}.url", f"must be an http(s) URL, got '{url}'")
    if command is not None and (not command or not all(isinstance(part, str) and part for part in command)):
        raise ConfigError(f"{path}.command", "must be a non-empty list of strings")
    approval = _get(section, "approval", path, str, "never")
    if approval not in ("never", "required"):
        raise ConfigError(f"{path}.approval", f"must be 'required' or 'never', got '{approval}'")
    return McpServerConfig(
        name=name,
        url=url,
        command=tuple(command or ()),
        headers=_header_map(section.get("headers"), f"{path}.headers"),
        env=_string_map(section.get("env"), f"{path}.env"),
        timeout_s=_positive(_get(section, "timeout_s", path, float, 30.0), f"{path}.timeout_s"),
        approval=approval,
        refresh_s=_positive(_get(section, "refresh_s", path, float, 300.0), f"{path}.refresh_s"),
    )


def _route(name: str, raw: Any, providers: dict[str, ProviderConfig], tools: dict[str, ToolConfig],
           mcp_servers: dict[str, McpServerConfig]) -> RouteConfig:
    path = f"models.{name}"
    section = _mapping(raw, path, _ROUTE_KEYS)
    raw_targets = _get(section, "targets", path, list, None)
    if not raw_targets:
        raise ConfigError(f"{path}.targets", "needs at least one target")
    targets = []
    for i, entry in enumerate(raw_targets):
        tpath = f"{path}.targets[{i}]"
        item = _mapping(entry, tpath, _TARGET_KEYS)
        provider = _get(item, "provider", tpath, str, "")
        if provider not in providers:
            hint = _closest(provider, set(providers))
            raise ConfigError(f"{tpath}.provider", f"unknown provider '{provider}'{hint}")
        model = _get(item, "model", tpath, str, "")
        if not model:
            raise ConfigError(f"{tpath}.model", "is required")
        problem = model_problem(model)
        if problem is not None:
            raise ConfigError(f"{tpath}.model", f"{model!r} {problem}")
        targets.append(TargetConfig(provider=provider, model=model))
    tool_names: list[str] = []
    mcp_names: list[str] = []
    for i, tool in enumerate(_get(section, "tools", path, list, [])):
        if isinstance(tool, str) and tool.startswith("mcp:"):
            server = tool[4:]
            if server not in mcp_servers:
                hint = _closest(server, set(mcp_servers))
                raise ConfigError(f"{path}.tools[{i}]", f"unknown MCP server '{server}'{hint}")
            mcp_names.append(server)
        elif tool not in tools:
            raise ConfigError(f"{path}.tools[{i}]", f"unknown tool '{tool}'{_closest(str(tool), set(tools))}")
        else:
            tool_names.append(tool)
    iterations = _get(section, "max_tool_iterations", path, int, 25)
    window = _get(section, "context_window", path, int, None)
    ctx_raw = _mapping(section.get("context"), f"{path}.context", _CONTEXT_KEYS)
    threshold = _get(ctx_raw, "threshold", f"{path}.context", float, 0.8)
    if not 0 < threshold <= 1:
        raise ConfigError(f"{path}.context.threshold", f"must be in (0, 1], got {threshold}")
    return RouteConfig(
        name=name,
        targets=tuple(targets),
        tools=tuple(tool_names),
        mcp_servers=tuple(mcp_names),
        max_tool_iterations=int(_positive(iterations, f"{path}.max_tool_iterations")),
        context_window=None if window is None else int(_positive(window, f"{path}.context_window")),
        retries=int(_positive(_get(section, "retries", path, int, 0), f"{path}.retries", allow_zero=True)),
        tool_concurrency=int(_positive(_get(section, "tool_concurrency", path, int, 8),
                                       f"{path}.tool_concurrency")),
        context=ContextConfig(
            threshold=threshold,
            compress_with=_get(ctx_raw, "compress_with", f"{path}.context", str, None),
            max_tool_result_tokens=_get(ctx_raw, "max_tool_result_tokens", f"{path}.context", int, None),
        ),
    )


def _routing(raw: Any) -> RoutingConfig:
    section = _mapping(raw, "routing", _ROUTING_KEYS)
    defaults = RoutingConfig()

    def number(key: str) -> float:
        return _positive(_get(section, key, "routing", float, getattr(defaults, key)), f"routing.{key}",
                         allow_zero=True)

    return RoutingConfig(
        backoff_base_s=number("backoff_base_s"),
        backoff_max_s=number("backoff_max_s"),
        retry_after_cap_s=number("retry_after_cap_s"),
        breaker_failures=int(_positive(_get(section, "breaker_failures", "routing", int, 3),
                                       "routing.breaker_failures")),
        breaker_cooldown_s=number("breaker_cooldown_s"),
        request_timeout_s=_positive(_get(section, "request_timeout_s", "routing", float, 900.0),
                                    "routing.request_timeout_s"),
    )


def _named(raw: Any, section: str, build: Callable[[str, Any], T]) -> dict[str, T]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(section, f"expected a mapping of names, got {_kind(raw)}")
    return {str(name): build(str(name), value) for name, value in raw.items()}


def build_config(raw: dict[str, Any]) -> Config:
    _mapping(raw, "", _TOP_KEYS)
    providers = _named(raw.get("providers"), "providers", _provider)
    tools = _named(raw.get("tools"), "tools", _tool)
    mcp_servers = _named(raw.get("mcp_servers"), "mcp_servers", _mcp_server)
    models = _named(raw.get("models"), "models", lambda n, v: _route(n, v, providers, tools, mcp_servers))
    for name, route in models.items():
        target = route.context.compress_with
        if target is not None and target not in models:
            raise ConfigError(f"models.{name}.context.compress_with", f"unknown model route '{target}'")
    return Config(
        server=_server(raw.get("server")),
        auth=_auth(raw.get("auth")),
        store=_store(raw.get("store")),
        providers=providers,
        tools=tools,
        mcp_servers=mcp_servers,
        models=models,
        routing=_routing(raw.get("routing")),
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
