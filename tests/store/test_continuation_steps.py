"""The steps a pause and its resume take in the store, on every backend: way A's lookup of the trailing
tool-call ids and read of the continuation they name in one step, a claim answered with the continuation
the resume read already (its body not sent again), and an end of the resume that drops the way-A index
and the listing entry in the same step, and keeps of the record only what it is given to keep."""

from __future__ import annotations

import pytest

from gateway.store.base import Store
from gateway.store.continuations.base import Continuation, ContinuationConflict, ContinuationNotFound
from tests.store.test_store_contract import OTHER, TENANT, make_cont, saved

RESULT = b'{"id":"chatcmpl-1","object":"chat.completion","body":{"id":"chatcmpl-1"}}'


async def listed(store: Store, c: Continuation) -> None:
    """``c`` saved with a listing entry, as a pause saves it."""
    c.summary = {"id": c.id, "object": "continuation", "model": c.model}
    await store.save_continuation(c, 60)


async def listing_ids(store: Store) -> list[str]:
    return [entry["id"] for entry in (await store.list_continuations(TENANT, 50))[0]]


async def test_a_claim_given_the_read_continuation_answers_with_it_claimed(store: Store) -> None:
    c = await saved(store)
    read = await store.get_continuation(c.id, TENANT)
    claimed = await store.claim_continuation(c.id, TENANT, 30, known=read)
    assert claimed.status == "claimed" and claimed.claimed_until is not None
    assert (claimed.id, claimed.data, claimed.pending, claimed.model) == (c.id, c.data, c.pending, c.model)
    assert read.status == "pending" and read.claimed_until is None  # the caller's read is left as it was
    got = await store.get_continuation(c.id, TENANT)
    assert got.status == "claimed" and got.claimed_until == pytest.approx(claimed.claimed_until)
    with pytest.raises(ContinuationConflict):  # still at most once
        await store.claim_continuation(c.id, TENANT, 30, known=read)


async def test_a_claim_given_another_continuation_reads_its_own(store: Store) -> None:
    c = await saved(store)
    other = await saved(store, ids=("call_9",), data={"messages": [{"role": "user", "content": "other"}]})
    claimed = await store.claim_continuation(c.id, TENANT, 30, known=await store.get_continuation(other.id, TENANT))
    assert (claimed.id, claimed.data, claimed.pending) == (c.id, c.data, c.pending)
    theirs = await saved(store, tenant=OTHER, ids=("call_7",))
    with pytest.raises(ContinuationNotFound):  # the tenant is checked by the claim, not taken from the read
        await store.claim_continuation(theirs.id, TENANT, 30, known=theirs)


def waits_for_replicas(store: Store) -> bool:
    io = getattr(store, "io", None)
    return io is not None and io.wait_replicas > 0


async def test_finish_given_what_to_keep_drops_index_and_listing_and_keeps_that(store: Store) -> None:
    c = make_cont(ids=("call_a", "call_b"), data={"messages": [{"role": "user", "content": "long " * 100}]})
    await listed(store, c)
    sharing = make_cont(ids=("call_b",))  # call_b is ambiguous while both are live
    await listed(store, sharing)
    assert await store.find_continuation_by_tool_call(TENANT, "call_b") is None
    assert sorted(await listing_ids(store)) == sorted([c.id, sharing.id])
    await store.claim_continuation(c.id, TENANT, 30)
    kept = Continuation(id=c.id, tenant=c.tenant, model=c.model, status="resumed", created_at=c.created_at,
                        expires_at=c.expires_at, pending=c.pending, data={"asker": {"id": "key_1"}})
    await store.finish_continuation(c.id, TENANT, RESULT, kept)
    # Its own id still names it (resumed: a follow-up sent again is refused), the shared one is the other's again.
    assert await store.find_continuation_by_tool_call(TENANT, "call_a") == c.id
    assert await store.find_continuation_by_tool_call(TENANT, "call_b") == sharing.id
    assert await listing_ids(store) == [sharing.id]
    got = await store.get_continuation(c.id, TENANT)
    assert got.status == "resumed" and got.result == RESULT and got.pending == c.pending
    # Where the finish may have to be undone (an unconfirmed end is made resumable again), the body stays whole.
    assert got.data == (c.data if waits_for_replicas(store) else kept.data)
    with pytest.raises(ContinuationConflict):
        await store.finish_continuation(c.id, TENANT, RESULT, kept)
    with pytest.raises(ContinuationConflict):
        await store.claim_continuation(c.id, TENANT, 30)


