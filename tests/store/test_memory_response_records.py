"""The in-process response records: tenant-bound, expiring on read, pruned in write order."""

from __future__ import annotations

import asyncio

import pytest

from gateway.store.responses import memory as responses
from gateway.store.responses.memory import MemoryResponseRecords


def test_records_expire_and_are_pruned(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(responses.time, "time", lambda: clock[0])
    records = MemoryResponseRecords()

    async def scenario() -> None:
        await records.put("t1", "r1", {"n": 1}, 10)
        await records.put("t1", "r2", {"n": 2}, 10)
        assert await records.get("t1", "r1") == {"n": 1}
        assert await records.get("t2", "r1") is None  # another tenant's id is unknown
        clock[0] = 1005.0
        await records.put("t1", "r1", {"n": 3}, 10)  # a rewrite lives from its own write
        clock[0] = 1011.0
        assert await records.get("t1", "r2") is None
        assert await records.get("t1", "r1") == {"n": 3}
        await records.put("t1", "r3", {"n": 4}, 10)  # prunes r2's entry and r1's stale first one
        assert set(records._items) == {("t1", "r1"), ("t1", "r3")}
        assert await records.delete("t1", "r1") is True
        assert await records.delete("t1", "r1") is False
        clock[0] = 1030.0
        assert await records.delete("t1", "r3") is False  # expired: nothing to delete

    asyncio.run(scenario())
