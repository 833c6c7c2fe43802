"""Memory-only behaviour (injected clock, bounded memory) and the backend-independent pieces of base.py."""

from __future__ import annotations

import pytest

from gateway.store.bounded import ENTRY_OVERHEAD
from gateway.store.continuations.base import Continuation, ContinuationNotFound, new_continuation_id
from gateway.store.factory import open_store
from gateway.store.memory import MemoryStore
from gateway.store.redis import RedisStore


class FakeClock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _cont(tenant: str = "acme", ids: tuple[str, ...] = ("call_1",), now: float | None = None) -> Continuation:
    pending = [{"tool_call_id": tc, "name": "t", "reason": "client", "arguments": "{}"} for tc in ids]
    return Continuation.new(tenant, "smart", pending, {"messages": []}, 10, now=now)


async def test_injected_clock_drives_expiry() -> None:
    clock = FakeClock()
    store = MemoryStore(clock=clock)
    c = _cont(now=clock.now)
    await store.save_continuation(c, 10)
    clock.now += 9.9
    assert (await store.get_continuation(c.id, "acme")).id == c.id
    claimed = await store.claim_continuation(c.id, "acme", 5)
    assert claimed.claimed_until == clock.now + 5
    clock.now += 0.1
    with pytest.raises(ContinuationNotFound):
        await store.get_continuation(c.id, "acme")
    assert await store.find_continuation_by_tool_call("acme", "call_1") is None


async def test_writes_prune_expired_entries() -> None:
    clock = FakeClock()
    store = MemoryStore(clock=clock)
    for i in range(100):
        await store.save_continuation(_cont(ids=(f"call_{i}",), now=clock.now), 10)
        await store.ledger_put("acme", f"call_{i}", {"i": i}, 10)
    assert len(store._records) == 100 and len(store._index) == 100
    clock.now += 11
    await store.save_continuation(_cont(ids=("call_new",), now=clock.now), 10)
    await store.ledger_put("acme", "call_new", {}, 10)
    assert len(store._records) == 1 and len(store._index) == 1 and len(store._ledger) == 1


async def test_overwrites_replace_their_bytes() -> None:
    store = MemoryStore()
    for i in range(10_000):
        await store.ledger_put("acme", "call_1", {"i": i}, 3600)
    assert len(store._ledger) == 1
    assert store._ledger.nbytes == len(b'{"i":9999}') + ENTRY_OVERHEAD
    assert await store.ledger_get("acme", "call_1") == {"i": 9999}


async def test_stored_values_are_isolated_from_callers() -> None:
    store = MemoryStore()
    c = _cont()
    await store.save_continuation(c, 10)
    c.data["messages"].append({"role": "user", "content": "mutated after save"})
    got = await store.get_continuation(c.id, "acme")
    assert got.data == {"messages": []}
    got.pending.clear()
    assert len((await store.get_continuation(c.id, "acme")).pending) == 1


async def test_memory_ping_and_close() -> None:
    store = MemoryStore()
    assert await store.ping() is True
    await store.aclose()
    assert await store.ping() is False


def test_continuation_ids_are_unguessable() -> None:
    ids = {new_continuation_id() for _ in range(1000)}
    assert len(ids) == 1000
    for cid in ids:
        assert cid.startswith("cont_")
        assert len(cid) - len("cont_") == 32  # 24 random bytes = 192 bits, base64url
        assert "{" not in cid and "}" not in cid


def test_continuation_bytes_round_trip() -> None:
    c = _cont(ids=("call_1", "call_2"))
    c.status = "claimed"
    c.claimed_until = c.created_at + 30
    assert Continuation.from_bytes(c.to_bytes()) == c
    assert c.tool_call_ids == ["call_1", "call_2"]
    with pytest.raises(ValueError):
        Continuation.from_dict({**c.to_dict(), "status": "bogus"})


async def test_open_store_by_scheme() -> None:
    assert isinstance(open_store("memory://"), MemoryStore)
    assert open_store("memory://").kind == "memory"
    for url in ("redis://redis.invalid:6379/0", "rediss://example.invalid:6380/1", "unix:///tmp/redis.sock"):
        store = open_store(url)  # constructing never connects
        assert isinstance(store, RedisStore) and store.kind == "redis"
        await store.aclose()
    with pytest.raises(ValueError, match="unsupported store url"):
        open_store("postgres://localhost/x")
    with pytest.raises(ValueError):
        open_store("")
