"""Stored Responses-API responses: one opaque JSON record per response id, bound to its tenant.

A record holds what ``GET /v1/responses/{id}`` shows and what ``previous_response_id`` continues
from: the Response object, its input items, and either the canonical transcript (a finished
response) or the id of the continuation its paused loop waits in. The record is opaque to the
store, like a continuation's ``data``; it lives for ``store.continuation_ttl_s`` like every
other piece of loop state.

Kept apart from the continuation store's contract (``base.Store``): the loop engine never
touches it, only the Responses endpoints do. ``response_records(store)`` picks the
implementation matching the configured store, so Redis deployments share records across
replicas and ``memory://`` keeps them in the process.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import Any

import orjson

from gateway.store.base import Store, check_ttl


class ResponseRecords(ABC):
    """``put``/``get``/``delete`` of response records, keyed by (tenant, response id).

    Another tenant's id behaves exactly like an unknown one (None / False): ids never leak.
    """

    @abstractmethod
    async def put(self, tenant: str, response_id: str, record: dict[str, Any], ttl_s: float) -> None:
        """Write (or overwrite) the record for ``ttl_s`` seconds."""

    @abstractmethod
    async def get(self, tenant: str, response_id: str) -> dict[str, Any] | None:
        """The record, or None when unknown, expired, deleted or another tenant's."""

    @abstractmethod
    async def delete(self, tenant: str, response_id: str) -> bool:
        """Remove the record; False when there was none."""


class MemoryResponseRecords(ResponseRecords):
    """In-process records (``memory://``); values serialised like in Redis so nobody shares references."""

    def __init__(self) -> None:
        from gateway.store.memory import _TTLMap

        self._items: _TTLMap[tuple[str, str], bytes] = _TTLMap()

    async def put(self, tenant: str, response_id: str, record: dict[str, Any], ttl_s: float) -> None:
        now = time.time()
        self._items.set((tenant, response_id), orjson.dumps(record), now + check_ttl(ttl_s), now)

    async def get(self, tenant: str, response_id: str) -> dict[str, Any] | None:
        raw = self._items.get((tenant, response_id), time.time())
        return None if raw is None else orjson.loads(raw)

    async def delete(self, tenant: str, response_id: str) -> bool:
        found = self._items.get((tenant, response_id), time.time()) is not None
        self._items.pop((tenant, response_id))
        return found


def response_records(store: Store) -> ResponseRecords:
    """The records implementation sharing ``store``'s backend (created once, at start-up)."""
    if store.kind == "redis":
        from gateway.store.redis import RedisStore
        from gateway.store.redis_responses import RedisResponseRecords

        assert isinstance(store, RedisStore)
        return RedisResponseRecords(store)
    return MemoryResponseRecords()
