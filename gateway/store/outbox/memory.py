"""The embedded store's outbox (see base.py for the semantics)."""

from __future__ import annotations

from gateway.store.outbox.base import Claimed, Outbox, now_ms


class MemoryOutbox(Outbox):
    """The embedded store's outbox: one process, so a dict and a scan are enough."""

    def __init__(self) -> None:
        self._jobs: dict[str, tuple[int, bytes]] = {}

    async def push(self, jobs: list[tuple[str, int, bytes]], max_jobs: int) -> int:
        refused = 0
        for job_id, due, body in jobs:
            if job_id not in self._jobs and len(self._jobs) >= max_jobs:
                refused += 1
                continue
            self._jobs[job_id] = (due, body)
        return refused

    async def claim(self, lease_ms: int, limit: int) -> list[Claimed]:
        now = now_ms()
        due = sorted((d, i) for i, (d, _) in self._jobs.items() if d <= now)[:limit]
        claimed = []
        for _, job_id in due:
            body = self._jobs[job_id][1]
            token = now + lease_ms
            self._jobs[job_id] = (token, body)
            claimed.append(Claimed(job_id, body, token))
        return claimed

    async def done(self, job_id: str, token: int) -> bool:
        if self._jobs.get(job_id, (None,))[0] != token:
            return False
        del self._jobs[job_id]
        return True

    async def retry(self, job_id: str, token: int, due_ms: int, body: bytes) -> bool:
        if self._jobs.get(job_id, (None,))[0] != token:
            return False
        self._jobs[job_id] = (due_ms, body)
        return True

    async def size(self) -> int:
        return len(self._jobs)
