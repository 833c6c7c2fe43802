"""Redis-only behaviour: fast failure on outages, key layout (namespaced, cluster-safe, always with a TTL)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.crc import key_slot

from gateway.store.continuations.base import Continuation, resumed_entry
from gateway.store.errors import StoreUnavailable
from gateway.store.health.redis import health_keys
from gateway.store.redis import RedisStore
from gateway.store.redis_client.keys import record_key, tenant_key
from tests.redis_servers import PATIENT


def _cont(tenant: str = "acme", ids: tuple[str, ...] = ("call_1", "call_2")) -> Continuation:
    pending = [{"tool_call_id": tc, "name": "t", "reason": "client", "arguments": "{}"} for tc in ids]
    return Continuation.new(tenant, "smart", pending, {"messages": []}, 60)


async def _every_operation_fails_fast(store: RedisStore, budget_s: float) -> None:
    ops = {
        "save": lambda: store.save_continuation(_cont(), 60),
        "get": lambda: store.get_continuation("cont_x", "acme"),
        "claim": lambda: store.claim_continuation("cont_x", "acme", 30),
        "release": lambda: store.release_continuation("cont_x", "acme"),
        "finish": lambda: store.finish_continuation("cont_x", "acme"),
        "cancel": lambda: store.cancel_continuation("cont_x", "acme"),
        "find": lambda: store.find_continuation_by_tool_call("acme", "call_1"),
        "ledger_get": lambda: store.ledger_get("acme", "call_1"),
        "ledger_put": lambda: store.ledger_put("acme", "call_1", {}, 60),
        "ledger_claim": lambda: store.ledger_claim("acme", "elicit:h:1:taken", {"by": "holder"}, 60),
        "put_artifacts": lambda: store.put_artifacts("acme", {"call_1": {}}, 60),
        "get_artifacts": lambda: store.get_artifacts("acme", ["call_1"]),
        "append_audit": lambda: store.append_audit({"tenant": "acme"}),
        "read_audit": lambda: store.read_audit("acme"),
        "health_report_fail": lambda: store.health_report("t", True, 3, 30),
        "health_report_ok": lambda: store.health_report("t", False, 3, 30),
        "health_open_until": lambda: store.health_open_until("t"),
    }
    for name, op in ops.items():
        started = time.monotonic()
        with pytest.raises(StoreUnavailable) as exc:
            await op()
        elapsed = time.monotonic() - started
        assert elapsed < budget_s, f"{name} took {elapsed:.2f}s"
        assert exc.value.__cause__ is not None, name


@pytest.mark.slow
async def test_unreachable_redis_is_store_unavailable_quickly() -> None:
    store = RedisStore("redis://127.0.0.1:1/0")
    try:
        started = time.monotonic()
        assert await store.ping() is False
        assert time.monotonic() - started < 3
        await _every_operation_fails_fast(store, 3.0)
    finally:
        await store.aclose()


@pytest.fixture
async def silent_server() -> AsyncIterator[int]:
    """A TCP server that accepts connections and never answers: a hung Redis."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.read()  # until the client gives up
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


@pytest.mark.slow
async def test_hung_redis_times_out_instead_of_hanging(silent_server: int) -> None:
    store = RedisStore(f"redis://127.0.0.1:{silent_server}/0", socket_timeout=0.3)
    try:
        started = time.monotonic()
        assert await store.ping() is False
        assert time.monotonic() - started < 3
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            await store.get_continuation("cont_x", "acme")
        assert time.monotonic() - started < 3
    finally:
        await store.aclose()


@pytest.mark.slow
async def test_operation_deadline_caps_retries_against_a_hung_redis(silent_server: int) -> None:
    # Socket timeouts alone would add up (command retry x connect retry); the deadline bounds the whole call.
    store = RedisStore(f"redis://127.0.0.1:{silent_server}/0", socket_timeout=10, op_timeout=0.5)
    try:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match=r"no answer within 0\.5s"):
            await store.claim_continuation("cont_x", "acme", 30)
        assert time.monotonic() - started < 1.5
        started = time.monotonic()
        assert await store.ping() is False
        assert time.monotonic() - started < 1.5
    finally:
        await store.aclose()


async def test_key_layout_namespaced_cluster_safe_with_ttls(redis_raw: aioredis.Redis, redis_url: str) -> None:
    store = RedisStore(redis_url, **PATIENT)
    try:
        c = _cont()
        await store.save_continuation(c, 60)
        await store.ledger_put("acme", "call_1", {"status": "ok"}, 60)
        await store.put_artifacts("acme", {"call_1": {"s": 1}, "call_2": {"s": 2}}, 60)
        await store.append_audit({"tenant": "acme", "event": "x"})
        await store.health_report("openai:gpt-4.1", True, 1, 30)
        keys = sorted(k.decode() for k in await redis_raw.keys("*"))
        assert keys == sorted([
            record_key(c.id),
            tenant_key("acme", "tc", "call_1"), tenant_key("acme", "tc", "call_2"),
            tenant_key("acme", "ledger", "call_1"),
            tenant_key("acme", "art", "call_1"), tenant_key("acme", "art", "call_2"),
            tenant_key("acme", "audit"),
            *health_keys("openai:gpt-4.1"),
        ])
        assert record_key(c.id) == f"loopgate:{{{c.id}}}:rec"
        assert tenant_key("acme", "tc", "call_1") == "loopgate:{t:acme}:tc:call_1"
        for key in keys:
            assert key.startswith("loopgate:{")
            ttl = await redis_raw.ttl(key)
            if key.endswith(":audit"):
                assert ttl == -1  # capped, not expiring: an audit log is kept
            else:
                assert 0 < ttl <= 60, (key, ttl)
        # Keys used together (one script, one MGET) share a slot.
        tenant_keys = [k for k in keys if k.startswith("loopgate:{t:acme}")]
        assert len({key_slot(k.encode()) for k in tenant_keys}) == 1
        assert len({key_slot(k.encode()) for k in health_keys("openai:gpt-4.1")}) == 1
        # A claim keeps the record's TTL.
        await store.claim_continuation(c.id, "acme", 30)
        assert 0 < await redis_raw.ttl(record_key(c.id)) <= 60
    finally:
        await store.aclose()


def test_braces_cannot_move_the_hash_tag() -> None:
    assert tenant_key("a}b{c", "tc", "x{y}") == "loopgate:{t:a%7Db%7Bc}:tc:x%7By%7D"
    assert tenant_key("a%7D", "audit") == "loopgate:{t:a%257D}:audit"
    assert record_key("cont_{x}") == "loopgate:{cont_%7Bx%7D}:rec"


async def test_survives_script_flush(redis_raw: aioredis.Redis, redis_url: str) -> None:
    store = RedisStore(redis_url, **PATIENT)
    try:
        await redis_raw.script_flush()
        c = _cont()
        await store.save_continuation(c, 60)  # scripts inside a pipeline are loaded on demand
        await redis_raw.script_flush()
        assert (await store.claim_continuation(c.id, "acme", 30)).status == "claimed"
        await redis_raw.script_flush()
        await store.finish_continuation(c.id, "acme")
        assert await redis_raw.get(tenant_key("acme", "tc", "call_1")) == resumed_entry(c.id).encode()
    finally:
        await store.aclose()

