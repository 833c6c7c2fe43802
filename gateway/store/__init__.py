"""Continuations, tool ledger, artifacts, audit log and shared target health behind one interface.

``open_store(config.store.url)`` picks the implementation: ``memory://`` (embedded, one process)
or ``redis://`` (shared by every worker and replica).
"""

from gateway.store.base import (
    Continuation,
    ContinuationConflict,
    ContinuationNotFound,
    ContinuationStatus,
    Store,
    StoreError,
    StoreUnavailable,
    new_continuation_id,
    open_store,
)

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
