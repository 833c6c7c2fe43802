"""Background runs in one process (``store.url: memory://``): the embedded default, one worker only.

No method awaits, so each check-and-change is atomic on the event loop, as the Redis scripts are.
Runs expire lazily at their deadline (checked on read, pruned on every create).
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
from gateway.store.ttl import check_ttl


@dataclass(slots=True)
class _Entry:
    run: BackgroundRun
    deadline: float
    snapshot: bytes
    events: list[bytes] = field(default_factory=list)
    nbytes: int = 0


class MemoryBackground(BackgroundStore):
    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._runs: dict[str, _Entry] = {}

    def _entry(self, run_id: str) -> _Entry | None:
        entry = self._runs.get(run_id)
        if entry is not None and entry.deadline <= self._clock():
            del self._runs[run_id]
            return None
        return entry

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
        for key in [k for k, e in self._runs.items() if e.deadline <= now]:
            del self._runs[key]
        stored = BackgroundRun(id=run.id, tenant=run.tenant, status=run.status, owner=run.owner,
                               lease_until=run.lease_until, stream=run.stream, response={},
                               created_at=run.created_at)
        self._runs[run.id] = _Entry(stored, now + check_ttl(ttl_s), orjson.dumps(run.response))

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
        return entry.run.cancel_requested

    async def append(self, run_id: str, owner: str, events: list[bytes], first_seq: int, lease_until: float,
                     max_events: int, max_bytes: int) -> bool:
        entry = self._owned(run_id, owner)
        size = sum(len(e) for e in events)
        if len(entry.events) + len(events) > max_events or entry.nbytes + size > max_bytes:
            raise EventsLimit(f"background response {run_id!r} would hold more than {max_events} events "
                              f"or {max_bytes} bytes of them")
        if not entry.events:
            entry.run.first_seq = first_seq
        entry.events.extend(events)
        entry.nbytes += size
        entry.run.events = len(entry.events)
        entry.run.lease_until = lease_until
        return entry.run.cancel_requested

    async def finish(self, run_id: str, owner: str, status: str, response: dict[str, Any], ttl_s: int) -> None:
        entry = self._owned(run_id, owner)
        self._end(entry, status, response, ttl_s)

    def _end(self, entry: _Entry, status: str, response: dict[str, Any], ttl_s: int) -> None:
        entry.snapshot = orjson.dumps(response)
        entry.run.status = status
        entry.run.lease_until = 0.0
        entry.deadline = self._clock() + check_ttl(ttl_s)

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
            if not entry.events:
                run.first_seq = 0
            entry.events.append(event)
            entry.nbytes += len(event)
            run.events = len(entry.events)
        run.owner = ""
        self._end(entry, status, response, ttl_s)
        return True

    async def delete(self, run_id: str, tenant: str) -> bool:
        entry = self._entry(run_id)
        if entry is None or entry.run.tenant != tenant:
            return False
        del self._runs[run_id]
        return True
