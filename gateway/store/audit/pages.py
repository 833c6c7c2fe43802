"""Paging the audit log newest first by time range, over any store's ``audit_tail``.

The log is append-only and capped (``audit_max`` entries per tenant, 10,000 by default: the
retention), so a page is found by reading backwards in chunks: the work is bounded by the cap,
never by the caller. Entries are ordered by ``(ts, id)``; a cursor is the last entry returned.
"""

from __future__ import annotations

from typing import Any

from gateway.store.audit.base import AuditLog

CHUNK = 200
# Replicas stamp entries with their own clocks, so the log is time-ordered only up to their skew:
# the backwards scan stops this far past ``since``, not at the first older entry.
SKEW_S = 60.0


def entry_key(entry: dict[str, Any]) -> tuple[float, str]:
    return float(entry.get("ts") or 0.0), str(entry.get("id") or "")


async def audit_page(store: AuditLog, tenant: str, since: float | None, until: float | None,
                     before: tuple[float, str] | None, limit: int,
                     max_scan: int = 10_000) -> tuple[list[dict[str, Any]], bool]:
    """Up to ``limit`` entries with ``since <= ts <= until`` strictly before ``before``, newest first."""
    found: list[dict[str, Any]] = []
    seen: set[tuple[float, str]] = set()
    skip = 0
    while skip < max_scan and len(found) <= limit:
        chunk = await store.audit_tail(tenant, skip, CHUNK)
        if not chunk:
            break
        skip += len(chunk)
        for entry in reversed(chunk):
            key = entry_key(entry)
            if since is not None and key[0] < since - SKEW_S:
                skip = max_scan  # everything further back is older still
                break
            if key in seen or (before is not None and key >= before):
                continue
            if (since is not None and key[0] < since) or (until is not None and key[0] > until):
                continue
            seen.add(key)
            found.append(entry)
    found.sort(key=entry_key, reverse=True)
    return found[:limit], len(found) > limit
