"""The circuit breaker's states, in process: closed, open, one half-open probe, and its release."""

from __future__ import annotations

import asyncio

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
