"""Stored Responses records (gateway/store/responses/) on memory and a real Redis: chains, TTLs, byte counts.

A follow-up stores what it adds and names its ancestors; the store joins them on read, keeps them
alive as long as their descendants, and counts every tenant's stored bytes (the quota's input).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from gateway.store.bounded import ENTRY_OVERHEAD
from gateway.store.redis import RedisStore
from gateway.store.responses.base import TRANSCRIPT_HEAD, ChainBroken, ResponseRecords, answer_text
from gateway.store.responses.memory import MemoryResponseRecords
from gateway.store.responses.redis import RedisResponseRecords
from tests.redis_servers import PATIENT
from tests.store.conftest import REDIS_URL, _deployment, _exclusive_redis_db, _flush_redis, require_redis

STEP = 10_000  # bytes of new text per step


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["memory", "redis", "redis-cluster"])
async def records(request: pytest.FixtureRequest) -> AsyncIterator[ResponseRecords]:
    if request.param == "memory":
        yield MemoryResponseRecords()
        return
    if request.param == "redis-cluster":
        deployment = _deployment(request, "redis-cluster")
        deployment.flush()
        store = RedisStore(deployment.url, **deployment.options)
        try:
            yield RedisResponseRecords(store.io, bucket_s=1)
        finally:
            await store.aclose()
            deployment.flush()
        return
    await require_redis()
    with _exclusive_redis_db():
        await _flush_redis()
        store = RedisStore(REDIS_URL, **PATIENT)
        try:
            yield RedisResponseRecords(store.io, bucket_s=1)
        finally:
            await store.aclose()
            await _flush_redis()


def _size(records: ResponseRecords, record: dict[str, Any]) -> int:
    """What the backend counts for ``record``: its JSON, plus the per-entry overhead in memory."""
    return len(orjson.dumps(record)) + (ENTRY_OVERHEAD if isinstance(records, MemoryResponseRecords) else 0)


def _step(i: int, ancestors: list[str]) -> dict[str, Any]:
    said = {"role": "user", "content": f"{i:04d}" + "x" * STEP}
    record: dict[str, Any] = {"response": {"id": f"r{i}"}, "input": [], "continuation_id": None,
                              "transcript": [said, {"role": "assistant", "content": f"answer {i}"}]}
    if ancestors:
        record["ancestors"] = ancestors
    return record


async def test_a_50_step_chain_stores_each_step_once(records: ResponseRecords) -> None:
    ancestors: list[str] = []
    total = 0
    for i in range(50):
        record = _step(i, list(ancestors))
        await records.put("t1", f"r{i}", record, 600)
        total += _size(records, record)
        ancestors.append(f"r{i}")
    stored = await records.stored_bytes("t1")
    assert stored == total  # linear: a full copy per step would be ~25 times this
    assert stored < 50 * (STEP + 2_000)
    last = await records.get("t1", "r49")
    assert last is not None
    full = await records.full_transcript("t1", last)
    assert [m["content"][:4] for m in full if m["role"] == "user"] == [f"{i:04d}" for i in range(50)]
    assert await records.stored_bytes("t2") == 0


def _answered(i: int, ancestors: list[str], output: list[dict[str, Any]]) -> dict[str, Any]:
    """A record whose answer is left out of its transcript: its Response object's message text holds it."""
    record: dict[str, Any] = {"response": {"id": f"r{i}", "output": output}, "input": [], "continuation_id": None,
                              TRANSCRIPT_HEAD: [{"role": "user", "content": f"q{i}"}]}
    if ancestors:
        record["ancestors"] = ancestors
    return record


def _message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


async def test_an_answer_stored_once_is_read_back_from_the_response(records: ResponseRecords) -> None:
    tool = {"type": "mcp_call", "name": "lookup"}
    reasoning = {"type": "reasoning", "summary": []}
    await records.put("t", "r0", _answered(0, [], [_message("thinking aloud"), tool, _message("a0")]), 600)
    await records.put("t", "r1", _answered(1, ["r0"], [reasoning, _message("a1, "), reasoning, _message("in two")]),
                      600)
    plain = {"response": {"id": "r2", "output": [_message("a2")]}, "input": [], "continuation_id": None,
             "transcript": [{"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"}],
             "ancestors": ["r0", "r1"]}  # an older gateway's record: its whole transcript
    await records.put("t", "r2", plain, 600)
    record = await records.get("t", "r2")
    assert record is not None
    assert await records.full_transcript("t", record) == [
        {"role": "user", "content": "q0"}, {"role": "assistant", "content": "a0"},
        {"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1, in two"},
        {"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"}]


