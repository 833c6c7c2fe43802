"""Managed keys in Redis: one hash of records and one generation counter, under one hash tag.

    loopgate:{keys}:all   hash  id -> JSON record (with the secret's SHA-256, never the secret)
    loopgate:{keys}:gen   integer, incremented by every change

Both keys share the ``{keys}`` hash tag, so the write-and-bump script runs in one slot on a
Cluster too. Records have no TTL: a key lives until revoked (revoked records stay, marked, so
``GET /admin/keys/{id}`` can still say so).
"""

from __future__ import annotations

from typing import Any, cast

import orjson

from gateway.store.keys import base
from gateway.store.keys.base import KeyLimitReached, KeyStore
from gateway.store.redis_client.client import RedisIO
from gateway.store.redis_client.keys import PREFIX

ALL = f"{PREFIX}{{keys}}:all"
GENERATION = f"{PREFIX}{{keys}}:gen"

# KEYS: all, gen. ARGV: id, record, create ('1'|'0'), cap. Returns the new generation, -1 unknown id, -2 cap.
_PUT = """
local exists = redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1
if ARGV[3] == '1' then
  if not exists and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) then return -2 end
elseif not exists then return -1 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return redis.call('INCR', KEYS[2])
"""

# KEYS: all, gen. One script, so the generation read matches the records read with it.
_LOAD = """
return {redis.call('GET', KEYS[2]) or '0', redis.call('HVALS', KEYS[1])}
"""


class RedisKeyStore(KeyStore):
    def __init__(self, io: RedisIO) -> None:
        self._io = io
        self._put = io.register(_PUT)
        self._load = io.register(_LOAD)

    async def put(self, record: dict[str, Any], create: bool) -> int:
        async with self._io.guard("put_key"):
            reply = int(await self._put(keys=[ALL, GENERATION],
                                        args=[str(record["id"]), orjson.dumps(record), "1" if create else "0",
                                              base.MAX_MANAGED_KEYS]))
        if reply == -2:
            raise KeyLimitReached
        if reply == -1:
            raise KeyError(record["id"])
        return reply

    async def generation(self) -> int:
        async with self._io.guard("key_generation"):
            raw = await self._io.client.get(GENERATION)
        return int(raw or 0)

    async def load(self) -> tuple[int, list[dict[str, Any]]]:
        async with self._io.guard("load_keys"):
            raw_gen, values = await self._load(keys=[ALL, GENERATION])
        return int(raw_gen or 0), [orjson.loads(value) for value in cast(list[bytes], values)]
