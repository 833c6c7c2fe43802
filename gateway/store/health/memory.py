"""Shared target health in one process (part of ``MemoryStore``)."""

from __future__ import annotations

from collections.abc import Callable

from gateway.store.health.base import HealthStore, failure_window
from gateway.store.ttl import TTLMap


class MemoryHealth(HealthStore):
    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._fails: TTLMap[str, int] = TTLMap()
        self._open: TTLMap[str, float] = TTLMap()

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
