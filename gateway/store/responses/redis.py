"""Response records in Redis: one string key per (tenant, response id) with the store's TTL.

The key lives in the tenant's hash slot (``tenant_key``), so a tenant's records sit on one
Cluster node with its other state, and another tenant's id simply names a missing key.
Availability errors become ``StoreUnavailable`` through the store's own guard. Records are
not ``WAIT``-confirmed like continuations: losing one to a failover costs a
``previous_response_not_found``, never a second run of anything (the continuation and the
tool ledger, which guard that, keep their own durability).
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.store.redis_client.client import RedisIO
from gateway.store.redis_client.keys import tenant_key
from gateway.store.responses.base import ResponseRecords
from gateway.store.ttl import check_ttl


class RedisResponseRecords(ResponseRecords):
    def __init__(self, io: RedisIO) -> None:
        self._io = io

    async def put(self, tenant: str, response_id: str, record: dict[str, Any], ttl_s: float) -> None:
        raw, ex = orjson.dumps(record), check_ttl(ttl_s)
        async with self._io.guard("response_put", durable=True):
            await self._io.client.set(tenant_key(tenant, "resp", response_id), raw, ex=ex)

    async def get(self, tenant: str, response_id: str) -> dict[str, Any] | None:
        async with self._io.guard("response_get"):
            raw = await self._io.client.get(tenant_key(tenant, "resp", response_id))
        return None if raw is None else orjson.loads(raw)

    async def delete(self, tenant: str, response_id: str) -> bool:
        async with self._io.guard("response_delete"):
            return bool(await self._io.client.delete(tenant_key(tenant, "resp", response_id)))
