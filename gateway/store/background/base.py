"""The store contract of background responses: the run record, its lease, its events and its cancel flag.

A background response (``POST /v1/responses`` with ``background: true``) runs on one gateway
replica, but any replica sharing the store must be able to poll it, follow its stream and cancel
it. So everything about a run lives here, and the replica running it talks to the others only
through this record::

    queued --start--> in_progress --finish--> completed | incomplete | failed | cancelled
       \\                  |
        +------ expire ----+--> failed | cancelled   (the runner's lease ran out: it died)

The runner (the *owner*) holds a lease it renews on every write and on a heartbeat; every owner
operation is fenced: once the record is no longer active or no longer its own, the owner gets
``RunLost`` and must stop (a replica that was only partitioned away cannot overwrite the verdict
of the reader that found its lease expired). A reader that finds an expired lease calls
``expire``, which changes the record at most once (the check and the change are atomic).
Cancelling sets a flag the owner sees on its next write or heartbeat (every reply carries it),
so a cancel issued on any replica reaches the one running the loop.

Events are the Responses stream events, stored as opaque JSON blobs in order, only for runs
created with ``stream: true``. Their ``sequence_number`` values are consecutive from the first
stored one (``first_seq``), so "the events after N" is a range, not a scan. Their number and
total size are capped per run (``EventsLimit``); the terminal event, stored by ``finish`` with
the run's end, is not refused by them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from gateway.store.errors import StoreError

RunStatus = Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]
ACTIVE: frozenset[str] = frozenset({"queued", "in_progress"})
TERMINAL: frozenset[str] = frozenset({"completed", "incomplete", "failed", "cancelled"})


@dataclass(slots=True)
class BackgroundRun:
    """A run as stored. ``response`` is the latest snapshot of the response object (opaque to the store)."""

    id: str
    tenant: str
    status: str
    owner: str
    lease_until: float
    stream: bool
    response: dict[str, Any]
    created_at: float
    cancel_requested: bool = False
    #: number of events stored, and the ``sequence_number`` of the first one (0 until one is stored)
    events: int = 0
    first_seq: int = 0

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    def lease_expired(self, now: float) -> bool:
        return self.active and self.lease_until < now

    @property
    def next_seq(self) -> int:
        return self.first_seq + self.events


class RunNotFound(StoreError):
    """Unknown, expired, deleted or another tenant's run (indistinguishable on purpose: a 404)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"background response {run_id!r} not found")
        self.run_id = run_id


class RunLost(StoreError):
    """The owner may no longer write: the run ended (cancelled after an expired lease, failed), or is gone."""

    def __init__(self, run_id: str, status: str | None) -> None:
        super().__init__(f"background response {run_id!r} is no longer run here (status {status or 'gone'})")
        self.run_id = run_id
        self.status = status


class EventsLimit(StoreError):
    """Storing these events would pass the run's event count or byte cap; nothing was stored."""


class BackgroundStore(ABC):
    """Background runs over one backend; every method is a coroutine that never blocks the event loop."""

    # -- the owner (the replica running the loop) ----------------------------------------------
    @abstractmethod
    async def create(self, run: BackgroundRun, ttl_s: int) -> None:
        """Store a new run (status, owner and lease as given) for ``ttl_s`` seconds; overwrites the id."""

    @abstractmethod
    async def heartbeat(self, run_id: str, owner: str, lease_until: float) -> bool:
        """Renew the lease; returns whether a cancel was requested. ``RunLost`` when no longer ours."""

    @abstractmethod
    async def update(self, run_id: str, owner: str, status: str, response: dict[str, Any],
                     lease_until: float) -> bool:
        """Change the status and snapshot of an active run (queued -> in_progress); returns the cancel flag."""

    @abstractmethod
    async def append(self, run_id: str, owner: str, events: list[bytes], first_seq: int, lease_until: float,
                     max_events: int, max_bytes: int) -> bool:
        """Store ``events`` (consecutive, the first with ``first_seq``); returns the cancel flag.

        ``EventsLimit`` (nothing stored) when the run would hold more than ``max_events`` events or
        ``max_bytes`` bytes of them; ``RunLost`` when no longer ours. Also renews the lease.
        """

    @abstractmethod
    async def finish(self, run_id: str, owner: str, status: str, response: dict[str, Any], ttl_s: int,
                     event: bytes | None = None, seq: int = 0) -> None:
        """Terminal status and final snapshot; the run (and its events) then live ``ttl_s`` more seconds.

        ``event``, when given, is stored with them as the run's last event (its ``sequence_number``
        is ``seq``, the one after the stored events), past the count and byte caps: a follower that
        sees the run ended finds how it ended at the end of its stream, whatever cap ended it.
        """

    # -- any replica -----------------------------------------------------------------------------
    @abstractmethod
    async def get(self, run_id: str, tenant: str) -> BackgroundRun:
        """The run as stored. ``RunNotFound`` for unknown, expired or another tenant's ids."""

    @abstractmethod
    async def events(self, run_id: str, tenant: str, after_seq: int, limit: int) -> list[bytes]:
        """Up to ``limit`` stored events with ``sequence_number > after_seq``, in order."""

    @abstractmethod
    async def request_cancel(self, run_id: str, tenant: str) -> str:
        """Set the cancel flag of an active run; returns the status seen (a terminal one is left as is)."""

    @abstractmethod
    async def expire(self, run_id: str, tenant: str, now: float, seen_events: int, status: str,
                     response: dict[str, Any], event: bytes | None, ttl_s: int) -> bool:
        """End a run whose owner stopped renewing its lease; True for the one caller that did it.

        Changes nothing (False) unless the run is still active, its lease ended before ``now`` and it
        still holds ``seen_events`` events (so nothing the owner wrote since the caller read it is
        overwritten). ``event``, when given, is stored as the run's last event (its terminal one).
        """

    @abstractmethod
    async def delete(self, run_id: str, tenant: str) -> bool:
        """Remove the run and its events; False when there was none for this tenant."""


def dump(response: dict[str, Any]) -> bytes:
    return orjson.dumps(response)
