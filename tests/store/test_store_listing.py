"""The tenant's continuation listing and audit paging, run identically against memory and a real Redis."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.loop.approvals import summary_of
from gateway.store.audit.pages import audit_page
from gateway.store.base import Store
from gateway.store.continuations.base import Continuation

TENANT = "acme"
OTHER = "globex"


async def pause(store: Store, tenant: str = TENANT, ttl: float = 60, created: float | None = None) -> Continuation:
    pending = [{"tool_call_id": f"call_{id(object())}", "name": "delete", "reason": "approval",
                "arguments": '{"id": "42"}'}]
    c = Continuation.new(tenant, "smart", pending, {"transcript": [{"role": "user", "content": "hi"}],
                                                    "assistant": {"role": "assistant", "content": "ok"}}, ttl, created)
    c.summary = summary_of(c)
    await store.save_continuation(c, int(max(1, ttl)))
    return c


async def everything(store: Store, tenant: str, limit: int) -> list[str]:
    ids: list[str] = []
    before = None
    while True:
        page, more = await store.list_continuations(tenant, limit, before)
        assert len(page) <= limit
        ids += [e["id"] for e in page]
        if not more:
            return ids
        before = (page[-1]["_score"], page[-1]["id"])


async def test_listing_pages_newest_first_per_tenant(store: Store) -> None:
    base = 1_900_000_000.0
    made = [await pause(store, created=base + i) for i in range(5)]
    await pause(store, OTHER)
    assert await everything(store, TENANT, 2) == [c.id for c in reversed(made)]
    page, more = await store.list_continuations(TENANT, 10)
    assert not more and page[0]["status"] == "pending" and page[0]["pending"][0]["name"] == "delete"
    assert page[0]["context"] == {"user": "hi", "assistant": "ok"}
    assert [e["id"] for e in (await store.list_continuations(OTHER, 10))[0]] != [c.id for c in made]
    assert await store.list_continuations("nobody", 10) == ([], False)


@pytest.mark.slow
async def test_listing_drops_resumed_cancelled_and_expired(store: Store) -> None:
    kept, resumed, cancelled = await pause(store), await pause(store), await pause(store)
    short = await pause(store, ttl=2)
    written = time.monotonic()
    await store.claim_continuation(resumed.id, TENANT, 30)
    claimed = {e["id"]: e["status"] for e in (await store.list_continuations(TENANT, 10))[0]}
    assert claimed[resumed.id] == "claimed"
    await store.finish_continuation(resumed.id, TENANT)
    await store.cancel_continuation(cancelled.id, TENANT)
    assert set(await everything(store, TENANT, 10)) == {kept.id, short.id}
    await asyncio.sleep(max(0.0, written + 2.2 - time.monotonic()))
    assert await everything(store, TENANT, 10) == [kept.id]


async def test_audit_pages_by_time_and_cursor(store: Store) -> None:
    for i in range(7):
        await store.append_audit({"tenant": TENANT, "id": f"aud_{i}", "ts": 1000.0 + i, "event": "approved"})
    await store.append_audit({"tenant": OTHER, "id": "aud_x", "ts": 1003.0, "event": "denied"})
    page, more = await audit_page(store, TENANT, None, None, None, 3)
    assert [e["id"] for e in page] == ["aud_6", "aud_5", "aud_4"] and more
    page, more = await audit_page(store, TENANT, None, None, (1004.0, "aud_4"), 3)
    assert [e["id"] for e in page] == ["aud_3", "aud_2", "aud_1"] and more
    page, more = await audit_page(store, TENANT, 1002.0, 1004.0, None, 10)
    assert [e["id"] for e in page] == ["aud_4", "aud_3", "aud_2"] and not more
    assert (await audit_page(store, OTHER, None, None, None, 10))[0][0]["id"] == "aud_x"
