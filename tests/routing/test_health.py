"""The circuit breaker's states, in process: closed, open, one half-open probe, and its release."""

from __future__ import annotations

import asyncio
import time

from gateway.routing.health import TargetHealth
from tests.routing.conftest import HealthClock


async def test_one_probe_after_the_cooldown_and_it_is_released_without_a_verdict(health_clock: HealthClock) -> None:
    health = TargetHealth(failures_to_open=2, cooldown_s=5)
    assert await health.admit("t") == "closed" and health.healthy("t")
    await health.record("t", failed=True)
    assert not health.is_open("t"), "one failure of two does not open the circuit"
    await health.record("t", failed=True)
    assert health.is_open("t") and await health.admit("t") == "refused"
    health_clock.advance(4.9)
    assert health.is_open("t")
    health_clock.advance(0.2)
    assert not health.is_open("t")
    assert await health.admit("t") == "probe"
    assert await health.admit("t") == "refused", "exactly one probe at a time"
    health.release_probe("t")  # the prober's client left: no verdict
    assert await health.admit("t") == "probe", "a released probe is granted again"
    await health.record("t", failed=False)
    assert health.state("t") == "closed" and await health.admit("t") == "closed"


async def test_a_failed_probe_reopens_the_circuit_at_once(health_clock: HealthClock) -> None:
    health = TargetHealth(failures_to_open=3, cooldown_s=5)
    for _ in range(3):
        await health.record("t", failed=True)
    health_clock.advance(5.1)
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


async def _until(check: object, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


async def test_shared_health_is_refreshed_in_the_background_and_the_fast_path_never_reads_it() -> None:
    shared = _Shared()
    health = TargetHealth(failures_to_open=2, cooldown_s=30, shared=shared, refresh_s=0.05)
    health.track("t")
    assert health.healthy("t") and await health.admit("t") == "closed"
    assert shared.reads == 0, "the request path reads no store"
    health.start()
    try:
        await _until(lambda: shared.reads >= 1, "the refresher reads the shared state")
        shared.open_until["t"] = time.time() + 30  # another replica found the target dead
        await _until(lambda: not health.healthy("t"), "the refresher brings the shared open circuit here")
        reads = shared.reads
        assert await health.admit("t") == "refused" and health.is_open("t")
        assert shared.reads == reads, "admit itself never asks the store"
    finally:
        await health.aclose()


class _Hung:
    """A store that takes every call and never answers (a SIGSTOPped Redis, seen from the client)."""

    def __init__(self) -> None:
        self.reports = 0
        self.reads = 0

    async def health_report(self, target: str, failed: bool, threshold: int, cooldown_s: float) -> float | None:
        self.reports += 1
        await asyncio.Event().wait()
        return None

    async def health_open_until(self, target: str) -> float | None:
        self.reads += 1
        await asyncio.Event().wait()
        return None


async def test_a_hung_shared_store_never_holds_up_admit_or_record() -> None:
    hung = _Hung()
    health = TargetHealth(failures_to_open=2, cooldown_s=30, shared=hung, refresh_s=0.05)
    health.track("t")
    health.start()
    try:
        await _until(lambda: hung.reads >= 1, "the refresher is waiting on the hung store")
        # Each of these would wait for ever if the request path awaited the store.
        assert await asyncio.wait_for(health.admit("t"), 10) == "closed"
        await asyncio.wait_for(health.record("t", failed=True), 10)
        await asyncio.wait_for(health.record("t", failed=True), 10)
        assert health.is_open("t"), "the local verdict stands without the store"
        await _until(lambda: hung.reports >= 1, "the failure is handed to the background writer")
        for _ in range(3000):  # far past the queue: dropped, never waited for
            await asyncio.wait_for(health.record("u", failed=True), 10)
    finally:
        await asyncio.wait_for(health.aclose(), 10)
