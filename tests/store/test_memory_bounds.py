"""The embedded store's byte bound (gateway/store/bounded.py): every domain that grows with traffic has one.

Past its share of ``store.memory_max_bytes`` a domain evicts what was written longest ago, counted in
``loopgate_store_evictions_total`` and shown in ``loopgate_store_memory_bytes``; a background run that
is still going is never evicted, its appends are refused instead.
"""

from __future__ import annotations

import time

import pytest

from gateway.config.checks import ConfigError
from gateway.config.store_section import DEFAULT_MEMORY_MAX_BYTES, DEFAULT_TENANT_MAX_STORED_BYTES
from gateway.observability.metrics import STORE_EVICTIONS, STORE_MEMORY_BYTES
from gateway.store.background.base import BackgroundRun, EventsLimit, RunNotFound
from gateway.store.background.memory import MemoryBackground
from gateway.store.bounded import ENTRY_OVERHEAD, BoundedMap, share
from gateway.store.continuations.base import Continuation, ContinuationNotFound
from gateway.store.factory import open_background, open_configured_store, open_response_records
from gateway.store.memory import MemoryStore
from gateway.store.responses.memory import MemoryResponseRecords
from tests.store.test_store_config import store_of

MIB = 1024 * 1024


def test_the_oldest_entries_go_first_and_are_counted() -> None:
    evicted_before = STORE_EVICTIONS.get("unit")
    seen: list[str] = []
    bound: BoundedMap[str, bytes] = BoundedMap("unit", 3 * (100 + ENTRY_OVERHEAD),
                                               lambda key, value, size: seen.append(key))
    for key in "abc":
        bound.set(key, b"x" * 100, 100, 1e12, 0.0)
    assert bound.touch("a", 1e12)  # a was written first, but was just used: b is now the oldest
    bound.set("d", b"x" * 100, 100, 1e12, 0.0)
    assert list(bound) == ["c", "a", "d"] and seen == ["b"]
    assert bound.nbytes == 3 * (100 + ENTRY_OVERHEAD) == STORE_MEMORY_BYTES.get("unit")
    assert STORE_EVICTIONS.get("unit") == evicted_before + 1
    bound.set("big", b"x" * 1000, 1000, 1e12, 0.0)  # larger than the bound: kept alone
    assert list(bound) == ["big"]
    bound.set("old", b"", 0, 5.0, 0.0)  # makes room by evicting "big"
    assert list(bound) == ["old"]
    bound.prune(6.0)
    assert len(bound) == 0 and bound.nbytes == 0 and seen[-2:] == ["big", "old"]


def test_protected_entries_are_never_evicted() -> None:
    bound: BoundedMap[str, bool] = BoundedMap("unit", 2 * (10 + ENTRY_OVERHEAD), evictable=lambda done: done)
    bound.set("running", False, 10, 1e12, 0.0)
    bound.set("done", True, 10, 1e12, 0.0)
    assert bound.make_room(10, "running") and list(bound) == ["running"]
    assert not bound.make_room(10_000, "running")  # only protected entries left: the caller refuses


def _run(run_id: str) -> BackgroundRun:
    now = time.time()
    return BackgroundRun(id=run_id, tenant="t1", status="queued", owner="A", lease_until=now + 30, stream=True,
                         response={"id": run_id}, created_at=now)


async def test_background_events_are_bounded_across_runs() -> None:
    store = MemoryBackground(max_bytes=100_000)
    lease = time.time() + 30
    event = b"e" * 10_000
    for i in range(3):
        await store.create(_run(f"r{i}"), 600)
        await store.append(f"r{i}", "A", [event] * 3, 0, lease, 100, MIB)
        await store.finish(f"r{i}", "A", "completed", {"id": f"r{i}"}, 600)
    # Three runs of 30 kB fit; the fourth evicts the run that ended first.
    await store.create(_run("live"), 600)
    await store.append("live", "A", [event] * 3, 0, lease, 100, MIB)
    with pytest.raises(RunNotFound):
        await store.get("r0", "t1")
    assert (await store.get("r2", "t1")).events == 3
    # A run still going is never evicted: past the bound, its own appends are refused.
    await store.create(_run("live2"), 600)
    await store.append("live2", "A", [event] * 3, 0, lease, 100, MIB)
    with pytest.raises(EventsLimit):
        await store.append("live2", "A", [event] * 5, 3, lease, 100, MIB)
    assert (await store.get("live", "t1")).events == 3 and (await store.get("live2", "t1")).events == 3


