"""The audit log (headless denials, admin changes): a capped, append-only log per tenant."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any


class AuditLog(ABC):
    """The tenant's audit log: part of every ``Store``."""

    @abstractmethod
    async def append_audit(self, entry: dict[str, Any]) -> None:
        """Append ``entry`` (must carry ``"tenant"``; ``"ts"`` is added when absent) to the tenant's capped log."""

    @abstractmethod
    async def read_audit(self, tenant: str, limit: int = 100) -> list[dict[str, Any]]:
        """The tenant's latest ``limit`` entries, oldest first (the order they were appended)."""

    async def audit_tail(self, tenant: str, skip: int, count: int) -> list[dict[str, Any]]:
        """``count`` entries ending ``skip`` entries before the newest, oldest first (paging backwards).

        Implementations override this with a ranged read; this fallback reads the whole log.
        """
        entries = await self.read_audit(tenant, skip + count)
        return entries[:max(0, len(entries) - skip)]


def audit_entry(entry: dict[str, Any], now: float) -> tuple[str, dict[str, Any]]:
    """Validate an audit entry; returns its tenant and a copy with ``ts`` filled in (the caller's dict is untouched)."""
    tenant = entry.get("tenant")
    if not isinstance(tenant, str) or not tenant:
        raise ValueError("an audit entry needs a non-empty 'tenant'")
    out = dict(entry)
    out.setdefault("ts", now)
    return tenant, out
