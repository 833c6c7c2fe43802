"""Stored Responses-API records in this process (``memory://``)."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import orjson

from gateway.store.responses.base import ResponseRecords
from gateway.store.ttl import check_ttl


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
        record: dict[str, Any] = orjson.loads(item[0])
        return record

    async def delete(self, tenant: str, response_id: str) -> bool:
        item = self._items.pop((tenant, response_id), None)
        return item is not None and item[1] > time.time()