async def test_finish_given_what_to_keep_checks_the_claim_and_the_tenant_first(store: Store) -> None:
    c = make_cont(ids=("call_a",))
    await listed(store, c)
    with pytest.raises(ContinuationConflict):  # not claimed: nothing changes
        await store.finish_continuation(c.id, TENANT, RESULT, c)
    await store.claim_continuation(c.id, TENANT, 30)
    with pytest.raises(ContinuationNotFound):
        await store.finish_continuation(c.id, OTHER, RESULT, c)
    assert await store.find_continuation_by_tool_call(TENANT, "call_a") == c.id
    assert await listing_ids(store) == [c.id]
    assert (await store.get_continuation(c.id, TENANT)).status == "claimed"


async def test_find_paused_reads_the_continuation_the_first_indexed_id_names(store: Store) -> None:
    first = await saved(store, ids=("call_a", "call_shared"))
    second = await saved(store, ids=("call_b", "call_shared"))
    assert await store.find_paused(TENANT, []) is None
    assert await store.find_paused(TENANT, ["call_unknown"]) is None
    found = await store.find_paused(TENANT, ["call_unknown", "call_shared", "call_b", "call_a"])
    assert found == await store.get_continuation(second.id, TENANT)  # "call_shared" names none: both hold it
    assert found is not None and found.status == "pending" and found.data == second.data
    assert (await store.find_paused(TENANT, ["call_a", "call_b"])) == await store.get_continuation(first.id, TENANT)
    assert await store.find_paused(OTHER, ["call_a", "call_b"]) is None
    await store.claim_continuation(first.id, TENANT, 30)
    claimed = await store.find_paused(TENANT, ["call_a"])
    assert claimed is not None and claimed.status == "claimed"  # a claim keeps the index
    await store.finish_continuation(first.id, TENANT, RESULT, first)
    await store.cancel_continuation(second.id, TENANT)
    assert await store.find_paused(TENANT, ["call_b", "call_shared"]) is None  # cancelled: gone from the index
    resumed = await store.find_paused(TENANT, ["call_b", "call_shared", "call_a"], 30)
    # Resumed: still found (a repeat of its follow-up is refused), never claimed again.
    assert resumed is not None and resumed.id == first.id and resumed.status == "resumed"
    assert resumed.held_until is None and resumed.result == RESULT
    assert (await store.get_continuation(first.id, TENANT)).status == "resumed"


async def test_a_new_pause_takes_over_the_ids_a_resumed_continuation_held(store: Store) -> None:
    """Upstreams that repeat ids (``call_0`` every turn): the next pause of the same id is found, not ambiguous."""
    first = await saved(store, ids=("call_0", "call_1"))
    await store.claim_continuation(first.id, TENANT, 30)
    await store.finish_continuation(first.id, TENANT, RESULT, first)
    second = await saved(store, ids=("call_0",))
    assert await store.find_continuation_by_tool_call(TENANT, "call_0") == second.id
    assert await store.find_continuation_by_tool_call(TENANT, "call_1") == first.id
    found = await store.find_paused(TENANT, ["call_0"], 30)
    assert found is not None and found.id == second.id and found.status == "pending"
    await store.release_continuation(second.id, TENANT)
    await store.cancel_continuation(second.id, TENANT)  # a cancel drops only its own entry
    assert await store.find_continuation_by_tool_call(TENANT, "call_0") is None
    assert await store.find_continuation_by_tool_call(TENANT, "call_1") == first.id


async def test_find_paused_with_a_lease_claims_what_a_claim_would_take(store: Store) -> None:
    # One step where the store can (memory, one Redis server): the claim is taken with the read. A Cluster reads in
    # two steps and claims nothing (held_until None): the resume claims as before.
    takes = not getattr(getattr(store, "io", None), "cluster", False)
    c = await saved(store, ids=("call_a",))
    found = await store.find_paused(TENANT, ["call_a"], 30)
    assert found is not None and found.status == "pending" and found.data == c.data  # as read, before the claim
    assert (found.held_until is not None) is takes
    assert (await store.get_continuation(c.id, TENANT)).status == ("claimed" if takes else "pending")
    if takes:
        again = await store.find_paused(TENANT, ["call_a"], 30)  # a live claim: read, not taken
        assert again is not None and again.status == "claimed" and again.held_until is None
        await store.release_continuation(c.id, TENANT)
    assert await store.find_paused(OTHER, ["call_a"], 30) is None
    assert (await store.get_continuation(c.id, TENANT)).status == "pending"
    await store.claim_continuation(c.id, TENANT, -1)  # a lease already over: the next lookup takes it over
    over = await store.find_paused(TENANT, ["call_a"], 30)
    assert over is not None and over.status == "claimed" and (over.held_until is not None) is takes
    if not takes:
        await store.claim_continuation(c.id, TENANT, 30, known=over)
    await store.finish_continuation(c.id, TENANT, RESULT, c)
    done = await store.find_paused(TENANT, ["call_a"], 30)
    assert done is None or (done.status == "resumed" and done.held_until is None)
