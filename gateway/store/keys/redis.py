"""Managed keys in Redis: records, their ends and their digests, and one generation counter, under one hash tag.

    loopgate:{keys}:all    hash  id -> JSON record (with the secret's digest, never the secret)
    loopgate:{keys}:gen    integer, incremented by every change
    loopgate:{keys}:ends   zset  id, scored by when it stopped being live (revoke, expiry; +inf: live)
    loopgate:{keys}:hash   hash  secret digest (hex) -> id (``find``: a key new to a replica)
    loopgate:{keys}:salt   the deployment's random key-id salt (governance/key_ids.py)

Every key shares the ``{keys}`` hash tag, so each script runs in one slot on a Cluster too.
Records written before the ``ends`` and ``hash`` indexes existed are indexed by the next create,
update or purge (one pass, when the index holds fewer entries than the records).
"""

from __future__ import annotations

import math
import time
from typing import Any, cast

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
)
from gateway.store.redis_client.client import RedisIO
from gateway.store.redis_client.keys import PREFIX, num

ALL = f"{PREFIX}{{keys}}:all"
GENERATION = f"{PREFIX}{{keys}}:gen"
ENDS = f"{PREFIX}{{keys}}:ends"
BY_HASH = f"{PREFIX}{{keys}}:hash"
SALT = f"{PREFIX}{{keys}}:salt"
_KEYS = [ALL, GENERATION, ENDS, BY_HASH]

# Shared by the scripts below. KEYS: all, gen, ends, hash.
_PRELUDE = """
local function decoded(raw)
  -- A record is a JSON object, as Python reads it: an array (also a Lua table) is not one.
  if not raw or not string.match(raw, '^%s*{') then return nil end
  local ok, rec = pcall(cjson.decode, raw)
  if ok and type(rec) == 'table' then return rec end
  return nil
end
local function end_of(rec, now)
  if rec == nil then return now end
  if rec.revoked == true then return tonumber(rec.revoked_at) or 0 end
  if type(rec.expires_at) == 'number' then return rec.expires_at end
  return '+inf'
end
local function index(now)
  if redis.call('ZCARD', KEYS[3]) >= redis.call('HLEN', KEYS[1]) then return end
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    if not redis.call('ZSCORE', KEYS[3], all[i]) then
      local rec = decoded(all[i + 1])
      redis.call('ZADD', KEYS[3], end_of(rec, now), all[i])
      if rec and type(rec.hash) == 'string' then redis.call('HSET', KEYS[4], rec.hash, all[i]) end
    end
  end
end
local function purge(cutoff, batch)
  local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', cutoff, 'LIMIT', 0, batch)
  for _, id in ipairs(dead) do
    local rec = decoded(redis.call('HGET', KEYS[1], id))
    if rec and type(rec.hash) == 'string' and redis.call('HGET', KEYS[4], rec.hash) == id then
      redis.call('HDEL', KEYS[4], rec.hash)
    end
    redis.call('HDEL', KEYS[1], id)
    redis.call('ZREM', KEYS[3], id)
  end
  return #dead
end
"""

# ARGV: id, record, end, digest, now, cutoff, cap, batch. Returns the new generation; -2 cap, -3 id taken.
_CREATE = _PRELUDE + """
index(tonumber(ARGV[5]))
local purged = purge(ARGV[6], tonumber(ARGV[8]))
if redis.call('ZCOUNT', KEYS[3], '(' .. ARGV[5], '+inf') >= tonumber(ARGV[7]) then
  if purged > 0 then redis.call('INCR', KEYS[2]) end
  return -2
end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return -3 end
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
redis.call('HSET', KEYS[4], ARGV[4], ARGV[1])
return redis.call('INCR', KEYS[2])
"""

# ARGV: id, record, end, version read, revoked ('1'|'0'), now.
# Returns the new generation; -1 unknown id, -3 stale version, -4 revoked for good, -5 unreadable.
_UPDATE = _PRELUDE + """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return -1 end
local cur = decoded(raw)
local read = tonumber(ARGV[4])
if cur == nil then
  if read ~= -1 or ARGV[5] ~= '1' then return -5 end
else
  if (tonumber(cur.version) or 0) ~= read then return -3 end
  if cur.revoked == true and ARGV[5] ~= '1' then return -4 end
end
index(tonumber(ARGV[6]))
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
return redis.call('INCR', KEYS[2])
"""

