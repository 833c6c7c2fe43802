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
from collections import deque
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
    """In-process records (``memory://``); values serialised like in Redis so nobody shares references.

    Every record is written with the one ``store.continuation_ttl_s``, so records expire in the
    order they were written: a FIFO of deadlines prunes them (on every write) where a heap would
    cost a log-time push per response. A record written with a different TTL still expires
    exactly on read; only its pruning may wait for the records written before it.
    """

    def __init__(self) -> None:
        self._items: dict[tuple[str, str], tuple[bytes, float]] = {}
        self._order: deque[tuple[float, tuple[str, str]]] = deque()
        self._ttl: tuple[float, int] = (0.0, 0)  # the last ttl_s and its checked whole seconds

    async def put(self, tenant: str, response_id: str, record: dict[str, Any], ttl_s: float) -> None:
        now = time.time()
        ttl = self._ttl
        if ttl[0] != ttl_s:
            ttl = self._ttl = (ttl_s, check_ttl(ttl_s))
        key, deadline = (tenant, response_id), now + ttl[1]
        items = self._items
        items[key] = (orjson.dumps(record), deadline)
        order = self._order
        order.append((deadline, key))
        while order[0][0] <= now:  # never empties: the entry just appended lies in the future
            old = order.popleft()[1]
            item = items.get(old)
            if item is not None and item[1] <= now:  # not rewritten since (a rewrite has its own entry)
                del items[old]

    async def get(self, tenant: str, response_id: str) -> dict[str, Any] | None:
        key = (tenant, response_id)
        item = self._items.get(key)
        if item is None:
            return None
        if item[1] <= time.time():
            del self._items[key]
            return None
        return orjson.loads(item[0])

    async def delete(self, tenant: str, response_id: str) -> bool:
        item = self._items.pop((tenant, response_id), None)
        return item is not None and item[1] > time.time()


def response_records(store: Store) -> ResponseRecords:
    """The records implementation sharing ``store``'s backend (created once, at start-up)."""
    if store.kind == "redis":
        from gateway.store.redis import RedisStore
        from gateway.store.redis_responses import RedisResponseRecords

        assert isinstance(store, RedisStore)
        return RedisResponseRecords(store)
    return MemoryResponseRecords()
