"""The ``websocket`` section: the WebSocket mode of ``/v1/responses`` and the bounds of one connection.

Every count, size and time a caller controls on a socket has its bound here; a connection that
reaches one is told so (an ``error`` event or a close code, docs/surfaces/responses.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.config.checks import ConfigError, get, mapping

WEBSOCKET_KEYS = {"enabled", "max_message_bytes", "max_messages", "max_queued_turns", "idle_timeout_s",
                  "max_connection_s", "max_connections", "max_connections_per_key", "kept_responses",
                  "kept_bytes", "ping_interval_s", "ping_timeout_s", "compression"}


@dataclass(frozen=True, slots=True)
class WebSocketConfig:
    """``GET /v1/responses`` with ``Upgrade: websocket``: ``response.create`` turns over one connection."""

    #: off: the upgrade is refused (405) and uvicorn runs without a WebSocket protocol
    enabled: bool = True
    #: the largest message a client may send (one ``response.create``); past it the connection is closed
    #: with 1009 before the message is read whole
    max_message_bytes: int = 4 * 1024 * 1024
    #: messages one connection may send: each ``response.create``, acknowledgement or refused message counts;
    #: past it an ``error`` event (``websocket_connection_limit_reached``), then the connection is closed
    max_messages: int = 20_000
    #: turns waiting behind the running one (they run in order); past it an ``error`` event for the extra one
    max_queued_turns: int = 4
    #: a connection with no turn running or waiting is closed after this long (close code 1000)
    idle_timeout_s: float = 600.0
    #: a connection's lifetime: no turn starts after it (``websocket_connection_limit_reached``, then 1000)
    max_connection_s: float = 3600.0
    #: open connections in one gateway process; past it the upgrade is refused with 429 (0: no cap)
    max_connections: int = 1000
    #: open connections of one key in one gateway process; past it the upgrade is refused with 429 (0: no cap)
    max_connections_per_key: int = 32
    #: ``store: false`` responses a connection keeps in memory for ``previous_response_id`` (the newest ones)
    kept_responses: int = 4
    #: and their total size in bytes (a response larger than this alone is not kept)
    kept_bytes: int = 16 * 1024 * 1024
    #: how often the server pings an idle client, and how long it waits for the pong (0: no pings)
    ping_interval_s: float = 20.0
    ping_timeout_s: float = 20.0
    #: permessage-deflate when the client offers it (costs CPU on every event; off by default)
    compression: bool = False


def websocket_section(raw: Any) -> WebSocketConfig:
    section = mapping(raw, "websocket", WEBSOCKET_KEYS)
    d = WebSocketConfig()

    def whole(key: str, low: int, high: int) -> int:
        value = get(section, key, "websocket", int, getattr(d, key))
        if not low <= value <= high:
            raise ConfigError(f"websocket.{key}", f"must be between {low} and {high}, got {value}")
        return int(value)

    def seconds(key: str, low: float, high: float) -> float:
        value = get(section, key, "websocket", float, getattr(d, key))
        if not low <= value <= high:
            raise ConfigError(f"websocket.{key}", f"must be between {low:g} and {high:g} seconds, got {value:g}")
        return float(value)

    return WebSocketConfig(
        enabled=get(section, "enabled", "websocket", bool, True),
        max_message_bytes=whole("max_message_bytes", 1024, 1024 * 1024 * 1024),
        max_messages=whole("max_messages", 1, 100_000_000),
        max_queued_turns=whole("max_queued_turns", 0, 1000),
        idle_timeout_s=seconds("idle_timeout_s", 0.05, 86_400.0),
        max_connection_s=seconds("max_connection_s", 0.05, 7 * 86_400.0),
        max_connections=whole("max_connections", 0, 10_000_000),
        max_connections_per_key=whole("max_connections_per_key", 0, 10_000_000),
        kept_responses=whole("kept_responses", 0, 1000),
        kept_bytes=whole("kept_bytes", 0, 1024 * 1024 * 1024),
        ping_interval_s=seconds("ping_interval_s", 0.0, 86_400.0),
        ping_timeout_s=seconds("ping_timeout_s", 0.05, 86_400.0),
        compression=get(section, "compression", "websocket", bool, False),
    )