# ARGV: now, cutoff, batch. Returns how many records went.
_PURGE = _PRELUDE + """
index(tonumber(ARGV[1]))
local purged = purge(ARGV[2], tonumber(ARGV[3]))
if purged > 0 then redis.call('INCR', KEYS[2]) end
return purged
"""

# ARGV: digest. The generation and the record (nil: none), read together.
_FIND = """
local id = redis.call('HGET', KEYS[4], ARGV[1])
local rec = false
if id then rec = redis.call('HGET', KEYS[1], id) end
return {redis.call('GET', KEYS[2]) or '0', rec}
"""

# One script, so the generation read matches the records read with it.
_LOAD = """
return {redis.call('GET', KEYS[2]) or '0', redis.call('HGETALL', KEYS[1])}
"""


def _score(end: float) -> str:
    return "+inf" if end == math.inf else num(end)


def _decoded(key_id: str, raw: bytes) -> dict[str, Any]:
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return unreadable(key_id)
    return record if isinstance(record, dict) else unreadable(key_id)


class RedisKeyStore(KeyStore):
    def __init__(self, io: RedisIO, retention_s: float = DEFAULT_RETENTION_S) -> None:
        super().__init__(retention_s)
        self._io = io
        self._create = io.register(_CREATE)
        self._update = io.register(_UPDATE)
        self._purge = io.register(_PURGE)
        self._find = io.register(_FIND)
        self._load = io.register(_LOAD)

    async def create(self, record: dict[str, Any], now: float) -> int:
        stored = {**record, "version": 1}
        async with self._io.guard("create_key"):
            reply = int((await self._io.script(self._create, _KEYS, [
                str(record["id"]), orjson.dumps(stored), _score(end_of(stored)), str(record.get("hash", "")),
                num(now), num(now - self.retention_s), base.MAX_MANAGED_KEYS, base.PURGE_BATCH], False))[0])
        if reply == -2:
            raise KeyLimitReached
        if reply == -3:
            raise StaleKey(record["id"])  # a random id taken: practically never
        return reply

    async def update(self, record: dict[str, Any], version: int) -> int:
        stored = {**record, "version": max(version, 0) + 1}
        async with self._io.guard("update_key"):
            reply = int((await self._io.script(self._update, _KEYS, [
                str(record["id"]), orjson.dumps(stored), _score(end_of(stored)), version,
                "1" if record.get("revoked") else "0", num(time.time())], False))[0])
        if reply == -1:
            raise KeyError(record["id"])
        if reply == -3:
            raise StaleKey(record["id"])
        if reply == -4:
            raise KeyRevoked(record["id"])
        if reply == -5:
            raise KeyUnreadable(record["id"])
        return reply

    async def get(self, key_id: str) -> dict[str, Any] | None:
        async with self._io.guard("get_key"):
            raw = await self._io.command("HGET", ALL, key_id)
        return None if raw is None else _decoded(key_id, cast(bytes, raw))

    async def find(self, digest: bytes) -> tuple[int, dict[str, Any] | None]:
        async with self._io.guard("find_key"):
            (raw_gen, raw), _ = await self._io.script(self._find, _KEYS, [digest.hex()], False)
        if raw is None:
            return int(raw_gen or 0), None
        record = _decoded("", cast(bytes, raw))
        return int(raw_gen or 0), None if record.get("unreadable") else record

    async def purge(self, now: float) -> int:
        async with self._io.guard("purge_keys"):
            args = [num(now), num(now - self.retention_s), base.PURGE_BATCH]
            reply, _ = await self._io.script(self._purge, _KEYS, args, False)
            return int(reply)

    async def generation(self) -> int:
        async with self._io.guard("key_generation"):
            raw = await self._io.command("GET", GENERATION)  # every key sync (4 a second): the lean path
        return int(raw or 0)

    async def load(self) -> tuple[int, list[dict[str, Any]]]:
        async with self._io.guard("load_keys"):
            (raw_gen, flat), _ = await self._io.script(self._load, _KEYS, [], False)
        pairs = cast(list[bytes], flat)
        return int(raw_gen or 0), [_decoded(pairs[i].decode("utf-8", "replace"), pairs[i + 1])
                                   for i in range(0, len(pairs), 2)]

    async def salt(self, fresh: bytes) -> bytes | None:
        async with self._io.guard("key_id_salt"):
            await self._io.client.set(SALT, fresh, nx=True)
            stored = await self._io.client.get(SALT)
        return cast(bytes, stored) if stored else fresh