def test_the_answer_of_an_output_is_the_text_after_its_last_tool_item() -> None:
    reasoning = {"type": "reasoning", "summary": []}
    output = [_message("before"), {"type": "mcp_call"}, _message("x"), reasoning, _message("y")]
    assert answer_text(output) == "xy"
    assert answer_text([{"type": "mcp_call"}]) == ""


async def test_a_deleted_ancestor_breaks_the_chain_and_gives_its_bytes_back(records: ResponseRecords) -> None:
    root, child = _step(0, []), _step(1, ["r0"])
    await records.put("t1", "r0", root, 600)
    await records.put("t1", "r1", child, 600)
    await records.put("t1", "r1", child, 600)  # an overwrite replaces its bytes, it does not add them
    assert await records.stored_bytes("t1") == _size(records, root) + _size(records, child)
    assert await records.delete("t1", "r0") is True
    assert await records.delete("t1", "r0") is False
    assert await records.stored_bytes("t1") == _size(records, child)
    with pytest.raises(ChainBroken) as broken:
        await records.full_transcript("t1", child)
    assert broken.value.response_id == "r0"
    assert await records.get_many("t2", ["r1"]) == [None]  # another tenant's id is unknown
    await records.delete("t1", "r1")
    assert await records.stored_bytes("t1") == 0


@pytest.mark.slow
async def test_a_child_keeps_its_ancestors_alive_and_expiry_releases_the_bytes(records: ResponseRecords) -> None:
    if isinstance(records, MemoryResponseRecords):
        clock = Clock()
        records = MemoryResponseRecords(clock=clock)
    await records.put("t1", "r0", _step(0, []), 2)
    await records.put("t1", "r1", _step(1, ["r0"]), 4)  # r0 now lives as long as r1
    if isinstance(records, MemoryResponseRecords):
        clock.now += 3
        assert await records.get("t1", "r0") is not None
        clock.now += 2
        assert await records.get_many("t1", ["r0", "r1"]) == [None, None]
        assert await records.stored_bytes("t1") == 0
        return
    time_left = time.monotonic() + 3
    while time.monotonic() < time_left:  # past r0's own TTL, it must still be there
        await asyncio.sleep(0.2)
    assert await records.get("t1", "r0") is not None
    give_up = time.monotonic() + 20
    while await records.stored_bytes("t1") and time.monotonic() < give_up:  # expiry, then the 1 s bucket ends
        await asyncio.sleep(0.2)
    assert await records.get_many("t1", ["r0", "r1"]) == [None, None]
    assert await records.stored_bytes("t1") == 0


async def test_memory_records_stay_under_their_bound_evicting_the_oldest() -> None:
    records = MemoryResponseRecords(max_bytes=1_000_000)
    record = _step(0, [])
    for i in range(300):
        await records.put("t1" if i % 2 else "t2", f"r{i}", record, 600)
    assert records.nbytes <= 1_000_000
    assert await records.get("t2", "r0") is None and await records.get("t1", "r299") is not None
    # The tenant counts follow the evictions exactly.
    assert await records.stored_bytes("t1") + await records.stored_bytes("t2") == records.nbytes


async def test_a_replica_sees_another_ones_writes_in_its_count_within_the_freshness_bound() -> None:
    await require_redis()
    with _exclusive_redis_db():
        await _flush_redis()
        a_store, b_store = RedisStore(REDIS_URL, **PATIENT), RedisStore(REDIS_URL, **PATIENT)
        try:
            a, b = RedisResponseRecords(a_store.io, fresh_s=0.3), RedisResponseRecords(b_store.io, fresh_s=0.3)
            record = _step(0, [])
            await a.put("t1", "r0", record, 600)
            assert await a.stored_bytes("t1") == len(orjson.dumps(record))  # the write's own reply
            await b.put("t1", "r1", record, 600)
            give_up = time.monotonic() + 10
            while await a.stored_bytes("t1") != 2 * len(orjson.dumps(record)) and time.monotonic() < give_up:
                await asyncio.sleep(0.05)
            assert await a.stored_bytes("t1") == 2 * len(orjson.dumps(record))
            assert await b.delete("t1", "r1") and await b.stored_bytes("t1") == len(orjson.dumps(record))
        finally:
            await a_store.aclose()
            await b_store.aclose()
            await _flush_redis()


async def test_a_tenant_at_its_quota_gets_its_bytes_back_as_records_expire_without_writes() -> None:
    clock = Clock()
    records = MemoryResponseRecords(clock=clock)
    await records.put("t1", "r0", _step(0, []), 10)
    assert await records.stored_bytes("t1") > 0
    clock.now += 11  # nothing is written any more (every request of the tenant is refused)
    assert await records.stored_bytes("t1") == 0
