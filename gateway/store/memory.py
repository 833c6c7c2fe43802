"""The embedded default store: plain dicts in one process.

Right for development and for a single worker: nothing to run besides the gateway. State is
not shared between processes, so ``--workers N`` or several replicas need ``redis://``. Each
domain's part lives in its subpackage (continuations, audit, health, outbox).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gateway.config.store_section import DEFAULT_MEMORY_MAX_BYTES
from gateway.store.audit.memory import MemoryAudit
from gateway.store.base import Store
from gateway.store.bounded import share
from gateway.store.continuations.memory import MemoryContinuations
from gateway.store.health.memory import MemoryHealth
from gateway.store.outbox.base import Outbox
from gateway.store.outbox.memory import MemoryOutbox


class MemoryStore(MemoryContinuations, MemoryAudit, MemoryHealth, Store):
    """Single-process store. ``clock`` (wall-clock seconds) can be injected so tests need not sleep."""

    kind = "memory"

    def __init__(self, *, clock: Callable[[], float] = time.time, audit_max: int = 10_000,
                 memory_max_bytes: int = DEFAULT_MEMORY_MAX_BYTES) -> None:
        #: the byte bound of everything this process stores, split between domains (bounded.MEMORY_SHARES);
        #: the domain stores opened beside this one (responses, background) take their share of it too
        self.memory_max_bytes = memory_max_bytes
        MemoryContinuations.__init__(self, clock, memory_max_bytes)
        MemoryAudit.__init__(self, clock, audit_max, share(memory_max_bytes, "audit"))
        MemoryHealth.__init__(self, clock)
        self._closed = False
        self._outboxes: dict[str, MemoryOutbox] = {}

    async def ping(self) -> bool:
        return not self._closed

    def outbox(self, name: str) -> Outbox:
        return self._outboxes.setdefault(name, MemoryOutbox())

    async def aclose(self) -> None:
        self._closed = True
