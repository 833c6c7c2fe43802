"""Stored Responses-API records in this process (``memory://``), under a byte bound and a tenant quota."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson

from gateway.store.bounded import ENTRY_OVERHEAD, BoundedMap
from gateway.store.responses.base import ResponseRecords
from gateway.store.ttl import check_ttl

#: the responses domain's default share of ``store.memory_max_bytes`` (256 MiB) when built alone
DEFAULT_MAX_BYTES = 128 * 1024 * 1024


class MemoryResponseRecords(ResponseRecords):
    """In-process records; values serialised like in Redis so nobody shares references.

    The size of a record is the length of its JSON (made anyway, for that reason), so the byte
    bound and the tenant counts cost nothing extra. Past ``max_bytes`` the records written longest
    ago are evicted (``loopgate_store_evictions_total{domain="responses"}``); a chain whose
    ancestor was evicted then answers ``previous_response_not_found``, like an expired one. The
    tenant counts are exact: every expiry, eviction, overwrite and delete gives its bytes back.
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, clock: Callable[[], float] | None = None) -> None:
        self._clock = clock or time.time
        self._tenant_bytes: dict[str, int] = {}
        self._items: BoundedMap[tuple[str, str], bytes] = BoundedMap("responses", max_bytes, self._released)
        self._ttl: tuple[float, int] = (0.0, 0)  # the last ttl_s and its checked whole seconds

    def _released(self, key: tuple[str, str], value: bytes, size: int) -> None:
        tenant = key[0]
        left = self._tenant_bytes.get(tenant, 0) - size
        if left > 0:
            self._tenant_bytes[tenant] = left
        else:
            self._tenant_bytes.pop(tenant, None)

    async def put(self, tenant: str, response_id: str, record: dict[str, Any], ttl_s: float) -> None:
        now = self._clock()
        ttl = self._ttl
        if ttl[0] != ttl_s:
            ttl = self._ttl = (ttl_s, check_ttl(ttl_s))
        key, deadline = (tenant, response_id), now + ttl[1]
        raw = orjson.dumps(record)
        items = self._items
        ancestors = record.get("ancestors")
        if ancestors:
            for ancestor in ancestors:
                items.touch((tenant, ancestor), deadline)
        size = len(raw)
        # An overwrite gives the old record's bytes back, and evictions theirs (``_released``).
        items.set(key, raw, size, deadline, now)
        held = self._tenant_bytes
        held[tenant] = held.get(tenant, 0) + size + ENTRY_OVERHEAD

    async def get(self, tenant: str, response_id: str) -> dict[str, Any] | None:
        raw = self._items.get((tenant, response_id), self._clock())
        return None if raw is None else orjson.loads(raw)

    async def get_many(self, tenant: str, response_ids: list[str]) -> list[dict[str, Any] | None]:
        now, items = self._clock(), self._items
        out: list[dict[str, Any] | None] = []
        for response_id in response_ids:
            raw = items.get((tenant, response_id), now)
            out.append(None if raw is None else orjson.loads(raw))
        return out

    async def delete(self, tenant: str, response_id: str) -> bool:
        key = (tenant, response_id)
        live = self._items.get(key, self._clock()) is not None  # an expired one is dropped (and released) here
        self._items.pop(key)
        return live

    async def stored_bytes(self, tenant: str) -> int:
        return self.held_bytes(tenant)

    def held_bytes(self, tenant: str) -> int:
        """Exact to the second: expired records are pruned here too (at most once a second), so a tenant
        refused at its quota gets its bytes back as its records expire, with no write to prune them."""
        self._items.prune(self._clock())
        return self._tenant_bytes.get(tenant, 0)

    @property
    def nbytes(self) -> int:
        """Bytes held by every tenant's records (the domain's share of the byte bound is ``max_bytes``)."""
        return self._items.nbytes
