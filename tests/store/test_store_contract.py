"""The store contract, run identically against the memory store and a real Redis."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gateway.store.base import Store
from gateway.store.continuations.base import (
    MAX_HOLDERS,
    Continuation,
    ContinuationConflict,
    ContinuationNotFound,
)

StoreFactory = Callable[..., Awaitable[Store]]

TENANT = "acme"
OTHER = "globex"


def make_cont(tenant: str = TENANT, ids: tuple[str, ...] = ("call_1", "call_2"), ttl: float = 60,
              data: dict[str, Any] | None = None) -> Continuation:
    pending = [{"tool_call_id": tc, "name": f"tool_{i}", "reason": "client" if i else "approval",
                "arguments": '{"city": "Zürich"}'} for i, tc in enumerate(ids)]
    return Continuation.new(tenant, "smart", pending, data if data is not None else {"messages": []}, ttl)


async def saved(store: Store, **kwargs: Any) -> Continuation:
    c = make_cont(**kwargs)
    await store.save_continuation(c, int(kwargs.get("ttl", 60)))
    return c


# -- save / get --------------------------------------------------------------------------------------

async def test_save_get_round_trip(store: Store) -> None:
    data = {
        "messages": [{"role": "user", "content": "héllo ✓"},
                     {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function"}]}],
        "params": {"temperature": 0.7, "max_tokens": 100, "stop": [], "nested": {"empty": {}}},
        "iterations": 3,
    }
    c = make_cont(data=data)
    await store.save_continuation(c, 60)
    got = await store.get_continuation(c.id, TENANT)
    assert got == c
    assert got.status == "pending" and got.claimed_until is None
    assert got.data["params"]["stop"] == [] and got.data["params"]["nested"] == {"empty": {}}


async def test_get_unknown_is_not_found(store: Store) -> None:
    with pytest.raises(ContinuationNotFound):
        await store.get_continuation("cont_doesnotexist", TENANT)


async def test_save_rejects_non_json_data(store: Store) -> None:
    c = make_cont(data={"bad": object()})
    with pytest.raises(TypeError):
        await store.save_continuation(c, 60)
    with pytest.raises(ContinuationNotFound):
        await store.get_continuation(c.id, TENANT)


@pytest.mark.slow
async def test_ttl_expiry_of_everything(store: Store) -> None:
    c = await saved(store, ttl=2)
    await store.ledger_put(TENANT, "call_1", {"status": "ok"}, 2)
    await store.put_artifacts(TENANT, {"call_1": {"sig": "x"}}, 2)
    written = time.monotonic()
    assert await store.find_continuation_by_tool_call(TENANT, "call_1") == c.id
    await asyncio.sleep(max(0.0, written + 2.2 - time.monotonic()))  # past the TTL of the last write
    with pytest.raises(ContinuationNotFound):
        await store.get_continuation(c.id, TENANT)
    with pytest.raises(ContinuationNotFound):
        await store.claim_continuation(c.id, TENANT, 30)
    assert await store.find_continuation_by_tool_call(TENANT, "call_1") is None
    assert await store.ledger_get(TENANT, "call_1") is None
    assert await store.get_artifacts(TENANT, ["call_1"]) == {}


# -- claim / release / finish / cancel -------------------------------------------------------------

async def test_claim_then_second_claim_conflicts(store: Store) -> None:
    c = await saved(store)
    before = time.time()
    claimed = await store.claim_continuation(c.id, TENANT, 30)
    assert claimed.status == "claimed" and claimed.claimed_until is not None
    assert before + 29 < claimed.claimed_until < time.time() + 31
    assert claimed.data == c.data and claimed.pending == c.pending
    with pytest.raises(ContinuationConflict) as exc:
        await store.claim_continuation(c.id, TENANT, 30)
    assert exc.value.status == "claimed"
    got = await store.get_continuation(c.id, TENANT)
    assert got.status == "claimed" and got.claimed_until == pytest.approx(claimed.claimed_until)


async def test_concurrent_claims_exactly_one_wins(store_factory: StoreFactory) -> None:
    # Two stores on one backend: for Redis these are two "replicas" with their own pools.
    a, b = await store_factory(), await store_factory()
    c = await saved(a)
    results = await asyncio.gather(*(s.claim_continuation(c.id, TENANT, 30) for s in [a, b] * 10),
                                   return_exceptions=True)
    wins = [r for r in results if isinstance(r, Continuation)]
    conflicts = [r for r in results if isinstance(r, ContinuationConflict)]
    assert len(wins) == 1 and len(conflicts) == 19, results


async def test_release_makes_it_claimable_again(store: Store) -> None:
    c = await saved(store)
    await store.claim_continuation(c.id, TENANT, 30)
    await store.release_continuation(c.id, TENANT)
    got = await store.get_continuation(c.id, TENANT)
    assert got.status == "pending" and got.claimed_until is None
    again = await store.claim_continuation(c.id, TENANT, 30)
    assert again.status == "claimed"
    await store.release_continuation(c.id, TENANT)
    await store.release_continuation(c.id, TENANT)  # releasing a pending one is a no-op
    assert (await store.get_continuation(c.id, TENANT)).status == "pending"


async def test_finish_then_claim_conflicts_and_get_shows_resumed(store: Store) -> None:
    c = await saved(store)
    await store.claim_continuation(c.id, TENANT, 30)
    await store.finish_continuation(c.id, TENANT)
    got = await store.get_continuation(c.id, TENANT)
    assert got.status == "resumed" and got.data == c.data
    with pytest.raises(ContinuationConflict) as exc:
        await store.claim_continuation(c.id, TENANT, 30)
    assert exc.value.status == "resumed"
    for op in (store.finish_continuation, store.release_continuation, store.cancel_continuation):
        with pytest.raises(ContinuationConflict):
            await op(c.id, TENANT)


async def test_finish_keeps_the_result_with_the_resumed_record(store: Store) -> None:
    """The answer a decider received stays with the continuation for its TTL (issue 29), on every backend."""
    c = await saved(store)
    assert (await store.get_continuation(c.id, TENANT)).result is None
    await store.claim_continuation(c.id, TENANT, 30)
    result = rb'{"id":"chatcmpl-1","object":"chat.completion","body":{"id":"chatcmpl-1","text":"\u00e9 done"}}'
    await store.finish_continuation(c.id, TENANT, result)
    got = await store.get_continuation(c.id, TENANT)
    assert got.status == "resumed" and got.result == result
    with pytest.raises(ContinuationNotFound):
        await store.get_continuation(c.id, "another-tenant")


async def test_finish_requires_a_claim(store: Store) -> None:
    c = await saved(store)
    with pytest.raises(ContinuationConflict):
        await store.finish_continuation(c.id, TENANT)
    assert (await store.get_continuation(c.id, TENANT)).status == "pending"


async def test_cancel_then_not_found(store: Store) -> None:
    c = await saved(store)
    assert await store.cancel_continuation(c.id, TENANT) is True
    with pytest.raises(ContinuationNotFound):
        await store.get_continuation(c.id, TENANT)
    with pytest.raises(ContinuationNotFound):
        await store.claim_continuation(c.id, TENANT, 30)
    with pytest.raises(ContinuationNotFound):
        await store.cancel_continuation(c.id, TENANT)
    assert await store.find_continuation_by_tool_call(TENANT, "call_1") is None


async def test_cancel_claimed_conflicts(store: Store) -> None:
    c = await saved(store)
    await store.claim_continuation(c.id, TENANT, 30)
    with pytest.raises(ContinuationConflict):
        await store.cancel_continuation(c.id, TENANT)
    assert (await store.get_continuation(c.id, TENANT)).status == "claimed"


async def test_other_tenant_sees_nothing(store: Store) -> None:
    c = await saved(store)
    with pytest.raises(ContinuationNotFound):
        await store.get_continuation(c.id, OTHER)
    with pytest.raises(ContinuationNotFound):
        await store.claim_continuation(c.id, OTHER, 30)
    with pytest.raises(ContinuationNotFound):
        await store.cancel_continuation(c.id, OTHER)
    with pytest.raises(ContinuationNotFound):
        await store.release_continuation(c.id, OTHER)
    with pytest.raises(ContinuationNotFound):
        await store.finish_continuation(c.id, OTHER)
    assert await store.find_continuation_by_tool_call(OTHER, "call_1") is None
    # ... and none of that touched the owner's continuation.
    got = await store.get_continuation(c.id, TENANT)
    assert got.status == "pending"
    assert (await store.claim_continuation(c.id, TENANT, 30)).status == "claimed"


async def _claim_again_only_once_expired(store: Store, first: Continuation) -> None:
    """A second claim is refused while the first one's lease runs (a busy machine may already be past it)."""
    try:
        await store.claim_continuation(first.id, TENANT, 1.0)
    except ContinuationConflict:
        return
    assert first.claimed_until is not None and time.time() >= first.claimed_until, "a live claim was taken again"


