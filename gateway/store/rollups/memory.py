"""Rollups in one process (``memory://``): the one replica's own series."""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable

from gateway.store.rollups.base import MAX_READ, RollupStore


class MemoryRollups(RollupStore):
    def __init__(self, retention_s: float, status_ttl_s: float, clock: Callable[[], float] = time.time) -> None:
        super().__init__(retention_s, status_ttl_s)
        self._clock = clock
        self._at: list[float] = []
        self._records: list[bytes] = []
        self._status: dict[str, tuple[float, bytes]] = {}

    async def write(self, replica: str, at: float, record: bytes, status: bytes) -> None:
        index = bisect.bisect_right(self._at, at)
        self._at.insert(index, at)
        self._records.insert(index, record)
        cut = bisect.bisect_left(self._at, self._clock() - self.retention_s)
        if cut:
            del self._at[:cut], self._records[:cut]
        self._status[replica] = (self._clock() + self.status_ttl_s, status)

    async def read(self, since: float) -> list[bytes]:
        start = bisect.bisect_left(self._at, max(since, self._clock() - self.retention_s))
        return self._records[start:start + MAX_READ]

    async def statuses(self) -> dict[str, bytes]:
        now = self._clock()
        for replica in [r for r, (until, _) in self._status.items() if until <= now]:
            del self._status[replica]
        return {replica: status for replica, (_, status) in self._status.items()}
