"""Background runs in one process (``store.url: memory://``): the embedded default, one worker only.

No method awaits, so each check-and-change is atomic on the event loop, as the Redis scripts are.
Runs expire lazily at their deadline (checked on read, pruned on every create).

All runs together hold at most ``max_bytes`` (their snapshots and stream events; the background
share of ``store.memory_max_bytes``): past it the runs that ended longest ago are evicted
(``loopgate_store_evictions_total{domain="background"}``). A run still going is never evicted (its
owner writes to it); when only those are left, the append that would pass the bound is refused
with ``EventsLimit``, as the per-run cap is, and that run ends ``failed``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.store.background.base import (
    ACTIVE,
    BackgroundRun,
    BackgroundStore,
    EventsLimit,
    RunLost,
    RunNotFound,
)
from gateway.store.bounded import BoundedMap
from gateway.store.ttl import check_ttl

#: the background domain's default share of ``store.memory_max_bytes`` (256 MiB) when built alone
DEFAULT_MAX_BYTES = 64 * 1024 * 1024


@dataclass(slots=True)
class _Entry:
    run: BackgroundRun
    snapshot: bytes
    events: list[bytes] = field(default_factory=list)
    nbytes: int = 0

    @property
    def size(self) -> int:
        return len(self.snapshot) + self.nbytes

    @property
    def ended(self) -> bool:
        return self.run.status not in ACTIVE


def _ended(entry: _Entry) -> bool:
    return entry.ended


class MemoryBackground(BackgroundStore):
    def __init__(self, *, clock: Callable[[], float] = time.time, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._clock = clock
        self._runs: BoundedMap[str, _Entry] = BoundedMap("background", max_bytes, evictable=_ended)

    def _entry(self, run_id: str) -> _Entry | None:
        return self._runs.get(run_id, self._clock())

    def _grow(self, run_id: str, entry: _Entry, extra: int) -> None:
        """Make room for ``extra`` more bytes of ``run_id`` (evicting ended runs), or refuse with ``EventsLimit``."""
        if not self._runs.make_room(extra, run_id):
            raise EventsLimit(f"background response {run_id!r}: the background runs of this process already hold "
                              f"store.memory_max_bytes' background share ({self._runs.max_bytes} bytes)")

    def _owned(self, run_id: str, owner: str) -> _Entry:
        entry = self._entry(run_id)
        if entry is None:
            raise RunLost(run_id, None)
        if entry.run.owner != owner or entry.run.status not in ACTIVE:
            raise RunLost(run_id, entry.run.status)
        return entry

    def _tenant(self, run_id: str, tenant: str) -> _Entry:
        entry = self._entry(run_id)
        if entry is None or entry.run.tenant != tenant:
            raise RunNotFound(run_id)
        return entry

    async def create(self, run: BackgroundRun, ttl_s: int) -> None:
        now = self._clock()
        stored = BackgroundRun(id=run.id, tenant=run.tenant, status=run.status, owner=run.owner,
                               lease_until=run.lease_until, stream=run.stream, response={},
                               created_at=run.created_at)
        entry = _Entry(stored, orjson.dumps(run.response))
        self._runs.set(run.id, entry, entry.size, now + check_ttl(ttl_s), now)

    async def heartbeat(self, run_id: str, owner: str, lease_until: float) -> bool:
        entry = self._owned(run_id, owner)
        entry.run.lease_until = lease_until
        return entry.run.cancel_requested

    async def update(self, run_id: str, owner: str, status: str, response: dict[str, Any],
                     lease_until: float) -> bool:
        entry = self._owned(run_id, owner)
        entry.snapshot = orjson.dumps(response)
        entry.run.status = status
        entry.run.lease_until = lease_until
        self._runs.resize(run_id, entry.size, self._clock())
        return entry.run.cancel_requested

    async def append(self, run_id: str, owner: str, events: list[bytes], first_seq: int, lease_until: float,
                     max_events: int, max_bytes: int) -> bool:
        entry = self._owned(run_id, owner)
        size = sum(len(e) for e in events)
        if len(entry.events) + len(events) > max_events or entry.nbytes + size > max_bytes:
            raise EventsLimit(f"background response {run_id!r} would hold more than {max_events} events "
                              f"or {max_bytes} bytes of them")
        self._grow(run_id, entry, size)
        if not entry.events:
            entry.run.first_seq = first_seq
        entry.events.extend(events)
        entry.nbytes += size
        entry.run.events = len(entry.events)
        entry.run.lease_until = lease_until
        self._runs.resize(run_id, entry.size, self._clock())
        return entry.run.cancel_requested

    async def finish(self, run_id: str, owner: str, status: str, response: dict[str, Any], ttl_s: int,
                     event: bytes | None = None, seq: int = 0) -> None:
        entry = self._owned(run_id, owner)
        if event is not None:
            self._add_last(entry, event, seq)
        self._end(entry, status, response, ttl_s)

    @staticmethod
    def _add_last(entry: _Entry, event: bytes, seq: int) -> None:
        """The terminal event, past the caps (``_end`` then accounts for its bytes)."""
        if not entry.events:
            entry.run.first_seq = seq
        entry.events.append(event)
        entry.nbytes += len(event)
        entry.run.events = len(entry.events)

    def _end(self, entry: _Entry, status: str, response: dict[str, Any], ttl_s: int) -> None:
        """Terminal: the run's bytes are now evictable, and it is the newest ended run (the last to go)."""
        now = self._clock()
        entry.snapshot = orjson.dumps(response)
        entry.run.status = status
        entry.run.lease_until = 0.0
        runs, run_id = self._runs, entry.run.id
        runs.touch(run_id, now + check_ttl(ttl_s), extend_only=False)
        runs.resize(run_id, entry.size, now)

    async def get(self, run_id: str, tenant: str) -> BackgroundRun:
        entry = self._tenant(run_id, tenant)
        run = entry.run
        return BackgroundRun(id=run.id, tenant=run.tenant, status=run.status, owner=run.owner,
                             lease_until=run.lease_until, stream=run.stream, response=orjson.loads(entry.snapshot),
                             created_at=run.created_at, cancel_requested=run.cancel_requested,
                             events=run.events, first_seq=run.first_seq)

    async def events(self, run_id: str, tenant: str, after_seq: int, limit: int) -> list[bytes]:
        entry = self._tenant(run_id, tenant)
        start = max(0, after_seq + 1 - entry.run.first_seq)
        return entry.events[start:start + max(0, limit)]

    async def request_cancel(self, run_id: str, tenant: str) -> str:
        entry = self._tenant(run_id, tenant)
        if entry.run.status in ACTIVE:
            entry.run.cancel_requested = True
        return entry.run.status

    async def expire(self, run_id: str, tenant: str, now: float, seen_events: int, status: str,
                     response: dict[str, Any], event: bytes | None, ttl_s: int) -> bool:
        entry = self._tenant(run_id, tenant)
        run = entry.run
        if run.status not in ACTIVE or run.lease_until >= now or run.events != seen_events:
            return False
        if event is not None:
            self._add_last(entry, event, 0)
        run.owner = ""
        self._end(entry, status, response, ttl_s)
        return True

    async def delete(self, run_id: str, tenant: str) -> bool:
        entry = self._entry(run_id)
        if entry is None or entry.run.tenant != tenant:
            return False
        self._runs.pop(run_id)
        return True
