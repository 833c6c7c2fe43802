"""Managed keys in this process (``memory://``): the same rules as Redis (versions, sticky revoke, live cap)."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.store.keys import base
from gateway.store.keys.base import (
    DEFAULT_RETENTION_S,
    KeyLimitReached,
    KeyRevoked,
    KeyStore,
    KeyUnreadable,
    StaleKey,
    end_of,
    unreadable,
    version_of,
)


class MemoryKeyStore(KeyStore):
    def __init__(self, retention_s: float = DEFAULT_RETENTION_S) -> None:
        super().__init__(retention_s)
        # Stored serialised, as Redis does: a caller mutating its dict later changes nothing here.
        self._records: dict[str, bytes] = {}
        self._ends: dict[str, float] = {}  # id -> when it stopped being live (inf: live)
        self._by_hash: dict[str, str] = {}  # secret digest (hex) -> id
        self._generation = 0

    def _decoded(self, key_id: str) -> dict[str, Any] | None:
        raw = self._records.get(key_id)
        if raw is None:
            return None
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return unreadable(key_id)
        return record if isinstance(record, dict) else unreadable(key_id)

    async def create(self, record: dict[str, Any], now: float) -> int:
        await self.purge(now)
        if sum(1 for end in self._ends.values() if end > now) >= base.MAX_MANAGED_KEYS:
            raise KeyLimitReached
        key_id = str(record["id"])
        stored = {**record, "version": 1}
        self._records[key_id] = orjson.dumps(stored)
        self._ends[key_id] = end_of(stored)
        self._by_hash[str(record.get("hash", ""))] = key_id
        self._generation += 1
        return self._generation

    async def update(self, record: dict[str, Any], version: int) -> int:
        key_id = str(record["id"])
        current = self._decoded(key_id)
        if current is None:
            raise KeyError(key_id)
        if current.get("unreadable"):
            if version != -1 or not record.get("revoked"):
                raise KeyUnreadable(key_id)
        elif version_of(current) != version:
            raise StaleKey(key_id)
        elif current.get("revoked") is True and not record.get("revoked"):
            raise KeyRevoked(key_id)
        stored = {**record, "version": max(version, 0) + 1}
        self._records[key_id] = orjson.dumps(stored)
        self._ends[key_id] = end_of(stored)
        self._generation += 1
        return self._generation

    async def get(self, key_id: str) -> dict[str, Any] | None:
        return self._decoded(key_id)

    async def find(self, digest: bytes) -> tuple[int, dict[str, Any] | None]:
        key_id = self._by_hash.get(digest.hex())
        return self._generation, None if key_id is None else self._decoded(key_id)

    async def purge(self, now: float) -> int:
        cutoff = now - self.retention_s
        gone = [key_id for key_id, end in self._ends.items() if end <= cutoff][:base.PURGE_BATCH]
        for key_id in gone:
            record = self._decoded(key_id) or {}
            digest = record.get("hash")
            if isinstance(digest, str) and self._by_hash.get(digest) == key_id:
                del self._by_hash[digest]
            del self._records[key_id], self._ends[key_id]
        if gone:
            self._generation += 1
        return len(gone)

    async def generation(self) -> int:
        return self._generation

    async def load(self) -> tuple[int, list[dict[str, Any]]]:
        return self._generation, [record for key_id in list(self._records)
                                  if (record := self._decoded(key_id)) is not None]

    async def salt(self, fresh: bytes) -> bytes | None:
        return None
