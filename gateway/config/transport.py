"""The timers and bounds of one provider's upstream client, as two small frozen values (after httpx's
``Timeout`` and ``Limits``).

Both are parsed from a provider's config keys once at start-up (``providers.NAME.timeout_s``,
``connect_timeout_s``, ... in gateway/config/providers_section.py) and handed whole to the client
(``Http1Client``) and its connections, instead of one argument per number. They live in config,
not in the transport, so that config depends on nothing and the transport on config's plain values.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds an upstream exchange may spend in each phase; the request's deadline bounds them all too."""

    #: connecting: DNS, TCP (happy eyeballs), a proxy tunnel and the TLS handshake (``connect_timeout_s``)
    connect: float = 10.0
    #: the longest silence while waiting for the response, between two arrivals of bytes (``timeout_s``)
    read: float = 600.0
    #: sending a request body that makes no progress (``write_timeout_s``)
    write: float = 30.0
    #: waiting for a free connection when all ``max_connections`` are busy (``pool_timeout_s``)
    pool: float = 30.0


@dataclass(frozen=True, slots=True)
class PoolLimits:
    """How much one provider's client may hold: connections, idle keep-alive time, one response's size."""

    #: connections in use at once; further requests wait up to ``Timeouts.pool`` (``max_connections``)
    max_connections: int = 1000
    #: an idle keep-alive connection older than this is closed, never reused; 0: no reuse
    #: (``idle_timeout_s``; below common server idle timeouts: uvicorn 5 s, nginx 75 s)
    keepalive_expiry: float = 4.0
    #: one response's size: raw, decompressed, or a whole stream (``max_response_bytes``)
    max_response_bytes: int = 32 * 1024 * 1024


#: a provider's values when its config sets none of the keys
DEFAULT_TIMEOUTS = Timeouts()
DEFAULT_LIMITS = PoolLimits()
