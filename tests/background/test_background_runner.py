"""The background runner (gateway/background/runner.py) driving event streams into the embedded store.

The event sources are plain async generators shaped like ``ResponseRun.events()``; the store is the
real ``MemoryBackground`` (one subclass injects a store outage). The end-to-end behaviour over HTTP,
Redis and several processes is in tests/e2e/test_responses_background.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from gateway.background.runner import BackgroundRunner
from gateway.config.model import BackgroundConfig
from gateway.errors import GatewayError
from gateway.store.background.memory import MemoryBackground
from gateway.store.errors import StoreUnavailable

CONFIG = BackgroundConfig(max_concurrent=2, max_events=16, max_event_bytes=1 << 20, lease_s=5.0, heartbeat_s=0.05,
                          poll_s=0.05)


def _created(rid: str) -> dict[str, Any]:
    return {"type": "response.created", "sequence_number": 0,
            "response": {"id": rid, "object": "response", "status": "in_progress", "output": []}}


async def _deltas(rid: str, n: int, closed: list[str], hang: asyncio.Event | None = None,
                  fail: bool = False) -> AsyncIterator[dict[str, Any]]:
    try:
        yield _created(rid)
        for i in range(1, n + 1):
            yield {"type": "response.output_text.delta", "sequence_number": i, "delta": f"d{i}"}
        if hang is not None:
            await hang.wait()  # a tool that runs until cancelled
        if fail:
            raise RuntimeError("renderer bug")
        yield {"type": "response.completed", "sequence_number": n + 1,
               "response": {"id": rid, "object": "response", "status": "completed", "output": []}}
    finally:
        closed.append(rid)


async def _finished(runner: BackgroundRunner, rid: str) -> None:
    await runner.wait_local(rid, 10.0)
    assert not runner.is_local(rid)


async def test_a_run_is_stored_with_its_events_and_final_snapshot() -> None:
    store = MemoryBackground()
    runner = BackgroundRunner(store, CONFIG, 60)
    closed: list[str] = []
    run = await runner.launch("t1", _deltas("resp_a", 3, closed), stream=True)
    assert (run.status, run.response["background"]) == ("in_progress", True)
    await _finished(runner, "resp_a")
    stored = await store.get("resp_a", "t1")
    assert (stored.status, stored.response["status"], stored.response["background"]) == ("completed", "completed",
                                                                                         True)
    frames = await store.events("resp_a", "t1", -1, 100)
    assert [orjson.loads(f.split(b"data: ", 1)[1])["sequence_number"] for f in frames] == [0, 1, 2, 3, 4]
    assert frames[0].startswith(b"event: response.created\ndata: ")
    assert closed == ["resp_a"]


async def test_cancel_closes_the_running_generator() -> None:
    store = MemoryBackground()
    runner = BackgroundRunner(store, CONFIG, 60)
    closed: list[str] = []
    await runner.launch("t1", _deltas("resp_c", 2, closed, hang=asyncio.Event()), stream=False)
    assert await store.events("resp_c", "t1", -1, 10) == []  # not created with stream: true
    assert runner.cancel_local("resp_c")
    await _finished(runner, "resp_c")
    assert (await store.get("resp_c", "t1")).status == "cancelled"
    assert closed == ["resp_c"]  # the generator's finally ran: its tools were cancelled


async def test_a_failing_source_fails_the_run_with_a_terminal_event() -> None:
    store = MemoryBackground()
    runner = BackgroundRunner(store, CONFIG, 60)
    await runner.launch("t1", _deltas("resp_f", 2, [], fail=True), stream=True)
    await _finished(runner, "resp_f")
    stored = await store.get("resp_f", "t1")
    assert (stored.status, stored.response["error"]["code"]) == ("failed", "server_error")
    last = orjson.loads((await store.events("resp_f", "t1", 2, 10))[-1].split(b"data: ", 1)[1])
    assert (last["type"], last["sequence_number"]) == ("response.failed", 3)


async def test_capacity_is_a_429_and_frees_up() -> None:
    runner = BackgroundRunner(MemoryBackground(), CONFIG, 60)
    hang = asyncio.Event()
    for rid in ("resp_1", "resp_2"):
        await runner.launch("t1", _deltas(rid, 0, [], hang=hang), stream=False)
    with pytest.raises(GatewayError) as info:
        await runner.launch("t1", _deltas("resp_3", 0, []), stream=False)
    assert (info.value.status, info.value.code) == (429, "too_many_background_responses")
    hang.set()
    await _finished(runner, "resp_1")
    await _finished(runner, "resp_2")
    await runner.launch("t1", _deltas("resp_3", 0, []), stream=False)
    await _finished(runner, "resp_3")


class _Unreachable(MemoryBackground):
    """Appending events fails as a Redis outage would; everything else works."""

    async def append(self, *args: Any, **kwargs: Any) -> bool:
        raise StoreUnavailable("redis unavailable during background_append: connection refused")


async def test_a_store_outage_cannot_grow_the_queue_past_the_events_cap() -> None:
    store = _Unreachable()
    runner = BackgroundRunner(store, CONFIG, 60)
    closed: list[str] = []
    await runner.launch("t1", _deltas("resp_o", 100, closed), stream=True)
    await _finished(runner, "resp_o")
    stored = await store.get("resp_o", "t1")
    assert (stored.status, stored.response["error"]["code"]) == ("failed", "events_limit_exceeded")
    assert closed == ["resp_o"]


async def test_shutdown_ends_running_runs_failed() -> None:
    store = MemoryBackground()
    runner = BackgroundRunner(store, CONFIG, 60)
    closed: list[str] = []
    await runner.launch("t1", _deltas("resp_s", 1, closed, hang=asyncio.Event()), stream=True)
    await runner.aclose()
    stored = await store.get("resp_s", "t1")
    assert stored.status == "failed" and "shut down" in stored.response["error"]["message"]
    assert closed == ["resp_s"]
    with pytest.raises(GatewayError):  # a closing runner takes no new run
        await runner.launch("t1", _deltas("resp_t", 0, []), stream=False)


def _frame_events(frames: list[bytes]) -> list[dict[str, Any]]:
    return [orjson.loads(frame.split(b"data: ", 1)[1]) for frame in frames]


async def _long_deltas(rid: str, n: int) -> AsyncIterator[dict[str, Any]]:
    yield _created(rid)
    for i in range(1, n + 1):
        await asyncio.sleep(0.005)  # the writer stores some before the cap is reached
        yield {"type": "response.output_text.delta", "sequence_number": i, "delta": "x" * 100}
    yield {"type": "response.completed", "sequence_number": n + 1,
           "response": {"id": rid, "object": "response", "status": "completed", "output": []}}


@pytest.mark.parametrize("wait", [True, False], ids=["loop running", "loop ended first"])
async def test_the_byte_cap_fails_the_run_with_its_terminal_event_stored(wait: bool) -> None:
    """Past ``max_event_bytes`` the stream's last stored event is ``response.failed``, numbered after the
    stored ones, even when the loop had already ended (its last events were refused at the end)."""
    store = MemoryBackground()
    config = BackgroundConfig(max_concurrent=2, max_events=1000, max_event_bytes=2000, lease_s=5.0,
                              heartbeat_s=0.05, poll_s=0.05)
    runner = BackgroundRunner(store, config, 60)
    source = _long_deltas("resp_b", 40) if wait else _deltas("resp_b", 40, [])
    await runner.launch("t1", source, stream=True)
    await _finished(runner, "resp_b")
    stored = await store.get("resp_b", "t1")
    assert (stored.status, stored.response["error"]["code"]) == ("failed", "events_limit_exceeded")
    events = _frame_events(await store.events("resp_b", "t1", -1, 1000))
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.failed" and events[-1]["response"] == stored.response
    assert sum(e["type"] == "response.output_text.delta" for e in events) < 40
    assert not runner.is_local("resp_b") and runner.running == 0


async def test_the_count_cap_keeps_a_place_for_the_terminal_event() -> None:
    store = MemoryBackground()
    runner = BackgroundRunner(store, CONFIG, 60)  # max_events=16: 15 events and the terminal one fit
    await runner.launch("t1", _deltas("resp_16", 14, []), stream=True)
    await runner.launch("t1", _deltas("resp_17", 15, []), stream=True)
    await _finished(runner, "resp_16")
    await _finished(runner, "resp_17")
    fits = await store.get("resp_16", "t1")
    assert (fits.status, fits.events) == ("completed", 16)
    assert _frame_events(await store.events("resp_16", "t1", 14, 10))[-1]["type"] == "response.completed"
    over = await store.get("resp_17", "t1")
    assert over.status == "failed" and over.events <= CONFIG.max_events
    assert _frame_events(await store.events("resp_17", "t1", -1, 20))[-1]["type"] == "response.failed"