def _cont(i: int, size: int) -> Continuation:
    pending = [{"tool_call_id": f"call_{i}", "name": "t", "reason": "client", "arguments": "{}"}]
    return Continuation.new("acme", "smart", pending, {"messages": [{"role": "user", "content": "z" * size}]}, 600)


async def test_paused_loops_ledger_and_artifacts_are_bounded() -> None:
    store = MemoryStore(memory_max_bytes=16 * MIB)  # continuations: 2 MiB; ledger and artifacts: 1 MiB each
    saved = [_cont(i, 100_000) for i in range(40)]
    for c in saved:
        await store.save_continuation(c, 600)
        await store.ledger_put("acme", c.tool_call_ids[0], {"result": "r" * 100_000}, 600)
        await store.put_artifacts("acme", {c.tool_call_ids[0]: {"call": "a" * 100_000}}, 600)
    assert store._records.nbytes <= 2 * MIB and store._ledger.nbytes <= MIB and store._artifacts.nbytes <= MIB
    with pytest.raises(ContinuationNotFound):
        await store.get_continuation(saved[0].id, "acme")
    # An evicted paused loop takes its index and listing entries with it.
    assert await store.find_continuation_by_tool_call("acme", "call_0") is None
    assert await store.find_continuation_by_tool_call("acme", "call_39") == saved[39].id
    listed, _ = await store.list_continuations("acme", 100)
    assert saved[0].id not in {entry["id"] for entry in listed}
    assert await store.ledger_get("acme", "call_0") is None and await store.ledger_get("acme", "call_39")


def test_the_store_section_documents_its_bounds() -> None:
    config = store_of("{}")
    assert config.memory_max_bytes == DEFAULT_MEMORY_MAX_BYTES == 256 * MIB
    assert config.tenant_max_stored_bytes == DEFAULT_TENANT_MAX_STORED_BYTES == 256 * MIB
    assert store_of("{memory_max_bytes: 67108864, tenant_max_stored_bytes: 0}").tenant_max_stored_bytes == 0
    for bad, key in (("{memory_max_bytes: 1000}", "store.memory_max_bytes"),
                     ("{tenant_max_stored_bytes: -1}", "store.tenant_max_stored_bytes"),
                     ("{memory_max_bytes: '1G'}", "store.memory_max_bytes")):
        with pytest.raises(ConfigError) as caught:
            store_of(bad)
        assert caught.value.path == key


def test_the_configured_bound_is_split_between_the_domains() -> None:
    store = open_configured_store(store_of("{memory_max_bytes: 67108864}"))
    records, background = open_response_records(store), open_background(store)
    assert isinstance(records, MemoryResponseRecords) and isinstance(background, MemoryBackground)
    assert records._items.max_bytes == share(64 * MIB, "responses") == 32 * MIB
    assert background._runs.max_bytes == 16 * MIB
    assert isinstance(store, MemoryStore) and store._records.max_bytes == 8 * MIB
    assert store._audit_max_bytes == store._artifacts.max_bytes == 2 * MIB


async def test_the_audit_log_is_bounded_across_tenants() -> None:
    store = MemoryStore(memory_max_bytes=16 * MIB, audit_max=50)  # audit: 512 KiB for every tenant together
    for i in range(3000):
        await store.append_audit({"tenant": f"t{i % 300}", "event": "x", "reason": "r" * 500, "n": i})
    assert store._audit_bytes <= share(16 * MIB, "audit")
    held = sorted([entry["n"] for i in range(300) for entry in await store.read_audit(f"t{i}", 100)])
    assert 500 < len(held) < 3000 and held == list(range(3000 - len(held), 3000))  # the newest, whoever wrote them
    for i in range(200):  # one tenant past its own cap: the oldest of its entries go, the count stays exact
        await store.append_audit({"tenant": "solo", "event": "x", "n": i})
    assert [entry["n"] for entry in await store.read_audit("solo", 100)] == list(range(150, 200))
    assert store._audit_live == sum(len(log) for log in store._audit.values())
    assert len(store._audit_order) <= 2 * store._audit_live + 1024
