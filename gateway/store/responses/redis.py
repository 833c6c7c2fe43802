"""Response records in Redis: one string key per (tenant, response id) with the store's TTL.

The key lives in the tenant's hash slot (``tenant_key``), so a tenant's records sit on one
Cluster node with its other state, another tenant's id simply names a missing key, and the
scripts below may touch a record, its ancestors and the tenant's byte counts at once. Records
are not ``WAIT``-confirmed like continuations: losing one to a failover costs a
``previous_response_not_found``, never a second run of anything.

**Stored bytes per tenant.** Redis tells nobody when a key expires, so each record's bytes are
counted in the *bucket* of the minute it expires in (a hash: bucket -> bytes, plus ``total``; a
sorted set orders the buckets by their end). Every write or count first retires the buckets that
have ended, subtracting them from ``total``. Writes, overwrites, deletes and the TTL extension
of ancestors move a record's bytes between buckets inside the same script (its size is
``STRLEN``, its deadline ``PTTL``), so the count is exact but for one documented slack: an
expired record still counts until the end of its minute (``BUCKET_S``). Times are Redis's own
(``TIME``), so replicas' clocks do not matter.

The quota check reads the count before every ``store: true`` request; a round trip each would
cost as much CPU as the rest of the request, so each replica keeps the count it last saw per
tenant for ``COUNT_FRESH_S`` (every write here refreshes it from the script's reply): another
replica's writes are seen at most that late.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from gateway.store.redis_client.client import RedisIO
from gateway.store.redis_client.keys import tenant_key
from gateway.store.responses.base import ResponseRecords
from gateway.store.ttl import check_ttl

#: the width of an expiry bucket: an expired record's bytes are released at most this late
BUCKET_S = 60
#: how long a replica trusts the last tenant count it saw
COUNT_FRESH_S = 1.0
#: tenants whose count a replica remembers (past it the memory starts over)
MAX_COUNTS = 10_000

_COMMON = """
local now_t = redis.call('TIME')
local now = tonumber(now_t[1]) + tonumber(now_t[2]) / 1000000
local width = tonumber(ARGV[1])
-- an integer as Redis wants it (Lua would send 0 negated as "-0", which HINCRBY refuses)
local function int(n) return string.format('%d', n) end
local function retire()
  local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
  if #gone == 0 then return end
  local freed = 0
  for _, b in ipairs(gone) do
    freed = freed + tonumber(redis.call('HGET', KEYS[2], b) or '0')
    redis.call('HDEL', KEYS[2], b)
  end
  redis.call('ZREM', KEYS[3], unpack(gone))
  redis.call('HINCRBY', KEYS[2], 'total', int(-freed))
end
local function account(deadline, n)
  local b = math.ceil(deadline / width)
  local field = int(b)
  redis.call('HINCRBY', KEYS[2], field, int(n))
  redis.call('HINCRBY', KEYS[2], 'total', int(n))
  redis.call('ZADD', KEYS[3], b * width, field)
end
-- the bytes a live key holds leave its bucket; its deadline, or nil when it is gone
local function release(key)
  local pttl = redis.call('PTTL', key)
  if pttl <= 0 then return nil end
  local deadline = now + pttl / 1000
  account(deadline, -redis.call('STRLEN', key))
  return deadline
end
retire()
"""

# KEYS: record, byte counts (hash), buckets (zset), ancestors...; ARGV: bucket width, record, ttl
_PUT = _COMMON + """
local ttl = tonumber(ARGV[3])
release(KEYS[1])
redis.call('SET', KEYS[1], ARGV[2], 'EX', ttl)
local deadline = now + ttl
account(deadline, string.len(ARGV[2]))
for i = 4, #KEYS do
  local pttl = redis.call('PTTL', KEYS[i])
  if pttl > 0 and pttl < ttl * 1000 then
    local n = redis.call('STRLEN', KEYS[i])
    account(now + pttl / 1000, -n)
    redis.call('EXPIRE', KEYS[i], ttl)
    account(deadline, n)
  end
end
return redis.call('HGET', KEYS[2], 'total')
"""

# KEYS: record, byte counts, buckets; ARGV: bucket width
_DELETE = _COMMON + """
if release(KEYS[1]) == nil then return 0 end
redis.call('DEL', KEYS[1])
return 1
"""

# KEYS: (unused), byte counts, buckets; ARGV: bucket width
_COUNT = _COMMON + """
return redis.call('HGET', KEYS[2], 'total')
"""


class RedisResponseRecords(ResponseRecords):
    def __init__(self, io: RedisIO, bucket_s: int = BUCKET_S, fresh_s: float = COUNT_FRESH_S) -> None:
        self._io = io
        self._bucket_s = bucket_s
        self._fresh_s = fresh_s
        self._counts: dict[str, tuple[int, float]] = {}  # tenant -> (count, monotonic time seen)
        self._put = io.register(_PUT)
        self._delete = io.register(_DELETE)
        self._count = io.register(_COUNT)

    def _seen(self, tenant: str, total: Any) -> int:
        count = max(0, int(total or 0))
        counts = self._counts
        if len(counts) >= MAX_COUNTS and tenant not in counts:
            counts.clear()
        counts[tenant] = (count, time.monotonic())
        return count

    @staticmethod
    def _keys(tenant: str, response_id: str) -> list[str]:
        return [tenant_key(tenant, "resp", response_id), tenant_key(tenant, "resp_bytes"),
                tenant_key(tenant, "resp_bytes_at")]

    async def put(self, tenant: str, response_id: str, record: dict[str, Any], ttl_s: float) -> None:
        raw, ex = orjson.dumps(record), check_ttl(ttl_s)
        keys = self._keys(tenant, response_id)
        keys.extend(tenant_key(tenant, "resp", ancestor) for ancestor in record.get("ancestors") or ())
        async with self._io.guard("response_put", durable=True):
            total = await self._put(keys=keys, args=[self._bucket_s, raw, ex])
        self._seen(tenant, total)

    async def get(self, tenant: str, response_id: str) -> dict[str, Any] | None:
        async with self._io.guard("response_get"):
            raw = await self._io.client.get(tenant_key(tenant, "resp", response_id))
        return None if raw is None else orjson.loads(raw)

    async def get_many(self, tenant: str, response_ids: list[str]) -> list[dict[str, Any] | None]:
        if not response_ids:
            return []
        async with self._io.guard("response_get"):
            raws = await self._io.client.mget([tenant_key(tenant, "resp", i) for i in response_ids])
        return [None if raw is None else orjson.loads(raw) for raw in raws]

    async def delete(self, tenant: str, response_id: str) -> bool:
        self._counts.pop(tenant, None)
        async with self._io.guard("response_delete"):
            return bool(await self._delete(keys=self._keys(tenant, response_id), args=[self._bucket_s]))

    async def stored_bytes(self, tenant: str) -> int:
        seen = self._counts.get(tenant)
        if seen is not None and time.monotonic() - seen[1] < self._fresh_s:
            return seen[0]
        async with self._io.guard("response_bytes"):
            total = await self._count(keys=self._keys(tenant, ""), args=[self._bucket_s])
        return self._seen(tenant, total)
