"""The background-run contract (gateway/store/background/), against memory and a real Redis.

Two ``RedisBackground`` objects over two ``RedisStore`` connections play two replicas: what one
writes the other must see, and the fences (owner, status, lease) must hold across them.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import orjson
import pytest

from gateway.store.background.base import BackgroundRun, BackgroundStore, EventsLimit, RunLost, RunNotFound
from gateway.store.background.memory import MemoryBackground
from gateway.store.background.redis import RedisBackground
from gateway.store.redis import RedisStore
from tests.redis_servers import PATIENT
from tests.store.conftest import REDIS_URL, _deployment, _exclusive_redis_db, _flush_redis, require_redis


@pytest.fixture(params=["memory", "redis", pytest.param("redis-cluster", marks=pytest.mark.slow)])
async def replicas(request: pytest.FixtureRequest) -> AsyncIterator[tuple[BackgroundStore, BackgroundStore]]:
    """Two handles on one backend (for memory: the same object, one process by definition).

    On the Cluster, each run's two keys share a hash tag: every script touches one slot.
    """
    if request.param == "memory":
        mem = MemoryBackground()
        yield mem, mem
        return
    if request.param == "redis-cluster":
        deployment = _deployment(request, "redis-cluster")
        deployment.flush()
        a = RedisStore(deployment.url, **deployment.options)
        b = RedisStore(deployment.url, **deployment.options)
        try:
            yield RedisBackground(a.io), RedisBackground(b.io)
        finally:
            await a.aclose()
            await b.aclose()
            deployment.flush()
        return
    await require_redis()
    with _exclusive_redis_db():
        await _flush_redis()
        a, b = RedisStore(REDIS_URL, **PATIENT), RedisStore(REDIS_URL, **PATIENT)
        try:
            yield RedisBackground(a.io), RedisBackground(b.io)
        finally:
            await a.aclose()
            await b.aclose()
            await _flush_redis()


def _run(run_id: str = "resp_1", *, owner: str = "A", lease: float = 30.0, stream: bool = True) -> BackgroundRun:
    now = time.time()
    return BackgroundRun(id=run_id, tenant="t1", status="queued", owner=owner, lease_until=now + lease,
                         stream=stream, response={"id": run_id, "status": "queued"}, created_at=now)


def _ev(seq: int) -> bytes:
    return orjson.dumps({"type": "response.output_text.delta", "sequence_number": seq, "delta": f"d{seq}"})


@pytest.mark.slow
async def test_run_lifecycle_seen_from_another_replica(replicas: tuple[BackgroundStore, BackgroundStore]) -> None:
    owner, reader = replicas
    await owner.create(_run(), 60)
    run = await reader.get("resp_1", "t1")
    assert (run.status, run.owner, run.stream, run.events, run.response) == (
        "queued", "A", True, 0, {"id": "resp_1", "status": "queued"})
    lease = time.time() + 30
    assert await owner.update("resp_1", "A", "in_progress", {"id": "resp_1", "status": "in_progress"}, lease) is False
    assert await owner.append("resp_1", "A", [_ev(0), _ev(1), _ev(2)], 0, lease, 100, 10_000) is False
    assert await owner.append("resp_1", "A", [_ev(3)], 3, lease, 100, 10_000) is False
    run = await reader.get("resp_1", "t1")
    assert (run.status, run.events, run.first_seq, run.next_seq) == ("in_progress", 4, 0, 4)
    assert [orjson.loads(e)["sequence_number"] for e in await reader.events("resp_1", "t1", 1, 10)] == [2, 3]
    assert [orjson.loads(e)["sequence_number"] for e in await reader.events("resp_1", "t1", -1, 2)] == [0, 1]
    assert await reader.events("resp_1", "t1", 3, 10) == []
    await owner.finish("resp_1", "A", "completed", {"id": "resp_1", "status": "completed"}, 60)
    run = await reader.get("resp_1", "t1")
    assert (run.status, run.active, run.response["status"]) == ("completed", False, "completed")
    with pytest.raises(RunLost):
        await owner.heartbeat("resp_1", "A", time.time() + 30)


async def test_first_stored_sequence_number_need_not_be_zero(
        replicas: tuple[BackgroundStore, BackgroundStore]) -> None:
    owner, reader = replicas
    await owner.create(_run(), 60)
    await owner.append("resp_1", "A", [_ev(5), _ev(6), _ev(7)], 5, time.time() + 30, 100, 10_000)
    assert [orjson.loads(e)["sequence_number"] for e in await reader.events("resp_1", "t1", 5, 10)] == [6, 7]
    assert len(await reader.events("resp_1", "t1", 0, 10)) == 3


async def test_another_tenant_sees_nothing(replicas: tuple[BackgroundStore, BackgroundStore]) -> None:
    owner, reader = replicas
    await owner.create(_run(), 60)
    for call in (reader.get("resp_1", "t2"), reader.events("resp_1", "t2", -1, 10),
                 reader.request_cancel("resp_1", "t2"),
                 reader.expire("resp_1", "t2", time.time() + 100, 0, "failed", {}, None, 60)):
        with pytest.raises(RunNotFound):
            await call
    assert await reader.delete("resp_1", "t2") is False
    assert (await reader.get("resp_1", "t1")).status == "queued"
    with pytest.raises(RunNotFound):
        await reader.get("resp_unknown", "t1")


async def test_cancel_from_another_replica_reaches_the_owner(
        replicas: tuple[BackgroundStore, BackgroundStore]) -> None:
    owner, other = replicas
    await owner.create(_run(), 60)
    lease = time.time() + 30
    assert await owner.heartbeat("resp_1", "A", lease) is False
    assert await other.request_cancel("resp_1", "t1") == "queued"
    assert (await other.get("resp_1", "t1")).cancel_requested
    assert await owner.heartbeat("resp_1", "A", lease) is True
    assert await owner.append("resp_1", "A", [_ev(0)], 0, lease, 100, 10_000) is True
    await owner.finish("resp_1", "A", "cancelled", {"status": "cancelled"}, 60)
    # A cancel of an ended run changes nothing and reports its status.
    assert await other.request_cancel("resp_1", "t1") == "cancelled"


async def test_events_cap_by_count_and_bytes(replicas: tuple[BackgroundStore, BackgroundStore]) -> None:
    owner, reader = replicas
    await owner.create(_run(), 60)
    lease = time.time() + 30
    await owner.append("resp_1", "A", [_ev(0), _ev(1)], 0, lease, 3, 10_000)
    with pytest.raises(EventsLimit):
        await owner.append("resp_1", "A", [_ev(2), _ev(3)], 2, lease, 3, 10_000)
    size = len(_ev(2))
    total = len(_ev(0)) + len(_ev(1))
    with pytest.raises(EventsLimit):
        await owner.append("resp_1", "A", [_ev(2)], 2, lease, 100, total + size - 1)
    assert (await reader.get("resp_1", "t1")).events == 2  # nothing of a refused batch was stored
    await owner.append("resp_1", "A", [_ev(2)], 2, lease, 3, total + size)
    assert (await reader.get("resp_1", "t1")).events == 3


async def test_the_terminal_event_is_stored_with_the_end_past_the_caps(
        replicas: tuple[BackgroundStore, BackgroundStore]) -> None:
    owner, reader = replicas
    await owner.create(_run(), 60)
    lease = time.time() + 30
    await owner.append("resp_1", "A", [_ev(0), _ev(1)], 0, lease, 2, 10_000)
    with pytest.raises(EventsLimit):  # both caps are full
        await owner.append("resp_1", "A", [_ev(2)], 2, lease, 2, len(_ev(0)) + len(_ev(1)))
    failed = {"id": "resp_1", "status": "failed", "error": {"code": "events_limit_exceeded"}}
    last = orjson.dumps({"type": "response.failed", "sequence_number": 2, "response": failed})
    await owner.finish("resp_1", "A", "failed", failed, 60, last, 2)
    run = await reader.get("resp_1", "t1")
    assert (run.status, run.response, run.events, run.next_seq) == ("failed", failed, 3, 3)
    assert await reader.events("resp_1", "t1", 1, 10) == [last]
    # A run that stored no event before its end starts its events at the terminal one's number.
    await owner.create(_run("resp_2"), 60)
    last = orjson.dumps({"type": "response.completed", "sequence_number": 7})
    await owner.finish("resp_2", "A", "completed", {}, 60, last, 7)
    run = await reader.get("resp_2", "t1")
    assert (run.events, run.first_seq) == (1, 7)
    assert await reader.events("resp_2", "t1", 6, 10) == [last]
    assert await reader.events("resp_2", "t1", 7, 10) == []


async def test_expired_lease_is_ended_exactly_once_and_fences_the_owner(
        replicas: tuple[BackgroundStore, BackgroundStore]) -> None:
    owner, reader = replicas
    await owner.create(_run(lease=-1.0), 60)  # its lease already ran out: the owner "died"
    await_now = time.time()
    run = await reader.get("resp_1", "t1")
    assert run.lease_expired(await_now)
    failed = {"id": "resp_1", "status": "failed", "error": {"code": "server_error"}}
    event = orjson.dumps({"type": "response.failed", "sequence_number": 0, "response": failed})
    assert await reader.expire("resp_1", "t1", await_now, run.events, "failed", failed, event, 60) is True
    assert await reader.expire("resp_1", "t1", await_now, run.events, "failed", failed, event, 60) is False
    run = await reader.get("resp_1", "t1")
    assert (run.status, run.response, run.events) == ("failed", failed, 1)
    assert [orjson.loads(e)["type"] for e in await reader.events("resp_1", "t1", -1, 10)] == ["response.failed"]
    # The owner, back from a partition, can no longer write anything.
    for call in (owner.heartbeat("resp_1", "A", time.time() + 30),
                 owner.append("resp_1", "A", [_ev(0)], 0, time.time() + 30, 100, 10_000),
                 owner.update("resp_1", "A", "in_progress", {}, time.time() + 30),
                 owner.finish("resp_1", "A", "completed", {}, 60)):
        with pytest.raises(RunLost):
            await call
    assert (await reader.get("resp_1", "t1")).status == "failed"


async def test_a_live_lease_or_a_newer_event_is_not_expired(
        replicas: tuple[BackgroundStore, BackgroundStore]) -> None:
    owner, reader = replicas
    await owner.create(_run(), 60)
    assert await reader.expire("resp_1", "t1", time.time(), 0, "failed", {}, None, 60) is False
    # The owner wrote after the reader looked: the reader's view is stale, so nothing changes.
    await owner.append("resp_1", "A", [_ev(0)], 0, time.time() - 1, 100, 10_000)
    assert await reader.expire("resp_1", "t1", time.time(), 0, "failed", {}, None, 60) is False
    assert (await reader.get("resp_1", "t1")).status == "queued"
    assert await reader.expire("resp_1", "t1", time.time(), 1, "cancelled", {"status": "cancelled"}, None, 60)
    assert (await reader.get("resp_1", "t1")).status == "cancelled"


async def test_another_owner_is_fenced(replicas: tuple[BackgroundStore, BackgroundStore]) -> None:
    owner, other = replicas
    await owner.create(_run(), 60)
    with pytest.raises(RunLost):
        await other.heartbeat("resp_1", "B", time.time() + 30)
    with pytest.raises(RunLost):
        await other.heartbeat("resp_missing", "B", time.time() + 30)


async def test_delete_removes_run_and_events(replicas: tuple[BackgroundStore, BackgroundStore]) -> None:
    owner, reader = replicas
    await owner.create(_run(), 60)
    await owner.append("resp_1", "A", [_ev(0)], 0, time.time() + 30, 100, 10_000)
    assert await reader.delete("resp_1", "t1") is True
    with pytest.raises(RunNotFound):
        await reader.get("resp_1", "t1")
    with pytest.raises(RunNotFound):
        await reader.events("resp_1", "t1", -1, 10)
    assert await reader.delete("resp_1", "t1") is False


async def test_memory_runs_expire_at_their_ttl() -> None:
    clock = [1000.0]
    mem = MemoryBackground(clock=lambda: clock[0])
    run = _run()
    await mem.create(run, 10)
    clock[0] += 11
    with pytest.raises(RunNotFound):
        await mem.get("resp_1", "t1")


async def test_redis_keys_expire_with_the_run() -> None:
    await require_redis()
    with _exclusive_redis_db():
        await _flush_redis()
        store = RedisStore(REDIS_URL, **PATIENT)
        try:
            bg = RedisBackground(store.io)
            await bg.create(_run(), 60)
            await bg.append("resp_1", "A", [_ev(0)], 0, time.time() + 30, 100, 10_000)
            await bg.finish("resp_1", "A", "completed", {}, 120, _ev(1), 1)
            from gateway.store.background.redis import run_keys

            await bg.create(_run("resp_2"), 60)  # its only event comes with its end
            await bg.finish("resp_2", "A", "completed", {}, 120, _ev(0), 0)
            for key in [*run_keys("resp_1"), *run_keys("resp_2")]:
                assert 60 < await store.io.client.ttl(key) <= 120
        finally:
            await store.aclose()
            await _flush_redis()
