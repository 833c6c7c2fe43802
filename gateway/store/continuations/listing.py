"""The in-process side of the tenant's continuation listing: a dict per tenant, trimmed on every read."""

from __future__ import annotations

from typing import Any

import orjson


class TenantListing:
    """tenant -> {continuation id: (expires_at, summary JSON)}; the memory store keeps the records."""

    def __init__(self) -> None:
        self._by_tenant: dict[str, dict[str, tuple[float, bytes]]] = {}

    def add(self, tenant: str, continuation_id: str, expires_at: float, summary: dict[str, Any] | None) -> None:
        if summary is not None:
            self._by_tenant.setdefault(tenant, {})[continuation_id] = (expires_at, orjson.dumps(summary))

    def remove(self, tenant: str, continuation_id: str) -> None:
        entries = self._by_tenant.get(tenant)
        if entries is not None:
            entries.pop(continuation_id, None)

    def page(self, tenant: str, now: float, limit: int,
             before: tuple[float, str] | None) -> list[tuple[str, float, bytes]]:
        """Up to ``limit + 1`` live rows (id, expires_at, summary), newest first; expired ones are dropped."""
        entries = self._by_tenant.get(tenant)
        if not entries:
            return []
        for cid in [cid for cid, (deadline, _) in entries.items() if deadline <= now]:
            del entries[cid]
        rows = sorted(((cid, deadline, raw) for cid, (deadline, raw) in entries.items()),
                      key=lambda row: (row[1], row[0]), reverse=True)
        if before is not None:
            rows = [row for row in rows if (row[1], row[0]) < before]
        return rows[:limit + 1]
