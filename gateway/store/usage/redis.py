"""Usage aggregates in Redis: summed in process, flushed as one pipeline per tenant every ``usage.flush_s``;
a budget check is one script call answering one string.

Keys (all of a tenant's rows share the hash tag ``{u:<tenant>}``, so everything one flush adds
for a tenant sits in one slot and goes out as one pipeline, Cluster included)::

    loopgate:{u:<tenant>}:<period>               hash r e p c ca rs n tc (see base.py)
    loopgate:{u:<tenant>}:k:<key id>:<period>    the same for one key of the tenant

``<period>`` is ``d:YYYY-MM-DD``, ``m:YYYY-MM`` or ``all`` (UTC). Every write renews the row's
TTL (``retention_days``). Counters are integers (cost in nano-USD), so HINCRBY sums exactly.

Why coalesce: one redis-py command costs a request about as many instructions as the rest of a
proxied request (bench/README.md), while adding a request's counts to a dict is cheap, and
under load one flush carries many requests. The price is
that counts reach Redis up to ``flush_s`` after the response (budgets are soft limits anyway),
and a crash loses at most that much; a graceful stop flushes. A failed flush is dropped, logged
and counted by the caller (it does not pile up during an outage).
"""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.store.redis_client.client import RedisIO
from gateway.store.redis_client.keys import PREFIX, esc
from gateway.store.usage.base import (
    DEFAULT_RETENTION_DAYS,
    FIELDS,
    Period,
    Scope,
    Spent,
    UsageDelta,
    UsageStore,
    merge,
    period_name,
    period_names,
)

# KEYS: the rows; ARGV[1]: TTL in seconds, then field, amount pairs (only the non-zero ones).
# Sent as EVAL (not EVALSHA): a pipeline of them needs no NOSCRIPT handling, and Redis caches it.
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
# KEYS: rows; one string "p:c:n,p:c:n,..." (redis-py parses a reply array element by element, at a
# cost per element comparable to a whole command: a budget check reads one string).
_SPENT = """
local out = {}
for i = 1, #KEYS do
  local v = redis.call('HMGET', KEYS[i], 'p', 'c', 'n')
  out[i] = (v[1] or '0') .. ':' .. (v[2] or '0') .. ':' .. (v[3] or '0')
end
return table.concat(out, ',')
"""
DEFAULT_FLUSH_S = 0.5
#: distinct (tenant, key, day) entries waiting; past it new ones are refused (counted by the caller)
MAX_PENDING = 100_000


def usage_key(tenant: str, key_id: str, period: str) -> str:
    base = f"{PREFIX}{{u:{esc(tenant)}}}"
    return f"{base}:k:{esc(key_id)}:{period}" if key_id else f"{base}:{period}"


