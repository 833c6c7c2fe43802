"""run_batch: bounded concurrency, input order, cancellation of the whole batch."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.tools import ToolRegistry, run_batch, run_tool
from tests.tools import sample_tools
from tests.tools.helpers import python_tool


@pytest.fixture
async def registry() -> ToolRegistry:
    return await ToolRegistry.from_config({
        "nap": python_tool("nap", "sleep_async"),
        "nap_sync": python_tool("nap_sync", "sleep_sync"),
        "weather": python_tool("weather", "raises"),
    })


def naps(registry: ToolRegistry, name: str, delays: list[float]) -> list[tuple]:
    tool = registry.get(name)
    return [(tool, f'{{"tag": "t{i}", "delay": {d}}}') for i, d in enumerate(delays)]


async def timed(items: list[tuple], concurrency: int) -> tuple[float, list]:
    started = time.perf_counter()
    outcomes = await run_batch(items, concurrency)
    return time.perf_counter() - started, outcomes


@pytest.mark.parametrize("name", ["nap", "nap_sync"])
async def test_calls_overlap_up_to_the_concurrency(registry: ToolRegistry, name: str) -> None:
    elapsed, outcomes = await timed(naps(registry, name, [0.2] * 4), concurrency=4)
    assert [o.status for o in outcomes] == ["ok"] * 4
    assert elapsed < 0.6  # ~0.2 s when they overlap, 0.8 s if they did not


@pytest.mark.parametrize("name", ["nap", "nap_sync"])
async def test_concurrency_one_runs_them_one_after_another(registry: ToolRegistry, name: str) -> None:
    elapsed, _ = await timed(naps(registry, name, [0.2] * 4), concurrency=1)
    assert elapsed >= 0.8


async def test_concurrency_two_runs_in_two_waves(registry: ToolRegistry) -> None:
    elapsed, _ = await timed(naps(registry, "nap", [0.2] * 4), concurrency=2)
    assert 0.4 <= elapsed < 0.75


async def test_outcomes_keep_input_order_when_the_first_finishes_last(registry: ToolRegistry) -> None:
    items = naps(registry, "nap", [0.3, 0.05, 0.1, 0.0])
    outcomes = await run_batch(items, concurrency=4)
    assert [o.content for o in outcomes] == ["t0", "t1", "t2", "t3"]
    assert sample_tools.finished == ["t3", "t1", "t2", "t0"]


async def test_failures_stay_in_their_slot(registry: ToolRegistry) -> None:
    items = [naps(registry, "nap", [0.05])[0], (registry.get("weather"), '{"city": "X"}'),
             (registry.get("weather"), "not json")]
    outcomes = await run_batch(items, concurrency=3)
    assert [o.status for o in outcomes] == ["ok", "error", "error"]
    assert outcomes[1].content == "ValueError: no weather for X"
    assert "not valid JSON" in outcomes[2].content


async def test_single_and_empty_batches(registry: ToolRegistry) -> None:
    assert await run_batch([], concurrency=4) == []
    [outcome] = await run_batch(naps(registry, "nap", [0.0]), concurrency=4)
    assert outcome.content == "t0"


async def test_concurrency_must_be_positive(registry: ToolRegistry) -> None:
    with pytest.raises(ValueError, match="concurrency"):
        await run_batch(naps(registry, "nap", [0.0]), concurrency=0)


async def test_cancelling_the_batch_cancels_every_running_call(registry: ToolRegistry) -> None:
    task = asyncio.create_task(run_batch(naps(registry, "nap", [5, 5, 5]), concurrency=2))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(sample_tools.cancelled) == ["t0", "t1"]  # t2 was still waiting for a slot
    assert sample_tools.finished == []


async def test_elapsed_ms_excludes_time_waiting_for_a_slot(registry: ToolRegistry) -> None:
    outcomes = await run_batch(naps(registry, "nap", [0.1, 0.1]), concurrency=1)
    assert all(80 <= o.elapsed_ms < 400 for o in outcomes)
    single = await run_tool(registry.get("nap"), '{"tag": "x", "delay": 0}')
    assert single.elapsed_ms < 100
