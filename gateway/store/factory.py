"""The one place that names the backends: every store, limiter and record store is opened here.

``memory://`` (embedded, one process) or Redis (one server, Sentinel or Cluster, TLS; shared by
every worker and replica). The other stores (keys, limits, usage, background runs, Responses
records) are opened beside the main ``Store`` and share its backend: on Redis its ``RedisIO``
(connections, deadlines, error mapping), in memory this process. Imports of the Redis side are
local, so the embedded default never imports the Redis client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.config.model import REDIS_SCHEMES, StoreConfig
from gateway.config.store_section import DEFAULT_MEMORY_MAX_BYTES
from gateway.store.background.base import BackgroundStore
from gateway.store.base import Store
from gateway.store.bounded import share
from gateway.store.keys.base import DEFAULT_RETENTION_S, KeyStore
from gateway.store.limits.base import RateLimiter
from gateway.store.responses.base import ResponseRecords
from gateway.store.rollups.base import RollupStore
from gateway.store.usage.base import DEFAULT_RETENTION_DAYS, UsageStore

if TYPE_CHECKING:
    from gateway.store.redis_client.client import RedisIO


def open_store(url: str, **options: Any) -> Store:
    """The store for ``store.url``: ``memory://`` (the embedded default) or ``redis://``/``rediss://``/``unix://``.

    ``options`` go to the implementation's constructor (timeouts, caps, an injected clock in tests).
    """
    if url.lower().startswith("memory://"):
        from gateway.store.memory import MemoryStore

        return MemoryStore(**options)
    if url.lower().startswith(REDIS_SCHEMES) or options.get("sentinel") is not None:
        from gateway.store.redis import RedisStore

        return RedisStore(url, **options)
    schemes = ", ".join(REDIS_SCHEMES)
    raise ValueError(f"unsupported store url scheme in {url.split('://', 1)[0]!r}: expected memory:// or {schemes}")


def open_configured_store(config: StoreConfig) -> Store:
    """The store the ``store`` config section describes (its deployment options only apply to Redis)."""
    if config.kind != "redis":
        return open_store(config.url, memory_max_bytes=config.memory_max_bytes)
    return open_store(config.url, username=config.username, password=config.password, tls=config.tls,
                      cluster=config.cluster, sentinel=config.sentinel, wait_replicas=config.wait_replicas,
                      wait_timeout_ms=config.wait_timeout_ms, op_timeout=config.timeout_ms / 1000,
                      fail_open_timeout=config.fail_open_ms / 1000)


def _redis_io(store: Store) -> RedisIO | None:
    """The ``RedisIO`` of a Redis ``store`` (None for every other backend)."""
    if store.kind != "redis":
        return None
    from gateway.store.redis import RedisStore

    assert isinstance(store, RedisStore)
    return store.io


def open_key_store(store: Store, retention_s: float = DEFAULT_RETENTION_S) -> KeyStore:
    """The managed keys beside ``store``; revoked or expired records are purged ``retention_s`` after they ended."""
    io = _redis_io(store)
    if io is not None:
        from gateway.store.keys.redis import RedisKeyStore

        return RedisKeyStore(io, retention_s)
    from gateway.store.keys.memory import MemoryKeyStore

    return MemoryKeyStore(retention_s)


def open_limiter(store: Store) -> RateLimiter:
    """The rate limiter beside ``store``: shared through Redis, or this process's own with ``memory://``."""
    io = _redis_io(store)
    if io is not None:
        from gateway.store.limits.redis import RedisRateLimiter

        return RedisRateLimiter(io)
    from gateway.store.limits.memory import MemoryRateLimiter

    return MemoryRateLimiter()


def open_usage(store: Store, retention_days: int = DEFAULT_RETENTION_DAYS, flush_s: float | None = None) -> UsageStore:
    """The usage aggregates beside ``store``; ``flush_s``: how long Redis writes are batched (default 0.5 s)."""
    io = _redis_io(store)
    if io is not None:
        from gateway.store.usage.redis import DEFAULT_FLUSH_S, RedisUsage

        return RedisUsage(io, retention_days, DEFAULT_FLUSH_S if flush_s is None else flush_s)
    from gateway.store.usage.memory import MemoryUsage

    return MemoryUsage(retention_days)


def open_rollups(store: Store, retention_s: float, status_ttl_s: float) -> RollupStore:
    """The console's per-replica series beside ``store`` (``gateway/store/rollups/base.py``)."""
    io = _redis_io(store)
    if io is not None:
        from gateway.store.rollups.redis import RedisRollups

        return RedisRollups(io, retention_s, status_ttl_s)
    from gateway.store.rollups.memory import MemoryRollups

    return MemoryRollups(retention_s, status_ttl_s)


def open_background(store: Store) -> BackgroundStore:
    """The background-run store that shares ``store``'s backend."""
    io = _redis_io(store)
    if io is not None:
        from gateway.store.background.redis import RedisBackground

        return RedisBackground(io)
    from gateway.store.background.memory import MemoryBackground

    return MemoryBackground(max_bytes=share(_memory_max_bytes(store), "background"))


def open_response_records(store: Store) -> ResponseRecords:
    """The stored Responses-API records sharing ``store``'s backend (created once, at start-up)."""
    io = _redis_io(store)
    if io is not None:
        from gateway.store.responses.redis import RedisResponseRecords

        return RedisResponseRecords(io)
    from gateway.store.responses.memory import MemoryResponseRecords

    return MemoryResponseRecords(max_bytes=share(_memory_max_bytes(store), "responses"))


def _memory_max_bytes(store: Store) -> int:
    """The byte bound of an embedded ``store`` (the default for a store built without one, in tests)."""
    return int(getattr(store, "memory_max_bytes", DEFAULT_MEMORY_MAX_BYTES))
