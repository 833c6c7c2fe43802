"""Continuations, tool ledger, artifacts, audit log and shared target health behind one interface.

``open_store(config.store.url)`` picks the implementation: ``memory://`` (embedded, one process)
or ``redis://`` (shared by every worker and replica).
"""

from typing import Any

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
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme == "memory":
        from gateway.store.memory import MemoryStore

        return MemoryStore(**options)
    if scheme in ("redis", "rediss", "unix"):
        from gateway.store.redis import RedisStore

        return RedisStore(url, **options)
    raise ValueError(f"unsupported store url {url!r}: expected memory:// or redis://, rediss://, unix://")


__all__ = [
    "Continuation",
    "ContinuationConflict",
    "ContinuationNotFound",
    "ContinuationStatus",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "new_continuation_id",
    "open_store",
]
