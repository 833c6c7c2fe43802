"""Managed keys in this process (``memory://``)."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.store.keys import base
from gateway.store.keys.base import KeyLimitReached, KeyStore


class MemoryKeyStore(KeyStore):
    def __init__(self) -> None:
        self._records: dict[str, bytes] = {}
        self._generation = 0

    async def put(self, record: dict[str, Any], create: bool) -> int:
        key_id = str(record["id"])
        if create and len(self._records) >= base.MAX_MANAGED_KEYS:
            raise KeyLimitReached
        if not create and key_id not in self._records:
            raise KeyError(key_id)
        # Stored serialised, as Redis does: a caller mutating its dict later changes nothing here.
        self._records[key_id] = orjson.dumps(record)
        self._generation += 1
        return self._generation

    async def generation(self) -> int:
        return self._generation

    async def load(self) -> tuple[int, list[dict[str, Any]]]:
        return self._generation, [orjson.loads(raw) for raw in self._records.values()]
