"""The notification outbox on Redis (see base.py for the semantics).

Keys of the outbox NAME (one hash tag, so every script touches one slot, on a Cluster too)::

    loopgate:{outbox:NAME}:due    sorted set  job id -> due time (ms); a claimed job's score is its lease end
    loopgate:{outbox:NAME}:jobs   hash        job id -> body

Each operation is one Lua script: the due-check and the lease move of ``claim`` are atomic, so two
replicas polling at the same moment never take the same job.
"""

from __future__ import annotations

from typing import Any

from gateway.store.outbox.base import Claimed, Outbox, now_ms
from gateway.store.redis_client.client import RedisIO
from gateway.store.redis_client.keys import PREFIX


def outbox_keys(name: str) -> list[str]:
    """The due set and the job hash of outbox ``name`` (an internal, fixed name: no escaping needed)."""
    if not name.isalnum():
        raise ValueError(f"outbox names are alphanumeric, got {name!r}")
    return [f"{PREFIX}{{outbox:{name}}}:due", f"{PREFIX}{{outbox:{name}}}:jobs"]

PUSH = """
local max = tonumber(ARGV[1])
local n = redis.call('ZCARD', KEYS[1])
local refused = 0
for i = 2, #ARGV, 3 do
  local id = ARGV[i]
  local known = redis.call('ZSCORE', KEYS[1], id)
  if (not known) and n >= max then
    refused = refused + 1
  else
    redis.call('ZADD', KEYS[1], ARGV[i + 1], id)
    redis.call('HSET', KEYS[2], id, ARGV[i + 2])
    if not known then n = n + 1 end
  end
end
return refused
"""

CLAIM = """
local token = tonumber(ARGV[1]) + tonumber(ARGV[2])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
local out = {tostring(token)}
for _, id in ipairs(ids) do
  local body = redis.call('HGET', KEYS[2], id)
  if body then
    redis.call('ZADD', KEYS[1], token, id)
    table.insert(out, id)
    table.insert(out, body)
  else
    redis.call('ZREM', KEYS[1], id)
  end
end
return out
"""

DONE = """
if tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]) or -1) ~= tonumber(ARGV[2]) then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
"""

RETRY = """
if tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]) or -1) ~= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
return 1
"""

class RedisOutbox(Outbox):
    """Built by ``RedisStore.outbox()`` on its ``RedisIO`` (outages become ``StoreUnavailable``)."""

    def __init__(self, io: RedisIO, name: str) -> None:
        self._io = io
        self._keys = outbox_keys(name)
        self._push = io.register(PUSH)
        self._claim = io.register(CLAIM)
        self._done = io.register(DONE)
        self._retry = io.register(RETRY)

    async def push(self, jobs: list[tuple[str, int, bytes]], max_jobs: int) -> int:
        if not jobs:
            return 0
        args: list[Any] = [max_jobs]
        for job_id, due, body in jobs:
            args.extend((job_id, due, body))
        async with self._io.guard("outbox push"):
            return int((await self._io.script(self._push, self._keys, args, False))[0])

    async def claim(self, lease_ms: int, limit: int) -> list[Claimed]:
        async with self._io.guard("outbox claim"):
            reply, _ = await self._io.script(self._claim, self._keys, [now_ms(), lease_ms, limit], False)
        token = int(reply[0])
        pairs = reply[1:]
        return [Claimed(_text(pairs[i]), bytes(pairs[i + 1]), token) for i in range(0, len(pairs), 2)]

    async def done(self, job_id: str, token: int) -> bool:
        async with self._io.guard("outbox done"):
            return bool((await self._io.script(self._done, self._keys, [job_id, token], False))[0])

    async def retry(self, job_id: str, token: int, due_ms: int, body: bytes) -> bool:
        async with self._io.guard("outbox retry"):
            return bool((await self._io.script(self._retry, self._keys, [job_id, token, due_ms, body], False))[0])

    async def size(self) -> int:
        async with self._io.guard("outbox size"):
            return int(await self._io.command("ZCARD", self._keys[0]))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
