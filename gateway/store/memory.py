"""The embedded default store: plain dicts in one process.

Right for development and for a single worker: nothing to run besides the gateway. State is
not shared between processes, so ``--workers N`` or several replicas need ``redis://``.

Atomicity comes for free: no method awaits anything, so on the event loop each one runs to
completion before any other coroutine can observe its state (the claim is a check-and-set no
other task can interleave with). Expiry is lazy (checked on every read) and every write
prunes what has expired since, via a deadline heap, so memory stays bounded by what is live
without a background task. Values are stored serialised (orjson), like in Redis: callers can
never mutate stored state through a reference, and non-JSON data fails at write time in
development exactly as it would in production.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import orjson

from gateway.store.base import (
    Continuation,
    ContinuationConflict,
    ContinuationNotFound,
    ContinuationStatus,
    Store,
    audit_entry,
    check_ttl,
    failure_window,
)
from gateway.store.memory_listing import TenantListing
from gateway.store.outbox import MemoryOutbox, Outbox

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _TTLMap(Generic[K, V]):
    """A dict whose entries vanish at a deadline: lazily on read, and by pruning on every write."""

    def __init__(self) -> None:
        self._items: dict[K, tuple[V, float]] = {}
        self._heap: list[tuple[float, int, K]] = []
        self._seq = itertools.count()  # tie-breaker: keys themselves need not be orderable

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: K, now: float) -> V | None:
        item = self._items.get(key)
        if item is None:
            return None
        if item[1] <= now:
            del self._items[key]
            return None
        return item[0]

    def set(self, key: K, value: V, deadline: float, now: float) -> None:
        self._items[key] = (value, deadline)
        heapq.heappush(self._heap, (deadline, next(self._seq), key))
        self.prune(now)

    def pop(self, key: K) -> None:
        self._items.pop(key, None)

    def prune(self, now: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, key = heapq.heappop(heap)
            item = self._items.get(key)
            if item is not None and item[1] <= now:
                del self._items[key]
        # Overwrites and deletes leave stale heap entries behind; rebuild when they dominate.
        if len(heap) > 2 * len(self._items) + 1024:
            self._heap = [(deadline, next(self._seq), key) for key, (_, deadline) in self._items.items()]
            heapq.heapify(self._heap)


@dataclass(slots=True)
class _Record:
    """A stored continuation: the serialised body plus the fields the state machine changes."""

    tenant: str
    status: ContinuationStatus
    claimed_until: float | None
    body: bytes
    tool_call_ids: list[str]

    def load(self) -> Continuation:
        c = Continuation.from_bytes(self.body)
        c.status = self.status
        c.claimed_until = self.claimed_until
        return c


class MemoryStore(Store):
    """Single-process store. ``clock`` (wall-clock seconds) can be injected so tests need not sleep."""

    kind = "memory"

    def __init__(self, *, clock: Callable[[], float] = time.time, audit_max: int = 10_000) -> None:
        self._clock = clock
        self._audit_max = audit_max
        self._records: _TTLMap[str, _Record] = _TTLMap()
        self._index: _TTLMap[tuple[str, str], str] = _TTLMap()
        self._ledger: _TTLMap[tuple[str, str], bytes] = _TTLMap()
        self._artifacts: _TTLMap[tuple[str, str], bytes] = _TTLMap()
        self._audit: dict[str, deque[bytes]] = {}
        self._fails: _TTLMap[str, int] = _TTLMap()
        self._open: _TTLMap[str, float] = _TTLMap()
        self._listing = TenantListing()
        self._closed = False
        self._outboxes: dict[str, MemoryOutbox] = {}

    async def ping(self) -> bool:
        return not self._closed

    def outbox(self, name: str) -> Outbox:
        return self._outboxes.setdefault(name, MemoryOutbox())

    async def aclose(self) -> None:
        self._closed = True

    # -- continuations ---------------------------------------------------------------------------
    def _live(self, continuation_id: str, tenant: str, now: float) -> _Record:
        rec = self._records.get(continuation_id, now)
        if rec is None or rec.tenant != tenant or rec.status == "cancelled":
            raise ContinuationNotFound(continuation_id)
        return rec

    def _unindex(self, rec: _Record, continuation_id: str) -> None:
        for tc in rec.tool_call_ids:
            key = (rec.tenant, tc)
            if self._index.get(key, self._clock()) == continuation_id:
                self._index.pop(key)

    async def save_continuation(self, c: Continuation, ttl_s: int) -> None:
        now = self._clock()
        deadline = now + check_ttl(ttl_s)
        ids = c.tool_call_ids
        rec = _Record(tenant=c.tenant, status=c.status, claimed_until=c.claimed_until, body=c.to_bytes(),
                      tool_call_ids=ids)
        self._records.set(c.id, rec, deadline, now)
        for tc in ids:
            self._index.set((c.tenant, tc), c.id, deadline, now)
        self._listing.add(c.tenant, c.id, c.expires_at, c.summary)

    async def get_continuation(self, continuation_id: str, tenant: str) -> Continuation:
        return self._live(continuation_id, tenant, self._clock()).load()

    async def claim_continuation(self, continuation_id: str, tenant: str, lease_s: float) -> Continuation:
        now = self._clock()
        rec = self._live(continuation_id, tenant, now)
        if rec.status == "resumed" or (rec.status == "claimed" and (rec.claimed_until or 0.0) > now):
            raise ContinuationConflict(continuation_id, rec.status)
        rec.status = "claimed"
        rec.claimed_until = now + lease_s
        return rec.load()

    async def release_continuation(self, continuation_id: str, tenant: str) -> None:
        rec = self._live(continuation_id, tenant, self._clock())
        if rec.status == "resumed":
            raise ContinuationConflict(continuation_id, rec.status)
        rec.status = "pending"
        rec.claimed_until = None

    async def finish_continuation(self, continuation_id: str, tenant: str) -> None:
        rec = self._live(continuation_id, tenant, self._clock())
        if rec.status != "claimed":
            raise ContinuationConflict(continuation_id, rec.status, f"continuation {continuation_id!r} is "
                                       f"{rec.status}, not claimed")
        rec.status = "resumed"
        rec.claimed_until = None
        self._unindex(rec, continuation_id)
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
        return self._index.get((tenant, tool_call_id), self._clock())

    # -- ledger ----------------------------------------------------------------------------------
    async def ledger_get(self, tenant: str, tool_call_id: str) -> dict[str, Any] | None:
        raw = self._ledger.get((tenant, tool_call_id), self._clock())
        return None if raw is None else orjson.loads(raw)

    async def ledger_put(self, tenant: str, tool_call_id: str, record: dict[str, Any], ttl_s: int) -> None:
        now = self._clock()
        self._ledger.set((tenant, tool_call_id), orjson.dumps(record), now + check_ttl(ttl_s), now)

    # -- artifacts -------------------------------------------------------------------------------
    async def put_artifacts(self, tenant: str, items: dict[str, dict[str, Any]], ttl_s: int) -> None:
        now = self._clock()
        deadline = now + check_ttl(ttl_s)
        encoded = {tc: orjson.dumps(a) for tc, a in items.items()}  # all or nothing on bad data
        for tc, raw in encoded.items():
            self._artifacts.set((tenant, tc), raw, deadline, now)

    async def get_artifacts(self, tenant: str, ids: list[str]) -> dict[str, dict[str, Any]]:
        now = self._clock()
        out: dict[str, dict[str, Any]] = {}
        for tc in ids:
            raw = self._artifacts.get((tenant, tc), now)
            if raw is not None:
                out[tc] = orjson.loads(raw)
        return out

    # -- audit -----------------------------------------------------------------------------------
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

    # -- health ----------------------------------------------------------------------------------
    async def health_report(self, target: str, failed: bool, threshold: int, cooldown_s: float) -> float | None:
        now = self._clock()
        if not failed:
            self._fails.pop(target)
            self._open.pop(target)
            return None
        count = (self._fails.get(target, now) or 0) + 1
        self._fails.set(target, count, now + failure_window(cooldown_s), now)
        if count < threshold:
            return None
        current = self._open.get(target, now)
        if current is not None:
            return current
        until = now + cooldown_s
        self._open.set(target, until, until, now)
        return until

    async def health_open_until(self, target: str) -> float | None:
        return self._open.get(target, self._clock())

