"""The ``server`` section: the listening socket, request bounds, connection timers, ``public_url``, GC policy."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from gateway.config.checks import ConfigError, get, mapping, positive

SERVER_KEYS = {"host", "port", "max_body_bytes", "workers", "max_header_bytes", "header_timeout_s", "body_timeout_s",
                "keepalive_timeout_s", "public_url", "gc_young_threshold"}


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    max_body_bytes: int = 4 * 1024 * 1024
    workers: int = 1
    #: request line + headers; past it 431 (gateway/http/server_protocol.py)
    max_header_bytes: int = 64 * 1024
    #: a whole request head must arrive within this
    header_timeout_s: float = 10.0
    #: the longest silence between two reads of a request body
    body_timeout_s: float = 30.0
    #: an idle keep-alive connection is closed after this
    keepalive_timeout_s: float = 5.0
    #: the gateway's address as people reach it (links in notifications: {public_url}/ui/approvals)
    public_url: str | None = None
    #: the garbage collector's youngest-generation threshold in a serving worker (0: Python's own
    #: settings, nothing frozen); see gateway/gc_policy.py
    gc_young_threshold: int = 10_000


def server_section(raw: Any) -> ServerConfig:
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


def public_url(value: Any) -> str | None:
    """``server.public_url``: an http(s) URL without query or fragment; a trailing slash is dropped."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ConfigError("server.public_url", "expected a string")
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.netloc or parsed.query or parsed.fragment:
        raise ConfigError("server.public_url", f"must be an http(s) URL such as https://gateway.example.com, "
                                               f"got '{value}'")
    return value.rstrip("/")


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