async def _until_expired(claimed: Continuation) -> None:
    assert claimed.claimed_until is not None
    await asyncio.sleep(max(0.0, claimed.claimed_until - time.time()) + 0.05)


@pytest.mark.slow
async def test_expired_lease_can_be_reclaimed(store: Store) -> None:
    c = await saved(store)
    first = await store.claim_continuation(c.id, TENANT, 1.0)
    await _claim_again_only_once_expired(store, first)
    await _until_expired(first)  # the replica holding the claim "crashed"
    second = await store.claim_continuation(c.id, TENANT, 30)
    assert second.claimed_until is not None and first.claimed_until is not None
    assert second.claimed_until > first.claimed_until


@pytest.mark.slow
async def test_expired_lease_can_be_cancelled(store: Store) -> None:
    c = await saved(store)
    await _until_expired(await store.claim_continuation(c.id, TENANT, 1.0))
    assert await store.cancel_continuation(c.id, TENANT) is True
    with pytest.raises(ContinuationNotFound):
        await store.get_continuation(c.id, TENANT)


# -- index (resume way A) --------------------------------------------------------------------------

async def test_index_lookup_after_finish_and_removal_after_cancel(store: Store) -> None:
    c = await saved(store, ids=("call_a", "call_b"))
    other = await saved(store, ids=("call_z",))
    assert await store.find_continuation_by_tool_call(TENANT, "call_a") == c.id
    assert await store.find_continuation_by_tool_call(TENANT, "call_b") == c.id
    assert await store.find_continuation_by_tool_call(TENANT, "call_z") == other.id
    assert await store.find_continuation_by_tool_call(TENANT, "call_unknown") is None
    await store.claim_continuation(c.id, TENANT, 30)
    assert await store.find_continuation_by_tool_call(TENANT, "call_a") == c.id  # a claim keeps the index
    await store.finish_continuation(c.id, TENANT)
    # A resumed one keeps naming its ids until its TTL: a follow-up sent again finds it, and is refused (409).
    assert await store.find_continuation_by_tool_call(TENANT, "call_a") == c.id
    assert await store.find_continuation_by_tool_call(TENANT, "call_b") == c.id
    assert (await store.get_continuation(c.id, TENANT)).status == "resumed"
    assert await store.find_continuation_by_tool_call(TENANT, "call_z") == other.id
    await store.cancel_continuation(other.id, TENANT)
    assert await store.find_continuation_by_tool_call(TENANT, "call_z") is None


