"""Rollups on Redis: every replica's records in one sorted set, statuses in one hash.

    loopgate:{ru}:series     sorted set, score = interval end (epoch s), member = the record
    loopgate:{ru}:status     hash, replica -> "<expires-at> <status JSON>"

One hash tag, so a write (add, trim, status) is one pipeline to one slot on a Cluster. Members are
unique by construction (each record names its replica and interval), so a retried write cannot
double-count. The load is a few hundred bytes per replica per interval.
"""

from __future__ import annotations

import time
from typing import Any

from gateway.store.redis_client.client import RedisIO
from gateway.store.redis_client.keys import PREFIX, num
from gateway.store.rollups.base import MAX_READ, RollupStore

SERIES = f"{PREFIX}{{ru}}:series"
STATUS = f"{PREFIX}{{ru}}:status"


def _bytes(value: Any) -> bytes:
    """The client is built without decode_responses: every reply is bytes (a str only from a test double)."""
    return value if isinstance(value, bytes) else str(value).encode()


class RedisRollups(RollupStore):
    def __init__(self, io: RedisIO, retention_s: float, status_ttl_s: float) -> None:
        super().__init__(retention_s, status_ttl_s)
        self.io = io

    async def write(self, replica: str, at: float, record: bytes, status: bytes) -> None:
        now = time.time()
        retention = int(self.retention_s) + 60

        def build(pipe: Any) -> None:
            pipe.zadd(SERIES, {record: at})
            pipe.zremrangebyscore(SERIES, "-inf", f"({num(now - self.retention_s)}")
            pipe.hset(STATUS, replica, num(now + self.status_ttl_s).encode() + b" " + status)
            # The whole domain goes away if every replica stops writing for a retention.
            pipe.expire(SERIES, retention)
            pipe.expire(STATUS, retention)

        async with self.io.guard("rollups_write"):
            await self.io.run(SERIES, build, False)

    async def read(self, since: float) -> list[bytes]:
        low = max(since, time.time() - self.retention_s)
        async with self.io.guard("rollups_read"):
            raw = await self.io.client.zrangebyscore(SERIES, num(low), "+inf", start=0, num=MAX_READ)
        return [_bytes(item) for item in raw]

    async def statuses(self) -> dict[str, bytes]:
        async with self.io.guard("rollups_statuses"):
            raw = await self.io.client.hgetall(STATUS)
        now = time.time()
        found: dict[str, bytes] = {}
        stale: list[bytes] = []
        for replica, value in raw.items():
            until, _, status = _bytes(value).partition(b" ")
            if float(until) > now:
                found[_bytes(replica).decode()] = status
            else:
                stale.append(_bytes(replica))
        if stale:
            async with self.io.guard("rollups_statuses"):
                await self.io.client.hdel(STATUS, *stale)
        return found
