"""The console's rollups on every store deployment: append, trim past the retention, statuses that expire.

On a Cluster every command of a write must land in one slot (the ``{ru}`` hash tag), or the
pipeline would be refused with CROSSSLOT.
"""

from __future__ import annotations

import time

import orjson
import pytest

from gateway.store.factory import open_rollups
from gateway.store.memory import MemoryStore
from gateway.store.rollups.memory import MemoryRollups
from tests.store.conftest import StoreFactory


def record(replica: str, at: float, requests: int) -> bytes:
    return orjson.dumps({"t": at, "r": replica, "q": {"agent": [requests, 0]}})


async def test_rollups_round_trip_on_every_deployment(store_factory: StoreFactory) -> None:
    rollups = open_rollups(await store_factory(), retention_s=120, status_ttl_s=30)
    now = time.time()
    old = now - 500  # past the retention: trimmed by the next write
    await rollups.write("a:1", old, record("a:1", old, 9), b'{"r":"a:1"}')
    for step in range(3):
        at = now - 30 + step * 10
        await rollups.write("a:1", at, record("a:1", at, step + 1), b'{"r":"a:1"}')
        await rollups.write("b:2", at, record("b:2", at, 10), b'{"r":"b:2"}')
    read = [orjson.loads(raw) for raw in await rollups.read(now - 3600)]
    assert [(r["r"], r["q"]["agent"][0]) for r in read if r["r"] == "a:1"] == [("a:1", 1), ("a:1", 2), ("a:1", 3)]
    assert sum(r["q"]["agent"][0] for r in read) == 1 + 2 + 3 + 30
    assert [r["t"] for r in read] == sorted(r["t"] for r in read)
    assert all(r["t"] >= now - 120 for r in read)  # the old one is gone, not just filtered
    since = [orjson.loads(raw)["t"] for raw in await rollups.read(now - 15)]
    assert since == [now - 10, now - 10]
    statuses = await rollups.statuses()
    assert statuses == {"a:1": b'{"r":"a:1"}', "b:2": b'{"r":"b:2"}'}


async def test_a_replica_that_stops_writing_drops_out() -> None:
    clock = [1000.0]
    rollups = MemoryRollups(retention_s=60, status_ttl_s=30, clock=lambda: clock[0])
    await rollups.write("a", 1000.0, b"r1", b"s-a")
    await rollups.write("b", 1000.0, b"r2", b"s-b")
    clock[0] = 1020.0
    await rollups.write("a", 1020.0, b"r3", b"s-a2")
    assert await rollups.statuses() == {"a": b"s-a2", "b": b"s-b"}
    clock[0] = 1031.0  # b's last status is older than its ttl
    assert await rollups.statuses() == {"a": b"s-a2"}
    clock[0] = 1070.0
    await rollups.write("a", 1070.0, b"r4", b"s-a3")
    assert await rollups.read(0.0) == [b"r3", b"r4"]  # r1, r2 fell out of the 60 s retention


@pytest.mark.parametrize("retention", [60.0, 3600.0])
async def test_memory_rollups_stay_bounded(retention: float) -> None:
    clock = [0.0]
    rollups = open_rollups(MemoryStore(), retention, 30)
    assert isinstance(rollups, MemoryRollups)
    rollups._clock = lambda: clock[0]
    for step in range(2000):
        clock[0] = step * 10.0
        await rollups.write("a", clock[0], b"x", b"s")
    assert len(await rollups.read(0.0)) == int(retention / 10) + 1
