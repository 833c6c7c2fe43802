"""The notification outbox: jobs every replica may take, each held by one replica at a time.

A job is an opaque body under an id, due at a time. ``claim`` atomically takes due jobs and
moves their due time to the end of a lease: while the lease runs no other replica sees them,
and when a replica dies holding one, the job simply becomes due again once the lease is over.
The new due time doubles as the claim's token: ``done`` and ``retry`` only act when the job
still carries it, so a replica that outlived its lease cannot undo a newer claim's work.

One sorted set (id -> due, in milliseconds) plus one hash (id -> body); on Redis both live under
one hash tag, so every operation is a single-slot script (cluster-safe). ``push`` refuses jobs
past ``max_jobs`` (returns how many it refused): a receiver that is down for long must not
grow the store without bound. Pushing an existing id replaces its body and due time, which is
how a scheduled check is moved.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Claimed:
    id: str
    body: bytes
    token: int  # the lease end (ms) this claim set; pass it back to done/retry


def now_ms() -> int:
    return int(time.time() * 1000)


class Outbox(ABC):
    @abstractmethod
    async def push(self, jobs: list[tuple[str, int, bytes]], max_jobs: int) -> int:
        """Add (or replace) ``(id, due_ms, body)`` jobs; returns how many were refused because the outbox is full."""

    @abstractmethod
    async def claim(self, lease_ms: int, limit: int) -> list[Claimed]:
        """Take up to ``limit`` due jobs for ``lease_ms``; none is handed to two live claims."""

    @abstractmethod
    async def done(self, job_id: str, token: int) -> bool:
        """Remove a claimed job; False when the claim was lost (lease over and taken again)."""

    @abstractmethod
    async def retry(self, job_id: str, token: int, due_ms: int, body: bytes) -> bool:
        """Put a claimed job back, due at ``due_ms`` with a new body; False when the claim was lost."""

    @abstractmethod
    async def size(self) -> int:
        """Jobs in the outbox (waiting or claimed)."""