async def test_index_is_per_tenant(store: Store) -> None:
    mine = await saved(store, ids=("call_same",))
    theirs = await saved(store, tenant=OTHER, ids=("call_same",))
    assert await store.find_continuation_by_tool_call(TENANT, "call_same") == mine.id
    assert await store.find_continuation_by_tool_call(OTHER, "call_same") == theirs.id


async def test_an_id_two_live_continuations_share_is_ambiguous_never_repointed(store: Store) -> None:
    """Issue 52: the index kept the newer continuation, so the older one's caller resumed the newer one."""
    old = await saved(store, ids=("call_1", "call_old"))
    new = await saved(store, ids=("call_1",))
    third = await saved(store, ids=("call_1",))
    assert await store.find_continuation_by_tool_call(TENANT, "call_1") is None  # way A: none, never a guess
    assert await store.find_continuation_by_tool_call(TENANT, "call_old") == old.id
    await store.save_continuation(new, 60)  # saved again: still one holder among three
    await store.cancel_continuation(old.id, TENANT)
    assert await store.find_continuation_by_tool_call(TENANT, "call_1") is None  # two still hold it
    await store.claim_continuation(third.id, TENANT, 30)
    await store.finish_continuation(third.id, TENANT)
    assert await store.find_continuation_by_tool_call(TENANT, "call_1") == new.id  # its own again
    await store.cancel_continuation(new.id, TENANT)
    assert await store.find_continuation_by_tool_call(TENANT, "call_1") is None


async def test_an_id_shared_past_the_kept_holders_stays_ambiguous(store: Store) -> None:
    shared = [await saved(store, ids=("call_many",)) for _ in range(MAX_HOLDERS + 2)]
    for c in shared[:-1]:
        await store.cancel_continuation(c.id, TENANT)
    assert await store.find_continuation_by_tool_call(TENANT, "call_many") is None  # who is left is not known


# -- ledger, artifacts, audit ----------------------------------------------------------------------

async def test_ledger(store: Store) -> None:
    assert await store.ledger_get(TENANT, "call_1") is None
    await store.ledger_put(TENANT, "call_1", {"status": "ok", "result": "sunny", "ms": 12.5}, 60)
    assert await store.ledger_get(TENANT, "call_1") == {"status": "ok", "result": "sunny", "ms": 12.5}
    await store.ledger_put(TENANT, "call_1", {"status": "error"}, 60)
    assert await store.ledger_get(TENANT, "call_1") == {"status": "error"}
    assert await store.ledger_get(OTHER, "call_1") is None


