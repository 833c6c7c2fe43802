"""Continuations, tool ledger, artifacts, audit log and shared target health behind one interface.

``open_configured_store(config.store)`` picks the implementation: ``memory://`` (embedded, one
process) or Redis (one server, Sentinel or Cluster; shared by every worker and replica).
"""

from typing import Any

from gateway.config.model import REDIS_SCHEMES, StoreConfig
from gateway.store.base import (
    Continuation,
    ContinuationConflict,
    ContinuationNotFound,
    ContinuationStatus,
    Store,
    StoreError,
    StoreUnavailable,
    new_continuation_id,
)


def open_store(url: str, **options: Any) -> Store:
    """The store for ``store.url``: ``memory://`` (the embedded default) or ``redis://``/``rediss://``/``unix://``.

    ``options`` go to the implementation's constructor (timeouts, caps, an injected clock in tests).
    Imports are local so the embedded default never imports the Redis client. It lives here,
    not in ``base``, because it names the implementations and they import ``base``.
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
        return open_store(config.url)
    return open_store(config.url, username=config.username, password=config.password, tls=config.tls,
                      cluster=config.cluster, sentinel=config.sentinel, wait_replicas=config.wait_replicas,
                      wait_timeout_ms=config.wait_timeout_ms)


__all__ = [
    "Continuation",
    "ContinuationConflict",
    "ContinuationNotFound",
    "ContinuationStatus",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "new_continuation_id",
    "open_configured_store",
    "open_store",
]
