"""The audit log in one process: a capped deque per tenant (part of ``MemoryStore``).

Capped twice: ``audit_max`` entries per tenant (as on Redis), and the audit share of
``store.memory_max_bytes`` for all tenants together, past which the oldest entries of the whole
process go first (``loopgate_store_evictions_total{domain="audit"}``): with thousands of
tenants the per-tenant cap alone would not bound the process.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from typing import Any

import orjson

from gateway.observability.metrics import STORE_EVICTIONS, STORE_MEMORY_BYTES
from gateway.store.audit.base import AuditLog, audit_entry
from gateway.store.bounded import ENTRY_OVERHEAD

#: the audit domain's default share of ``store.memory_max_bytes`` (256 MiB) when built alone
DEFAULT_MAX_BYTES = 8 * 1024 * 1024


class MemoryAudit(AuditLog):
    def __init__(self, clock: Callable[[], float], audit_max: int, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._clock = clock
        self._audit_max = audit_max
        self._audit_max_bytes = max_bytes
        self._audit_bytes = 0
        self._audit_live = 0  # entries held, all tenants
        self._audit: dict[str, deque[tuple[int, bytes]]] = {}
        #: (tenant, sequence number) of every entry in append order; entries the per-tenant cap
        #: already dropped stay behind as stale references until they reach the front
        self._audit_order: deque[tuple[str, int]] = deque()
        self._audit_seq = itertools.count()

    async def append_audit(self, entry: dict[str, Any]) -> None:
        tenant, entry = audit_entry(entry, self._clock())
        log = self._audit.get(tenant)
        if log is None:
            log = self._audit[tenant] = deque()
        if len(log) >= self._audit_max:
            self._audit_bytes -= len(log.popleft()[1]) + ENTRY_OVERHEAD
            self._audit_live -= 1
        raw, seq = orjson.dumps(entry), next(self._audit_seq)
        log.append((seq, raw))
        self._audit_order.append((tenant, seq))
        self._audit_bytes += len(raw) + ENTRY_OVERHEAD
        self._audit_live += 1
        if self._audit_bytes > self._audit_max_bytes:
            self._evict_audit()
        elif len(self._audit_order) > 2 * self._audit_live + 1024:
            self._compact_audit()
        STORE_MEMORY_BYTES.set(self._audit_bytes, "audit")

    def _evict_audit(self) -> None:
        order, logs, evicted = self._audit_order, self._audit, 0
        while self._audit_bytes > self._audit_max_bytes and len(order) > 1:
            tenant, seq = order.popleft()
            log = logs.get(tenant)
            if not log or log[0][0] != seq:
                continue  # dropped by the per-tenant cap already
            self._audit_bytes -= len(log.popleft()[1]) + ENTRY_OVERHEAD
            self._audit_live -= 1
            evicted += 1
            if not log:
                del logs[tenant]
        if evicted:
            STORE_EVICTIONS.inc("audit", amount=evicted)

    def _compact_audit(self) -> None:
        """Drop the stale references the per-tenant cap left in the append order."""
        live = {(tenant, seq) for tenant, log in self._audit.items() for seq, _ in log}
        self._audit_order = deque(ref for ref in self._audit_order if ref in live)

    async def audit_tail(self, tenant: str, skip: int, count: int) -> list[dict[str, Any]]:
        log = self._audit.get(tenant)
        if not log or count <= 0:
            return []
        stop = max(0, len(log) - skip)
        return [orjson.loads(log[i][1]) for i in range(max(0, stop - count), stop)]

    async def read_audit(self, tenant: str, limit: int = 100) -> list[dict[str, Any]]:
        log = self._audit.get(tenant)
        if not log or limit <= 0:
            return []
        start = max(0, len(log) - limit)
        return [orjson.loads(log[i][1]) for i in range(start, len(log))]
