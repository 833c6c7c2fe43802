"""Rate limits shared by every replica: one Lua script per request to take, one to settle.

The calls of one loop turn (many requests under load) go out as one pipeline (redis_batch.py).

Key layout (the tenant is the hash tag, so every key one request touches is in one slot)::

    loopgate:{l:<tenant>}:t:b         hash  r=requests left t=tokens left ts=updated (tenant bucket)
    loopgate:{l:<tenant>}:t:c         zset  in-flight request ids scored by lease end (tenant)
    loopgate:{l:<tenant>}:k:<id>:b    the same per key
    loopgate:{l:<tenant>}:k:<id>:c

Buckets expire 120 s after their last change (a full refill takes 60 s: an absent bucket and a
full one are the same); a slot set expires with its longest lease.
"""

from __future__ import annotations

import time
from typing import Any

from gateway.store.limits import Decision, LimitScope, RateLimiter, decision
from gateway.store.redis import PREFIX, RedisStore, _esc, _f
from gateway.store.redis_batch import ScriptBatcher

# KEYS: bucket, slots per scope. ARGV: now, tokens, member, lease_end, then rpm, tpm, max_concurrent per scope.
# Returns "verdict kind scope retry_after r1 t1 ..." (see limits.decision): one bulk string, because
# redis-py's pure-Python reply parser costs far more per array element than one split() does.
_ACQUIRE = """
local now, need, member, lease_end = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local n = #KEYS / 2
local levels, out = {}, {}
local verdict, kind, at, retry = 1, 0, 0, 0
for i = 1, n do
  local rpm, tpm, mc = tonumber(ARGV[2 + 3 * i]), tonumber(ARGV[3 + 3 * i]), tonumber(ARGV[4 + 3 * i])
  local v = redis.call('HMGET', KEYS[2 * i - 1], 'r', 't', 'ts')
  local elapsed = math.max(0, now - (tonumber(v[3]) or now))
  local r = math.min(rpm, (tonumber(v[1]) or rpm) + elapsed * rpm / 60)
  local t = math.min(tpm, (tonumber(v[2]) or tpm) + elapsed * tpm / 60)
  levels[i] = {r, t}
  if verdict == 1 then
    if rpm > 0 and r < 1 then verdict, kind, at, retry = 0, 0, i, (1 - r) * 60 / rpm
    elseif tpm > 0 and need > tpm then verdict, kind, at, retry = 2, 1, i, 60
    elseif tpm > 0 and t < need then verdict, kind, at, retry = 0, 1, i, (need - t) * 60 / tpm
    elseif mc > 0 and redis.call('ZCARD', KEYS[2 * i]) >= mc then
      -- Full: drop the leases that ended (a replica died mid-request), then count again.
      redis.call('ZREMRANGEBYSCORE', KEYS[2 * i], '-inf', now)
      if redis.call('ZCARD', KEYS[2 * i]) >= mc then verdict, kind, at, retry = 0, 2, i, 1 end
    end
  end
end
if verdict == 1 then
  for i = 1, n do
    local rpm, tpm, mc = tonumber(ARGV[2 + 3 * i]), tonumber(ARGV[3 + 3 * i]), tonumber(ARGV[4 + 3 * i])
    if rpm > 0 or tpm > 0 then
      if rpm > 0 then levels[i][1] = levels[i][1] - 1 end
      if tpm > 0 then levels[i][2] = levels[i][2] - need end
      redis.call('HSET', KEYS[2 * i - 1], 'r', tostring(levels[i][1]), 't', tostring(levels[i][2]), 'ts', ARGV[1])
      redis.call('PEXPIRE', KEYS[2 * i - 1], 120000)
    end
    if mc > 0 then
      redis.call('ZADD', KEYS[2 * i], lease_end, member)
      local ttl = math.ceil((lease_end - now) * 1000)
      if redis.call('PTTL', KEYS[2 * i]) < ttl then redis.call('PEXPIRE', KEYS[2 * i], ttl) end
    end
  end
end
out = {tostring(verdict), tostring(kind), tostring(math.max(at - 1, 0)), tostring(retry)}
for i = 1, n do out[#out + 1] = tostring(levels[i][1]); out[#out + 1] = tostring(levels[i][2]) end
return table.concat(out, ' ')
"""

# KEYS: bucket, slots per scope. ARGV: now, extra_tokens, member, then tpm, max_concurrent per scope.
_SETTLE = """
local now, extra, member = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
for i = 1, #KEYS / 2 do
  local tpm, mc = tonumber(ARGV[2 + 2 * i]), tonumber(ARGV[3 + 2 * i])
  if tpm > 0 and extra ~= 0 then
    local v = redis.call('HMGET', KEYS[2 * i - 1], 't', 'ts')
    local elapsed = math.max(0, now - (tonumber(v[2]) or now))
    local t = math.min(tpm, (tonumber(v[1]) or tpm) + elapsed * tpm / 60) - extra
    redis.call('HSET', KEYS[2 * i - 1], 't', tostring(t), 'ts', ARGV[1])
    redis.call('PEXPIRE', KEYS[2 * i - 1], 120000)
  end
  if mc > 0 then redis.call('ZREM', KEYS[2 * i], member) end
end
return 1
"""


def scope_keys(tenant: str, scope: LimitScope) -> list[str]:
    base = f"{PREFIX}{{l:{_esc(tenant)}}}:" + ("t" if scope.kind == "tenant" else f"k:{_esc(scope.ident)}")
    return [f"{base}:b", f"{base}:c"]


class RedisRateLimiter(RateLimiter):
    def __init__(self, store: RedisStore) -> None:
        self._store = store
        self._acquire = store._r.register_script(_ACQUIRE)
        self._settle = store._r.register_script(_SETTLE)
        # Takes and settles of one loop turn share a round trip (gateway/store/redis_batch.py).
        self._batch = ScriptBatcher(store, "rate_limit")

    async def acquire(self, tenant: str, scopes: tuple[LimitScope, ...], tokens: int, member: str,
                      lease_s: float, now: float | None = None) -> Decision:
        now = time.time() if now is None else now
        keys = [key for scope in scopes for key in scope_keys(tenant, scope)]
        args: list[Any] = [_f(now), tokens, member, _f(now + lease_s)]
        for scope in scopes:
            args += [scope.rpm, scope.tpm, scope.max_concurrent]
        reply = await self._batch.call(self._acquire, keys, args)
        return decision(scopes, reply.split())

    async def settle(self, tenant: str, scopes: tuple[LimitScope, ...], extra_tokens: int, member: str) -> None:
        keys = [key for scope in scopes for key in scope_keys(tenant, scope)]
        args: list[Any] = [_f(time.time()), extra_tokens, member]
        for scope in scopes:
            args += [scope.tpm, scope.max_concurrent]
        await self._batch.call(self._settle, keys, args)
