"""Secrets unknown to a replica's snapshot: one store look-up, then a bounded memory of misses.

The store is the real in-process one (``MemoryKeyStore``), counted by a subclass that only
records calls; the ring is the real ``KeyRing``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from gateway.config.keys_section import secret_digest
from gateway.config.model import ApiKey
from gateway.governance.key_lookup import KeyLookup
from gateway.governance.keys import KeyRing
from gateway.store.keys.base import new_secret, to_record
from gateway.store.keys.memory import MemoryKeyStore


class CountingStore(MemoryKeyStore):
    def __init__(self) -> None:
        super().__init__()
        self.finds = 0
        self.hold: asyncio.Event | None = None

    async def find(self, digest: bytes) -> tuple[int, dict[str, Any] | None]:
        self.finds += 1
        if self.hold is not None:
            await self.hold.wait()
        return await super().find(digest)


async def _created(store: MemoryKeyStore, **fields: Any) -> tuple[str, ApiKey]:
    secret = new_secret()
    key = ApiKey(key="", tenant="t", id="key_" + secret[-8:], name="n", managed=True, created_at=time.time(),
                 **fields)
    await store.create(to_record(key, secret_digest(secret)), time.time())
    return secret, key


async def test_a_key_new_to_the_replica_is_found_and_kept() -> None:
    store = CountingStore()
    ring = KeyRing([], enabled=True)
    ring.replace_managed([], 0)
    lookup = KeyLookup(store, ring)
    secret, key = await _created(store)
    found = await lookup.resolve(secret)
    assert found is not None and found.id == key.id
    assert ring.lookup(secret) is not None  # later requests need no look-up
    assert store.finds == 1


async def test_misses_are_remembered_for_their_ttl_within_their_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    store = CountingStore()
    ring = KeyRing([], enabled=True)
    # A second: remembered over the calls below on a busy machine too (they take well under a millisecond).
    lookup = KeyLookup(store, ring, miss_ttl_s=1.0, max_misses=3)
    wrong = new_secret()
    assert [await lookup.resolve(wrong) for _ in range(20)] == [None] * 20
    assert store.finds == 1
    assert await lookup.resolve("sk-anything") is None and store.finds == 1  # not shaped like a managed secret
    others = [new_secret() for _ in range(3)]
    for other in others:
        await lookup.resolve(other)
    assert len(lookup._misses) == 3 and secret_digest(wrong) not in lookup._misses  # the oldest went first
    assert store.finds == 4
    deadline = time.monotonic() + 30
    while store.finds == 4:  # asked again once the miss expired
        assert time.monotonic() < deadline, "the miss was never forgotten"
        await asyncio.sleep(0.05)
        assert await lookup.resolve(others[-1]) is None


async def test_one_call_per_secret_at_once_and_a_bound_on_calls_in_flight() -> None:
    store = CountingStore()
    store.hold = asyncio.Event()
    ring = KeyRing([], enabled=True)
    lookup = KeyLookup(store, ring, max_in_flight=2)
    secret, _ = await _created(store)
    same = [asyncio.create_task(lookup.resolve(secret)) for _ in range(10)]
    other = asyncio.create_task(lookup.resolve(new_secret()))
    await asyncio.sleep(0.05)
    assert store.finds == 2  # ten requests of one secret share a call
    assert await lookup.resolve(new_secret()) is None and store.finds == 2  # a third at once is shed
    store.hold.set()
    assert all(found is not None for found in await asyncio.gather(*same))
    assert await other is None


async def test_revoked_and_expired_keys_are_not_found_and_an_older_read_never_overrides_a_snapshot() -> None:
    store = CountingStore()
    ring = KeyRing([], enabled=True)
    lookup = KeyLookup(store, ring)
    secret, key = await _created(store)
    record = await store.get(key.id)
    assert record is not None
    await store.update({**record, "revoked": True, "revoked_at": time.time()}, 1)
    assert await lookup.resolve(secret) is None
    # A look-up that read generation 1 while a snapshot of generation 2 came in is not kept.
    ring.replace_managed([], 2)
    ring.add_found(secret_digest(secret), key, 1)
    assert ring.lookup(secret) is None
    ring.add_found(secret_digest(secret), key, 2)
    assert ring.lookup(secret) is key



async def test_an_expired_key_costs_no_store_call_per_request() -> None:
    store = CountingStore()
    ring = KeyRing([], enabled=True)
    lookup = KeyLookup(store, ring)
    secret, _ = await _created(store, expires_at=time.time() - 1)
    assert [await lookup.resolve(secret) for _ in range(5)] == [None] * 5
    assert store.finds == 1  # remembered as a miss
    known, key = await _created(store, expires_at=time.time() - 1)
    ring.replace_managed([(secret_digest(known), key)], await store.generation())
    assert await lookup.resolve(known) is None and store.finds == 1  # in the snapshot already: never asked
