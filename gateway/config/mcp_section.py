"""The ``mcp_servers`` section: MCP servers whose tools become server tools (streamable HTTP or stdio)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from gateway.config.approval_section import ApprovalMode, approval_policy
from gateway.config.checks import ConfigError, get, header_map, mapping, positive, string_map

MCP_KEYS = {"url", "command", "headers", "env", "timeout_s", "approval", "refresh_s", "approval_timeout_s"}


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    """An MCP server whose tools become server tools: streamable HTTP (``url``) or stdio (``command``)."""

    name: str
    url: str | None = None
    command: tuple[str, ...] = ()
    headers: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 30.0
    approval: ApprovalMode = "never"
    refresh_s: float = 300.0
    approval_timeout_s: float | None = None


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