async def test_ledger_claim_is_won_once(store: Store) -> None:
    key = "elicit:hold_x:1:taken"
    assert await store.ledger_claim(TENANT, key, {"by": "cont_a"}, 60) is None
    assert await store.ledger_claim(TENANT, key, {"by": "holder"}, 60) == {"by": "cont_a"}
    assert await store.ledger_claim(TENANT, key, {"by": "cont_b"}, 60) == {"by": "cont_a"}
    assert await store.ledger_get(TENANT, key) == {"by": "cont_a"}
    assert await store.ledger_claim(OTHER, key, {"by": "holder"}, 60) is None
    racers = await asyncio.gather(*(store.ledger_claim(TENANT, f"race:{n % 2}", {"by": n}, 60) for n in range(8)))
    assert sum(r is None for r in racers) == 2


async def test_artifacts_round_trip_with_missing_ids(store: Store) -> None:
    items = {"call_1": {"thought_signature": "c2ln"}, "call_2": {"thinking": [{"type": "thinking", "signature": "s"}]}}
    await store.put_artifacts(TENANT, items, 60)
    await store.put_artifacts(TENANT, {}, 60)
    got = await store.get_artifacts(TENANT, ["call_2", "call_missing", "call_1"])
    assert got == items
    assert await store.get_artifacts(TENANT, []) == {}
    assert await store.get_artifacts(OTHER, ["call_1"]) == {}


async def test_audit_append_read_order(store: Store) -> None:
    for i in range(5):
        await store.append_audit({"tenant": TENANT, "event": "headless_denial", "n": i})
    await store.append_audit({"tenant": OTHER, "event": "headless_denial", "n": 99, "ts": 1.0})
    entries = await store.read_audit(TENANT)
    assert [e["n"] for e in entries] == [0, 1, 2, 3, 4]
    assert all(isinstance(e["ts"], float) for e in entries)
    assert [e["n"] for e in await store.read_audit(TENANT, limit=2)] == [3, 4]
    assert await store.read_audit(OTHER) == [{"tenant": OTHER, "event": "headless_denial", "n": 99, "ts": 1.0}]
    assert await store.read_audit("nobody") == []
    with pytest.raises(ValueError):
        await store.append_audit({"event": "no tenant"})


async def test_audit_is_capped(store_factory: StoreFactory) -> None:
    store = await store_factory(audit_max=3)
    for i in range(10):
        await store.append_audit({"tenant": TENANT, "n": i})
    assert [e["n"] for e in await store.read_audit(TENANT, limit=100)] == [7, 8, 9]


# -- shared target health --------------------------------------------------------------------------

async def test_health_threshold_opens_and_success_resets(store: Store) -> None:
    t = "openai:gpt-4.1"
    assert await store.health_open_until(t) is None
    assert await store.health_report(t, True, 3, 30) is None
    assert await store.health_report(t, True, 3, 30) is None
    assert await store.health_open_until(t) is None
    before = time.time()
    until = await store.health_report(t, True, 3, 30)
    assert until is not None and before + 29 < until < time.time() + 31
    assert await store.health_open_until(t) == pytest.approx(until)
    assert await store.health_report(t, True, 3, 30) == pytest.approx(until)  # not extended while open
    assert await store.health_open_until("claude:other") is None
    # A success closes the circuit and resets the count: it takes `threshold` failures again.
    assert await store.health_report(t, False, 3, 30) is None
    assert await store.health_open_until(t) is None
    assert await store.health_report(t, True, 3, 30) is None
    assert await store.health_report(t, True, 3, 30) is None
    assert await store.health_open_until(t) is None


@pytest.mark.slow
async def test_health_open_until_expires_after_cooldown(store_factory: StoreFactory) -> None:
    a, b = await store_factory(), await store_factory()
    t = "gemini:gemini-2.5-pro"
    cooldown = 3.0
    assert await a.health_report(t, True, 2, cooldown) is None
    until = await b.health_report(t, True, 2, cooldown)  # failures add up across replicas
    assert until is not None
    seen = await a.health_open_until(t)
    assert seen == pytest.approx(until) or time.time() >= until  # the other replica sees it open (if still open)
    # Closed once the cooldown has passed, not before (polled with a generous bound: a busy machine is late).
    while await a.health_open_until(t) is not None:
        assert time.time() < until + 10, "the circuit never closed"
        await asyncio.sleep(0.05)
    assert time.time() >= until - 0.01
    assert await b.health_open_until(t) is None
    # Half-open: the count outlives the cooldown, so the first failed probe re-opens at once.
    assert await a.health_report(t, True, 2, cooldown) is not None


async def test_non_positive_ttl_is_rejected(store: Store) -> None:
    c = make_cont()
    for ttl in (0, -5):
        with pytest.raises(ValueError):
            await store.save_continuation(c, ttl)
        with pytest.raises(ValueError):
            await store.ledger_put(TENANT, "call_1", {}, ttl)
        with pytest.raises(ValueError):
            await store.put_artifacts(TENANT, {"call_1": {}}, ttl)
    with pytest.raises(ContinuationNotFound):
        await store.get_continuation(c.id, TENANT)
