"""The audit log in one process: a capped deque per tenant (part of ``MemoryStore``)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import orjson

from gateway.store.audit.base import AuditLog, audit_entry


class MemoryAudit(AuditLog):
    def __init__(self, clock: Callable[[], float], audit_max: int) -> None:
        self._clock = clock
        self._audit_max = audit_max
        self._audit: dict[str, deque[bytes]] = {}

    async def append_audit(self, entry: dict[str, Any]) -> None:
        tenant, entry = audit_entry(entry, self._clock())
        log = self._audit.get(tenant)
        if log is None:
            log = self._audit[tenant] = deque(maxlen=self._audit_max)
        log.append(orjson.dumps(entry))

    async def audit_tail(self, tenant: str, skip: int, count: int) -> list[dict[str, Any]]:
        log = self._audit.get(tenant)
        if not log or count <= 0:
            return []
        stop = max(0, len(log) - skip)
        return [orjson.loads(log[i]) for i in range(max(0, stop - count), stop)]

    async def read_audit(self, tenant: str, limit: int = 100) -> list[dict[str, Any]]:
        log = self._audit.get(tenant)
        if not log or limit <= 0:
            return []
        start = max(0, len(log) - limit)
        return [orjson.loads(log[i]) for i in range(start, len(log))]
