"""The ``mcp_servers`` section: MCP servers whose tools become server tools (streamable HTTP or stdio)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlparse

from gateway.config.approval_section import ApprovalMode, approval_policy
from gateway.config.checks import ConfigError, get, header_map, mapping, positive, string_map

MCP_KEYS = {"url", "command", "headers", "env", "timeout_s", "approval", "refresh_s", "approval_timeout_s",
            "elicitation", "elicitation_timeout_s", "sampling_route", "sampling_max_tokens", "env_inherit",
            "max_sampling_calls_per_tool_call", "max_sampling_calls_per_minute"}

ElicitationPolicy = Literal["pause", "decline"]
#: what a stdio server's process inherits of the gateway's environment, besides its own ``env``
EnvInherit = Literal["safe", "all"]
ENV_INHERIT = ("safe", "all")
ELICITATION_POLICIES = ("pause", "decline")
#: how long a paused elicitation waits for a decision before it is declined
DEFAULT_ELICITATION_TIMEOUT_S = 600.0
#: the cap on one sampling request's ``maxTokens`` (a server asking for more gets this many)
DEFAULT_SAMPLING_MAX_TOKENS = 1024
MAX_SAMPLING_MAX_TOKENS = 128_000
#: samplings one tool call may make (each is a model call billed to the asking key); past it: an MCP error
DEFAULT_MAX_SAMPLING_CALLS_PER_TOOL_CALL = 10
#: samplings one server may make in any 60 s, over all its calls (per worker process); past it: an MCP error
DEFAULT_MAX_SAMPLING_CALLS_PER_MINUTE = 60
MAX_SAMPLING_CALLS = 100_000


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    """An MCP server whose tools become server tools: streamable HTTP (``url``) or stdio (``command``)."""

    name: str
    url: str | None = None
    command: tuple[str, ...] = ()
    headers: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    #: ``safe``: only the variables a process needs to run (PATH, HOME, locale, proxies), never the
    #: gateway's secrets; ``all``: the whole environment (provider keys included)
    env_inherit: EnvInherit = "safe"
    timeout_s: float = 30.0
    approval: ApprovalMode = "never"
    refresh_s: float = 300.0
    approval_timeout_s: float | None = None
    #: an ``elicitation/create`` during a call pauses the loop (``pause``) or is declined at once
    elicitation: ElicitationPolicy = "pause"
    elicitation_timeout_s: float = DEFAULT_ELICITATION_TIMEOUT_S
    #: the chat route that answers the server's ``sampling/createMessage`` (None: sampling not offered)
    sampling_route: str | None = None
    sampling_max_tokens: int = DEFAULT_SAMPLING_MAX_TOKENS
    max_sampling_calls_per_tool_call: int = DEFAULT_MAX_SAMPLING_CALLS_PER_TOOL_CALL
    max_sampling_calls_per_minute: int = DEFAULT_MAX_SAMPLING_CALLS_PER_MINUTE


def _count(section: dict[str, Any], key: str, path: str, default: int, top: int) -> int:
    # A bool is an int to Python; a config's `true` is no count.
    value = get(section, key, path, int, default)
    if isinstance(value, bool) or not 1 <= value <= top:
        raise ConfigError(f"{path}.{key}", f"must be an integer from 1 to {top}")
    return value


def mcp_server_section(name: str, raw: Any) -> McpServerConfig:
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
    elicitation = get(section, "elicitation", path, str, "pause")
    if elicitation not in ELICITATION_POLICIES:
        raise ConfigError(f"{path}.elicitation", f"must be one of pause, decline; got '{elicitation}'")
    env_inherit = get(section, "env_inherit", path, str, "safe")
    if env_inherit not in ENV_INHERIT:
        raise ConfigError(f"{path}.env_inherit", f"must be one of safe, all; got '{env_inherit}'")
    if env_inherit != "safe" and url is not None:
        raise ConfigError(f"{path}.env_inherit", "applies to a stdio server ('command') only")
    sampling_route = get(section, "sampling_route", path, str, None)
    if sampling_route is not None and not sampling_route:
        raise ConfigError(f"{path}.sampling_route", "must name a route")
    sampling_max_tokens = _count(section, "sampling_max_tokens", path, DEFAULT_SAMPLING_MAX_TOKENS,
                                 MAX_SAMPLING_MAX_TOKENS)
    return McpServerConfig(
        name=name,
        url=url,
        command=tuple(command or ()),
        headers=header_map(section.get("headers"), f"{path}.headers"),
        env=string_map(section.get("env"), f"{path}.env"),
        env_inherit=env_inherit,
        timeout_s=positive(get(section, "timeout_s", path, float, 30.0), f"{path}.timeout_s"),
        approval=approval,
        refresh_s=positive(get(section, "refresh_s", path, float, 300.0), f"{path}.refresh_s"),
        approval_timeout_s=approval_timeout,
        elicitation=elicitation,
        elicitation_timeout_s=positive(
            get(section, "elicitation_timeout_s", path, float, DEFAULT_ELICITATION_TIMEOUT_S),
            f"{path}.elicitation_timeout_s"),
        sampling_route=sampling_route,
        sampling_max_tokens=sampling_max_tokens,
        max_sampling_calls_per_tool_call=_count(section, "max_sampling_calls_per_tool_call", path,
                                                DEFAULT_MAX_SAMPLING_CALLS_PER_TOOL_CALL, MAX_SAMPLING_CALLS),
        max_sampling_calls_per_minute=_count(section, "max_sampling_calls_per_minute", path,
                                             DEFAULT_MAX_SAMPLING_CALLS_PER_MINUTE, MAX_SAMPLING_CALLS),
    )


def check_sampling_routes(servers: dict[str, McpServerConfig], chat_routes: dict[str, str]) -> None:
    """``mcp_servers.NAME.sampling_route`` names a configured chat route (``chat_routes``: name -> kind)."""
    for name, server in servers.items():
        route = server.sampling_route
        if route is None:
            continue
        if route not in chat_routes:
            known = ", ".join(sorted(r for r, kind in chat_routes.items() if kind == "chat")) or "none"
            raise ConfigError(f"mcp_servers.{name}.sampling_route", f"unknown model route '{route}' (chat routes: "
                              f"{known})")
        if chat_routes[route] != "chat":
            raise ConfigError(f"mcp_servers.{name}.sampling_route",
                              f"'{route}' is an embeddings route; sampling needs a chat route")
