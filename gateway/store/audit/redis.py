"""The audit log on Redis: ``loopgate:{t:<tenant>}:audit``, a list capped by RPUSH + LTRIM (part of ``RedisStore``)."""

from __future__ import annotations

import time
from typing import Any

import orjson

from gateway.store.audit.base import AuditLog, audit_entry
from gateway.store.redis_client.client import RedisIO
from gateway.store.redis_client.keys import tenant_key

# KEYS: the tenant's audit list. ARGV: entry, cap. One key, so it runs as it is on a Cluster too.
AUDIT = """
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
return 1
"""


class RedisAudit(AuditLog):
    def __init__(self, io: RedisIO, audit_max: int) -> None:
        self.io = io
        self._audit_max = audit_max
        self._audit_script = io.register(AUDIT)

    async def append_audit(self, entry: dict[str, Any]) -> None:
        tenant, entry = audit_entry(entry, time.time())
        raw = orjson.dumps(entry)
        key = tenant_key(tenant, "audit")
        async with self.io.guard("append_audit"):
            await self.io.script(self._audit_script, [key], [raw, self._audit_max], False)

    async def audit_tail(self, tenant: str, skip: int, count: int) -> list[dict[str, Any]]:
        async with self.io.guard("audit_tail"):
            raws = await self.io.command("LRANGE", tenant_key(tenant, "audit"), -(skip + count), -(skip + 1))
        return [orjson.loads(raw) for raw in raws]

    async def read_audit(self, tenant: str, limit: int = 100) -> list[dict[str, Any]]:
        return await self.audit_tail(tenant, 0, limit) if limit > 0 else []
