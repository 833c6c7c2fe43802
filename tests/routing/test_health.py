"""The circuit breaker's states, in process: closed, open, one half-open probe, and its release."""

from __future__ import annotations

import asyncio
import time

from gateway.routing.health import TargetHealth


async def test_one_probe_after_the_cooldown_and_it_is_released_without_a_verdict() -> None:
    health = TargetHealth(failures_to_open=2, cooldown_s=0.05)
    assert await health.admit("t") == "closed" and health.healthy("t")
    await health.record("t", failed=True)
    assert not health.is_open("t"), "one failure of two does not open the circuit"
    await health.record("t", failed=True)
    assert health.is_open("t") and await health.admit("t") == "refused"
    await asyncio.sleep(0.08)
    assert not health.is_open("t")
    assert await health.admit("t") == "probe"
    assert await health.admit("t") == "refused", "exactly one probe at a time"
    health.release_probe("t")  # the prober's client left: no verdict
    assert await health.admit("t") == "probe", "a released probe is granted again"
    await health.record("t", failed=False)
    assert health.state("t") == "closed" and await health.admit("t") == "closed"


async def test_a_failed_probe_reopens_the_circuit_at_once() -> None:
    health = TargetHealth(failures_to_open=3, cooldown_s=0.05)
    for _ in range(3):
        await health.record("t", failed=True)
    await asyncio.sleep(0.08)
    assert await health.admit("t") == "probe"
    await health.record("t", failed=True)
    assert health.is_open("t") and health.state("t") == "open"


class _Shared:
    """Shared health as another replica left it: an "open until" per target, and the reads counted."""

    def __init__(self) -> None:
        self.open_until: dict[str, float] = {}
        self.reads = 0

    async def health_report(self, target: str, failed: bool, threshold: int, cooldown_s: float) -> float | None:
        return None

    async def health_open_until(self, target: str) -> float | None:
        self.reads += 1
        return self.open_until.get(target)


async def test_shared_health_is_read_back_once_a_refresh_and_the_fast_path_holds_between() -> None:
    shared = _Shared()
    health = TargetHealth(failures_to_open=2, cooldown_s=30, shared=shared)
    health.SHARED_REFRESH_S = 0.2  # type: ignore[misc]
    assert not health.healthy("t"), "never read yet: the walk must ask the shared store"
    assert await health.admit("t") == "closed" and shared.reads == 1
    assert health.healthy("t"), "read just now and closed: no coroutine, no store call"
    shared.open_until["t"] = time.time() + 30  # another replica found the target dead
    assert health.healthy("t"), "within the refresh interval the last reading stands"
    await asyncio.sleep(0.25)
    assert not health.healthy("t"), "a refresh is due: the walk goes through admit"
    assert await health.admit("t") == "refused" and shared.reads == 2
    assert not health.healthy("t") and health.is_open("t")
