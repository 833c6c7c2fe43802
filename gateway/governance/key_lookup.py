"""A secret this replica does not know is looked up in the store before it is refused.

Each replica authenticates from its in-process snapshot of managed keys (``KeyRing``), which
follows the store within a poll (``key_sync``). A key created on another replica a moment ago is
not in it yet: without this look-up, a script that creates a key through one replica and uses it
at once through a load balancer got a 401 from the others for up to a poll interval.

So a managed-looking secret (``lg-`` and the length of one) that the snapshot lacks costs one
store call, by its digest (a secret the snapshot holds, refused because it expired, never does;
an expired or revoked key found in the store counts as a miss). A key found is added to the
snapshot (unless a newer snapshot already came in, which is the truth then), so its later
requests cost nothing. A secret not found is
remembered as a miss for ``MISS_TTL_S`` (at most ``MAX_MISSES`` of them, the oldest forgotten
first), so a client retrying a wrong key, or a flood of one, costs no store call per request;
concurrent look-ups of one secret share one call, and at most ``MAX_IN_FLIGHT`` run at once
(past that a secret is refused without one: a flood of distinct secrets cannot queue work on the
store). Revokes are unaffected: a revoke bumps the generation and every replica reloads its
snapshot within a poll, dropping what was added here. Every outcome is counted in
``loopgate_key_lookups_total{outcome}``.

Only a shared store (Redis) needs this: with ``memory://`` the process's snapshot is the store.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict

from gateway.config.keys_section import secret_digest
from gateway.config.model import ApiKey
from gateway.governance.keys import KeyRing
from gateway.observability import metrics
from gateway.store.errors import StoreUnavailable
from gateway.store.keys.base import KeyStore, from_record, secret_looks_managed

#: a secret the store did not know is refused without asking again for this long
MISS_TTL_S = 5.0
#: at most this many misses are remembered (the oldest go first)
MAX_MISSES = 10_000
#: at most this many store look-ups at once per process; past it an unknown secret is refused at once
MAX_IN_FLIGHT = 64


class KeyLookup:
    """Looks up secrets unknown to this replica's snapshot, with a bounded memory of misses."""

    def __init__(self, store: KeyStore, ring: KeyRing, miss_ttl_s: float = MISS_TTL_S,
                 max_misses: int = MAX_MISSES, max_in_flight: int = MAX_IN_FLIGHT) -> None:
        self._store = store
        self._ring = ring
        self._miss_ttl = miss_ttl_s
        self._max_misses = max_misses
        self._max_in_flight = max_in_flight
        #: digest -> when the miss is forgotten (monotonic), oldest first
        self._misses: OrderedDict[bytes, float] = OrderedDict()
        self._asking: dict[bytes, asyncio.Future[ApiKey | None]] = {}

    async def resolve(self, token: str) -> ApiKey | None:
        """The live managed key of ``token`` from the store, or None (unknown, revoked, expired, or not asked)."""
        if not secret_looks_managed(token):
            return None  # config keys are all in the snapshot; anything else cannot be a managed key
        digest = secret_digest(token)
        if digest in self._ring.by_digest:
            return None  # known here and refused anyway (expired): the store knows no better
        until = self._misses.get(digest)
        if until is not None:
            if until > time.monotonic():
                metrics.KEY_LOOKUPS.inc("miss_cached")
                return None
            del self._misses[digest]
        asking = self._asking.get(digest)
        if asking is not None:
            return await asyncio.shield(asking)
        if len(self._asking) >= self._max_in_flight:
            metrics.KEY_LOOKUPS.inc("shed")
            return None
        future: asyncio.Future[ApiKey | None] = asyncio.get_running_loop().create_future()
        self._asking[digest] = future
        try:
            found = await self._ask(digest)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved here: waiters re-raise it, nobody logs it as lost
            raise
        else:
            future.set_result(found)
        finally:
            del self._asking[digest]
        return found

    async def _ask(self, digest: bytes) -> ApiKey | None:
        try:
            generation, record = await self._store.find(digest)
        except StoreUnavailable:
            metrics.KEY_LOOKUPS.inc("store_error")
            return None  # fail static: the snapshot stays the truth while the store does not answer
        key: ApiKey | None = None
        if record is not None:
            try:
                stored_digest, key = from_record(record)
            except (KeyError, TypeError, ValueError):
                key = None
            else:
                if stored_digest != digest or key.revoked or (key.expires_at is not None
                                                              and key.expires_at <= time.time()):
                    key = None  # remembered as a miss like an unknown secret: refused alike
        if key is None:
            self._remember_miss(digest)
            metrics.KEY_LOOKUPS.inc("unknown")
            return None
        self._ring.add_found(digest, key, generation)
        metrics.KEY_LOOKUPS.inc("found")
        return key

    def _remember_miss(self, digest: bytes) -> None:
        misses = self._misses
        misses[digest] = time.monotonic() + self._miss_ttl
        misses.move_to_end(digest)
        while len(misses) > self._max_misses:
            misses.popitem(last=False)
