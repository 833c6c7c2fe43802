"""The follower hub (gateway/background/followers.py) over the real runner and the embedded store.

A follower that falls behind drops what it buffered (bounded) and reads the gap from the store, so
it still gets every event, in order, once; a follower closed before its stream started still gives
its place back. The end-to-end behaviour (admission, caps, Redis load) is in
tests/e2e/test_background_followers.py.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.background.followers import FOLLOWER_BUFFER_BYTES, FollowerHub
from gateway.background.runner import BackgroundRunner
from gateway.config.model import BackgroundConfig
from gateway.errors import GatewayError
from gateway.store.background.base import BackgroundRun
from gateway.store.background.memory import MemoryBackground

CONFIG = BackgroundConfig(max_concurrent=4, max_events=5000, max_event_bytes=16 << 20, lease_s=5.0,
                          heartbeat_s=0.05, poll_s=0.05, max_followers_per_run=2, max_followers=3)
DELTAS = 2000
DELTA_BYTES = 1024  # 2,000 of them: 2 MB, far past a follower's buffer
SEQ = re.compile(rb'"sequence_number":(\d+)')


def _response(rid: str, status: str) -> dict[str, Any]:
    return {"id": rid, "object": "response", "status": status, "output": []}


async def _events(rid: str, go: asyncio.Event) -> AsyncIterator[dict[str, Any]]:
    yield {"type": "response.created", "sequence_number": 0, "response": _response(rid, "in_progress")}
    await go.wait()
    for i in range(1, DELTAS + 1):
        yield {"type": "response.output_text.delta", "sequence_number": i, "delta": "x" * DELTA_BYTES}
    yield {"type": "response.completed", "sequence_number": DELTAS + 1, "response": _response(rid, "completed")}


def _setup() -> tuple[MemoryBackground, BackgroundRunner, FollowerHub]:
    store = MemoryBackground()
    runner = BackgroundRunner(store, CONFIG, 60)
    return store, runner, FollowerHub(store, CONFIG, runner)


async def test_a_follower_that_falls_behind_reads_the_gap_from_the_store() -> None:
    store, runner, hub = _setup()
    go = asyncio.Event()
    await runner.launch("t1", _events("resp_slow", go), stream=True)

    async def read(run_id: str, tenant: str) -> BackgroundRun:
        return await store.get(run_id, tenant)

    following = hub.follow("t1", "resp_slow", -1, read)
    received = [await anext(following)]  # the replay: response.created
    go.set()  # 2 MB of events while this follower reads nothing
    await runner.wait_local("resp_slow", 10.0)
    follower = following._follower
    async with asyncio.timeout(10):
        while not follower.channel.ended:
            await asyncio.sleep(0.01)
    assert follower.size <= FOLLOWER_BUFFER_BYTES + 256 * (DELTA_BYTES + 200)  # the bound and one chunk at most
    received += [frames async for frames in following]
    await following.aclose()
    sequence = [int(n) for frames in received for n in SEQ.findall(b"".join([frames]))]
    assert sequence == list(range(DELTAS + 2))  # every event, in order, once
    assert b"response.completed" in received[-1]
    assert hub.followers == 0


async def test_caps_and_a_follower_closed_before_it_started() -> None:
    store, runner, hub = _setup()
    gates = [asyncio.Event(), asyncio.Event()]
    for n, gate in enumerate(gates):
        await runner.launch("t1", _events(f"resp_{n}", gate), stream=True)

    async def read(run_id: str, tenant: str) -> BackgroundRun:
        return await store.get(run_id, tenant)

    given_back: list[str] = []

    async def give_back() -> None:
        given_back.append("slot")

    first = [hub.follow("t1", "resp_0", -1, read) for _ in range(2)]
    with pytest.raises(GatewayError) as refused:
        hub.follow("t1", "resp_0", -1, read)
    assert (refused.value.status, refused.value.code) == (429, "too_many_followers")
    assert "max_followers_per_run" in refused.value.message
    other = hub.follow("t1", "resp_1", -1, read)
    with pytest.raises(GatewayError) as refused:
        hub.follow("t1", "resp_1", -1, read)
    assert "(background.max_followers)" in refused.value.message
    own = hub.follow("t1", "resp_1", -1, read, counted=False)  # a run's own stream is never refused
    first[0].on_close = give_back
    await first[0].aclose()  # never iterated: its place and its slot are given back all the same
    assert given_back == ["slot"]
    assert hub.followers == 2
    again = hub.follow("t1", "resp_0", -1, read)
    for following in (first[1], other, own, again):
        await following.aclose()
    assert hub.followers == 0
    for gate in gates:
        gate.set()
    await runner.aclose()
    await hub.aclose()
