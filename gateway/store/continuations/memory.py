"""Continuations, the tool ledger and artifacts in one process (part of ``MemoryStore``).

Everything is also under a byte bound (``store.memory_max_bytes``, split by
``bounded.MEMORY_SHARES``): past their share, the oldest paused loops, ledger entries and
artifacts are evicted (``loopgate_store_evictions_total``). An evicted paused loop is gone like
an expired one (a resume is a 404); an evicted ledger entry only means a tool approved before
could be asked for again.

Atomicity comes for free: no method awaits anything, so on the event loop each one runs to
completion before any other coroutine can observe its state (the claim is a check-and-set no
other task can interleave with). Expiry is lazy (checked on every read) and every write
prunes what has expired since, via a deadline heap, so memory stays bounded by what is live
without a background task. Values are stored serialised (orjson), like in Redis: callers can
never mutate stored state through a reference, and non-JSON data fails at write time in
development exactly as it would in production.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.config.store_section import DEFAULT_MEMORY_MAX_BYTES
from gateway.store.bounded import BoundedMap, share
from gateway.store.continuations.base import (
    Continuation,
    ContinuationConflict,
    ContinuationNotFound,
    ContinuationStatus,
    ContinuationStore,
    claimable,
    claimed,
    holders,
    indexed,
    resumed_entry,
    with_holder,
    without_holder,
)
from gateway.store.continuations.listing import TenantListing
from gateway.store.ttl import TTLMap, check_ttl

#: what a tool call id costs in the index, counted with the record it belongs to
_ID_BYTES = 96


@dataclass(slots=True)
class _Record:
    """A stored continuation: the serialised body plus the fields the state machine changes."""

    tenant: str
    status: ContinuationStatus
    claimed_until: float | None
    body: bytes
    tool_call_ids: list[str]
    result: bytes | None = None

    def load(self) -> Continuation:
        c = Continuation.from_bytes(self.body)
        c.status = self.status
        c.claimed_until = self.claimed_until
        c.result = self.result
        return c


class MemoryContinuations(ContinuationStore):
    """The continuation part of ``MemoryStore``. ``clock`` (wall-clock seconds) can be injected in tests."""

    def __init__(self, clock: Callable[[], float], memory_max_bytes: int = DEFAULT_MEMORY_MAX_BYTES) -> None:
        self._clock = clock
        self._records: BoundedMap[str, _Record] = BoundedMap(
            "continuations", share(memory_max_bytes, "continuations"), self._record_dropped)
        self._index: TTLMap[tuple[str, str], str] = TTLMap()
        self._ledger: BoundedMap[tuple[str, str], bytes] = BoundedMap("ledger", share(memory_max_bytes, "ledger"))
        self._artifacts: BoundedMap[tuple[str, str], bytes] = BoundedMap(
            "artifacts", share(memory_max_bytes, "artifacts"))
        self._listing = TenantListing()

    def _record_dropped(self, continuation_id: str, rec: _Record, size: int) -> None:
        """A record that leaves (expired, evicted, cancelled) takes its index and listing entries with it."""
        self._unindex(rec, continuation_id)
        self._listing.remove(rec.tenant, continuation_id)

    def _live(self, continuation_id: str, tenant: str, now: float) -> _Record:
        rec = self._records.get(continuation_id, now)
        if rec is None or rec.tenant != tenant or rec.status == "cancelled":
            raise ContinuationNotFound(continuation_id)
        return rec

    def _unindex(self, rec: _Record, continuation_id: str, resumed: bool = False) -> None:
        """Its ids' index entries let go of it; ``resumed``: its own entries become ``RESUMED_TOOL_CALL`` ones."""
        now = self._clock()
        marker = resumed_entry(continuation_id)
        for tc in rec.tool_call_ids:
            key = (rec.tenant, tc)
            held = self._index.get(key, now)
            if held == marker:  # the record leaves: so does what says it was resumed
                self._index.pop(key)
                continue
            if held is None or continuation_id not in holders(held):
                continue  # another continuation's own entry
            if resumed and held == continuation_id:
                self._index.replace(key, marker, now)
                continue
            left = without_holder(held, continuation_id)
            if left is None:
                self._index.pop(key)
            else:
                self._index.replace(key, left, now)

    async def save_continuation(self, c: Continuation, ttl_s: int) -> None:
        now = self._clock()
        deadline = now + check_ttl(ttl_s)
        ids = c.tool_call_ids
        body = c.to_bytes()
        rec = _Record(tenant=c.tenant, status=c.status, claimed_until=c.claimed_until, body=body,
                      tool_call_ids=ids)
        self._records.set(c.id, rec, len(body) + _ID_BYTES * len(ids), deadline, now)
        for tc in ids:  # an id another live continuation holds becomes ambiguous (base.with_holder)
            self._index.set((c.tenant, tc), with_holder(self._index.get((c.tenant, tc), now), c.id), deadline, now)
        self._listing.add(c.tenant, c.id, c.expires_at, c.summary)

    async def get_continuation(self, continuation_id: str, tenant: str) -> Continuation:
        return self._live(continuation_id, tenant, self._clock()).load()

    async def claim_continuation(self, continuation_id: str, tenant: str, lease_s: float,
                                 known: Continuation | None = None) -> Continuation:
        now = self._clock()
        rec = self._live(continuation_id, tenant, now)
        if rec.status == "resumed" or (rec.status == "claimed" and (rec.claimed_until or 0.0) > now):
            raise ContinuationConflict(continuation_id, rec.status)
        rec.status = "claimed"
        rec.claimed_until = now + lease_s
        return claimed(known, rec.claimed_until) if claimable(known, continuation_id, tenant) else rec.load()

    async def release_continuation(self, continuation_id: str, tenant: str) -> None:
        rec = self._live(continuation_id, tenant, self._clock())
        if rec.status == "resumed":
            raise ContinuationConflict(continuation_id, rec.status)
        rec.status = "pending"
        rec.claimed_until = None

    async def finish_continuation(self, continuation_id: str, tenant: str, result: bytes | None = None,
                                  kept: Continuation | None = None) -> None:
        rec = self._live(continuation_id, tenant, self._clock())
        if rec.status != "claimed":
            raise ContinuationConflict(continuation_id, rec.status, f"continuation {continuation_id!r} is "
                                       f"{rec.status}, not claimed")
        rec.status = "resumed"
        rec.claimed_until = None
        rec.result = result
        if kept is not None:
            rec.body = kept.to_bytes()
        self._unindex(rec, continuation_id, resumed=True)
        self._listing.remove(tenant, continuation_id)

    async def cancel_continuation(self, continuation_id: str, tenant: str) -> bool:
        now = self._clock()
        rec = self._live(continuation_id, tenant, now)
        if rec.status == "resumed" or (rec.status == "claimed" and (rec.claimed_until or 0.0) > now):
            raise ContinuationConflict(continuation_id, rec.status)
        self._records.pop(continuation_id)
        self._unindex(rec, continuation_id)
        self._listing.remove(tenant, continuation_id)
        return True

    async def list_continuations(self, tenant: str, limit: int,
                                 before: tuple[float, str] | None = None) -> tuple[list[dict[str, Any]], bool]:
        now = self._clock()
        out: list[dict[str, Any]] = []
        for cid, deadline, raw in self._listing.page(tenant, now, limit, before):
            rec = self._records.get(cid, now)
            if rec is None or rec.tenant != tenant or rec.status in ("resumed", "cancelled"):
                self._listing.remove(tenant, cid)
                continue
            entry = orjson.loads(raw)
            entry["status"] = rec.status
            entry["_score"] = deadline
            out.append(entry)
        return out[:limit], len(out) > limit

    async def find_continuation_by_tool_call(self, tenant: str, tool_call_id: str) -> str | None:
        return indexed(self._index.get((tenant, tool_call_id), self._clock()))

    async def find_paused(self, tenant: str, tool_call_ids: list[str],
                          lease_s: float | None = None) -> Continuation | None:
        now = self._clock()
        found = next((cid for tc in tool_call_ids if (cid := indexed(self._index.get((tenant, tc), now)))), None)
        if found is None:
            return None
        try:
            rec = self._live(found, tenant, now)
        except ContinuationNotFound:
            return None
        c = rec.load()
        if lease_s is not None and (rec.status == "pending" or (rec.status == "claimed"
                                                               and (rec.claimed_until or 0.0) <= now)):
            rec.status = "claimed"  # as claim_continuation takes it
            rec.claimed_until = c.held_until = now + lease_s
        return c

    # -- ledger ----------------------------------------------------------------------------------
    async def ledger_get(self, tenant: str, tool_call_id: str) -> dict[str, Any] | None:
        raw = self._ledger.get((tenant, tool_call_id), self._clock())
        return None if raw is None else orjson.loads(raw)

    async def ledger_put(self, tenant: str, tool_call_id: str, record: dict[str, Any], ttl_s: int) -> None:
        now = self._clock()
        raw = orjson.dumps(record)
        self._ledger.set((tenant, tool_call_id), raw, len(raw), now + check_ttl(ttl_s), now)

    async def ledger_claim(self, tenant: str, key: str, record: dict[str, Any], ttl_s: int,
                           undo_unconfirmed: bool = False) -> dict[str, Any] | None:
        now = self._clock()
        there = self._ledger.get((tenant, key), now)
        if there is not None:
            loaded: dict[str, Any] = orjson.loads(there)
            return loaded
        raw = orjson.dumps(record)
        self._ledger.set((tenant, key), raw, len(raw), now + check_ttl(ttl_s), now)
        return None

    # -- artifacts -------------------------------------------------------------------------------
    async def put_artifacts(self, tenant: str, items: dict[str, dict[str, Any]], ttl_s: int) -> None:
        now = self._clock()
        deadline = now + check_ttl(ttl_s)
        encoded = {tc: orjson.dumps(a) for tc, a in items.items()}  # all or nothing on bad data
        for tc, raw in encoded.items():
            self._artifacts.set((tenant, tc), raw, len(raw), deadline, now)

    async def get_artifacts(self, tenant: str, ids: list[str]) -> dict[str, dict[str, Any]]:
        now = self._clock()
        out: dict[str, dict[str, Any]] = {}
        for tc in ids:
            raw = self._artifacts.get((tenant, tc), now)
            if raw is not None:
                out[tc] = orjson.loads(raw)
        return out