class RedisUsage(UsageStore):
    """Shares the store's ``RedisIO``: connections, deadlines and error mapping (a ``StoreUnavailable``)."""

    def __init__(self, io: RedisIO, retention_days: int = DEFAULT_RETENTION_DAYS,
                 flush_s: float = DEFAULT_FLUSH_S) -> None:
        self._io = io
        self._ttl_s = retention_days * 86400
        self._flush_s = flush_s
        self._spent = io.register(_SPENT)
        # (tenant, key id, periods) -> summed counts, waiting for the next flush
        self._pending: dict[tuple[str, str, tuple[str, str, str]], list[int]] = {}
        self._timer: asyncio.TimerHandle | None = None
        # pending entry -> its row names, built once (the same entries come back every flush)
        self._key_names: dict[tuple[str, str, tuple[str, str, str]], list[str]] = {}
        self._flushing: set[asyncio.Task[None]] = set()

    def add_now(self, tenant: str, key_id: str, values: tuple[int, ...], now: float) -> bool:
        """Queue ``values`` for the next flush; False when too much is already waiting (dropped)."""
        entry = (tenant, key_id, period_names(now))
        row = self._pending.get(entry)
        if row is None:
            if len(self._pending) >= MAX_PENDING:
                return False
            self._pending[entry] = list(values)
        else:
            merge(row, values)
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._flush_s, self._start_flush)
        return True

    def _start_flush(self) -> None:
        self._timer = None
        task = asyncio.get_running_loop().create_task(self._flush_quietly())
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)

    async def _flush_quietly(self) -> None:
        try:
            await self.flush()
        except Exception as exc:  # reported; never an unhandled task error
            if self.on_error is not None:
                self.on_error("write", exc)

    async def flush(self) -> None:
        """Send what is waiting: one pipeline per tenant (one slot each), all tenants concurrently."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending, self._pending = self._pending, {}
        by_tenant: dict[str, list[tuple[list[str], list[Any]]]] = {}
        for entry, values in pending.items():
            args: list[Any] = [self._ttl_s]
            for field, value in zip(FIELDS, values, strict=True):
                if value:
                    args += [field, value]
            by_tenant.setdefault(entry[0], []).append((self._keys(entry), args))
        if len(by_tenant) == 1:  # the common case: no gather, no task per tenant
            (calls,) = by_tenant.values()
            await self._send(calls)
            return
        results = await asyncio.gather(*(self._send(calls) for calls in by_tenant.values()), return_exceptions=True)
        failure = next((r for r in results if isinstance(r, BaseException)), None)
        if failure is not None:
            raise failure

    def _keys(self, entry: tuple[str, str, tuple[str, str, str]]) -> list[str]:
        """The rows of a pending entry: its tenant's and (with a key id) its key's, for its three periods."""
        keys = self._key_names.get(entry)
        if keys is None:
            tenant, key_id, periods = entry
            keys = [usage_key(tenant, "", p) for p in periods]
            if key_id:
                keys += [usage_key(tenant, key_id, p) for p in periods]
            if len(self._key_names) >= MAX_PENDING:
                self._key_names.clear()
            self._key_names[entry] = keys
        return keys

    async def _send(self, calls: list[tuple[list[str], list[Any]]]) -> None:
        def build(pipe: Any) -> None:
            for keys, args in calls:
                pipe.eval(_ADD, len(keys), *keys, *args)

        async with self._io.guard("usage_add"):
            await self._io.run(calls[0][0][0], build, False)

    async def drain(self, timeout_s: float) -> None:
        if self._flushing:
            await asyncio.wait(list(self._flushing), timeout=timeout_s)
        if self._pending:
            async with asyncio.timeout(timeout_s):
                await self.flush()

    async def add(self, tenant: str, key_id: str, delta: UsageDelta, now: float) -> None:
        """Add and write at once (tests, tools): ``add_now`` plus a flush."""
        if not self.add_now(tenant, key_id, delta.values(), now):
            raise OverflowError("too many usage rows waiting for the store")
        await self.flush()

    async def spent(self, tenant: str, key_id: str, wants: list[tuple[Scope, Period]], now: float) -> list[Spent]:
        keys = [usage_key(tenant, key_id if scope == "key" else "", period_name(period, now))
                for scope, period in wants]
        async with self._io.guard("usage_spent", fail_open=True):  # a budget check fails open
            reply = await self._spent(keys=keys)
        text = reply.decode() if isinstance(reply, bytes) else str(reply)
        found = []
        for item in text.split(","):
            prompt, completion, cost = item.split(":")
            found.append(Spent(int(prompt) + int(completion), int(cost)))
        return found

    async def days(self, tenant: str, key_id: str, days: list[str]) -> list[list[int]]:
        keys = [usage_key(tenant, key_id, f"d:{day}") for day in days]
        if not keys:
            return []

        def build(pipe: Any) -> None:
            for key in keys:
                pipe.hmget(key, *FIELDS)

        async with self._io.guard("usage_days"):
            replies, _ = await self._io.run(keys[0], build, False)
        return [[int(v or 0) for v in reply] for reply in replies]
