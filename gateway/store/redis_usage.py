"""Usage aggregates in Redis: one script call per request, one pipelined read per budget check.

Keys (all of a tenant's rows share the hash tag ``{u:<tenant>}``, so the six rows one request
adds to sit in one slot and one EVALSHA writes them all, Cluster included)::

    loopgate:{u:<tenant>}:<period>               hash r e p c ca rs n tc (see store/usage.py)
    loopgate:{u:<tenant>}:k:<key id>:<period>    the same for one key of the tenant

``<period>`` is ``d:YYYY-MM-DD``, ``m:YYYY-MM`` or ``all`` (UTC). Every write renews the row's
TTL (``retention_days``). Counters are integers (cost in nano-USD), so HINCRBY sums exactly.
"""

from __future__ import annotations

from typing import Any

from gateway.store.redis import PREFIX, RedisStore, _esc
from gateway.store.usage import (
    DEFAULT_RETENTION_DAYS,
    FIELDS,
    Period,
    Scope,
    Spent,
    UsageDelta,
    UsageStore,
    period_name,
    period_names,
)

# KEYS: the rows; ARGV[1]: TTL in seconds, then field, amount pairs (only the non-zero ones).
_ADD = """
local ttl = tonumber(ARGV[1])
for i = 1, #KEYS do
  for j = 2, #ARGV, 2 do
    redis.call('HINCRBY', KEYS[i], ARGV[j], ARGV[j + 1])
  end
  redis.call('EXPIRE', KEYS[i], ttl)
end
return 1
"""


def usage_key(tenant: str, key_id: str, period: str) -> str:
    base = f"{PREFIX}{{u:{_esc(tenant)}}}"
    return f"{base}:k:{_esc(key_id)}:{period}" if key_id else f"{base}:{period}"


class RedisUsage(UsageStore):
    """Shares the ``RedisStore``'s connections, deadlines and error mapping (a 503-style ``StoreUnavailable``)."""

    def __init__(self, store: RedisStore, retention_days: int = DEFAULT_RETENTION_DAYS) -> None:
        self._store = store
        self._ttl_s = retention_days * 86400
        self._add = store._r.register_script(_ADD)

    async def add(self, tenant: str, key_id: str, delta: UsageDelta, now: float) -> None:
        periods = period_names(now)
        keys = [usage_key(tenant, "", p) for p in periods]
        if key_id:
            keys += [usage_key(tenant, key_id, p) for p in periods]
        args: list[Any] = [self._ttl_s]
        for field, value in zip(FIELDS, delta.values(), strict=True):
            if value:
                args += [field, value]
        async with self._store._guard("usage_add"):
            await self._add(keys=keys, args=args)

    async def spent(self, tenant: str, key_id: str, wants: list[tuple[Scope, Period]], now: float) -> list[Spent]:
        keys = [usage_key(tenant, key_id if scope == "key" else "", period_name(period, now))
                for scope, period in wants]

        def build(pipe: Any) -> None:
            for key in keys:
                pipe.hmget(key, "p", "c", "n")

        async with self._store._guard("usage_spent"):
            replies, _ = await self._store._run(keys[0], build, False)
        return [Spent(int(p or 0) + int(c or 0), int(n or 0)) for p, c, n in replies]

    async def days(self, tenant: str, key_id: str, days: list[str]) -> list[list[int]]:
        keys = [usage_key(tenant, key_id, f"d:{day}") for day in days]
        if not keys:
            return []

        def build(pipe: Any) -> None:
            for key in keys:
                pipe.hmget(key, *FIELDS)

        async with self._store._guard("usage_days"):
            replies, _ = await self._store._run(keys[0], build, False)
        return [[int(v or 0) for v in reply] for reply in replies]
