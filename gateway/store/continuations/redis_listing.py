"""The Redis side of the tenant's continuation listing (``GET /v1/continuations``) and audit paging.

Keys (one hash tag per tenant, the same slot as the tenant's tool-call index, so a pause writes
its listing entry in the pipeline that writes its index entries, on one node)::

    loopgate:{t:<tenant>}:conts   sorted set: continuation id scored by its expires_at
    loopgate:{t:<tenant>}:contv   hash: continuation id -> JSON summary (what the listing shows)

Expired entries are trimmed by every listing read (a bounded batch each time, so one read never
blocks Redis for long); a resume or a cancel removes its entry at once. Both keys carry the
continuation TTL, refreshed by each pause, so a tenant that stops pausing leaves nothing behind.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import orjson

from gateway.store.continuations.base import Continuation
from gateway.store.redis_client.client import RedisIO, Script, evalsha
from gateway.store.redis_client.keys import record_key, tenant_key

# Expired entries removed per read, at most: bounds the script's run time and its Lua stack.
TRIM_BATCH = 500
# Extra rows fetched per page so entries tied on the cursor's score can be skipped in Python.
TIE_SLACK = 8

# KEYS: conts, contv. ARGV: now, max score ('+inf' or the cursor's), count.
# Returns a flat list: id, score, summary ('' when missing) for each row, newest first.
PAGE = """
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, TRIM_BATCH)
if #gone > 0 then
  redis.call('ZREM', KEYS[1], unpack(gone))
  redis.call('HDEL', KEYS[2], unpack(gone))
end
local rows = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[2], '(' .. ARGV[1], 'WITHSCORES', 'LIMIT', 0, ARGV[3])
local out = {}
for i = 1, #rows, 2 do
  out[#out + 1] = rows[i]
  out[#out + 1] = rows[i + 1]
  out[#out + 1] = redis.call('HGET', KEYS[2], rows[i]) or ''
end
return out
""".replace("TRIM_BATCH", str(TRIM_BATCH))


# One entry of the listing (keys conts, contv): member, score, summary, ttl. The keys' TTL only ever grows
# (a short-lived pause must not shorten the life of the others' entries). Any Redis version.
LIST_ADD = """
local function list_add(conts, contv, member, score, summary, ttl)
  redis.call('ZADD', conts, score, member)
  redis.call('HSET', contv, member, summary)
  ttl = tonumber(ttl)
  for _, k in ipairs({conts, contv}) do
    if redis.call('TTL', k) < ttl then redis.call('EXPIRE', k, ttl) end
  end
end
"""

# KEYS: conts, contv. ARGV: member, score, summary, ttl.
ADD = LIST_ADD + """
list_add(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
return 1
"""


def listing_keys(tenant: str) -> tuple[str, str]:
    return tenant_key(tenant, "conts"), tenant_key(tenant, "contv")


def queue_add(pipe: Any, script: Script, c: Continuation, ex: int) -> None:
    """Add ``c`` to its tenant's listing inside the pause's index pipeline (same slot)."""
    if c.summary is None:
        return
    evalsha(pipe, script, list(listing_keys(c.tenant)), [c.id, score(c), orjson.dumps(c.summary), ex])


def score(c: Continuation) -> str:
    """A continuation's place in its tenant's listing: its expiry (one TTL for all: creation order)."""
    return repr(c.expires_at)


async def remove(io: RedisIO, tenant: str, continuation_id: str) -> None:
    """Drop one entry (resumed or cancelled): one pipeline on the tenant's node."""
    conts, contv = listing_keys(tenant)

    def build(pipe: Any) -> None:
        pipe.zrem(conts, continuation_id)
        pipe.hdel(contv, continuation_id)

    await io.run(conts, build, False)


async def page(io: RedisIO, script: Script, tenant: str, now: float, limit: int,
               before: tuple[float, str] | None) -> tuple[list[dict[str, Any]], bool]:
    """One page of the listing, newest first, each summary with the record's live ``status``."""
    conts, contv = listing_keys(tenant)
    top = "+inf" if before is None else repr(float(before[0]))
    reply, _ = await io.script(script, [conts, contv], [repr(now), top, limit + 1 + TIE_SLACK], False)
    raw = cast(list[bytes], reply)
    rows: list[tuple[str, float, bytes]] = []
    for i in range(0, len(raw), 3):
        cid, score = raw[i].decode(), float(raw[i + 1])
        if before is not None and (score > before[0] or (score == before[0] and cid >= before[1])):
            continue  # the previous page's last entry, or one tied with it that it already showed
        if raw[i + 2]:
            rows.append((cid, score, raw[i + 2]))
    rows = rows[:limit + 1]
    client = io.client
    statuses = await asyncio.gather(*(client.hget(record_key(cid), "s") for cid, _, _ in rows))
    out: list[dict[str, Any]] = []
    stale: list[str] = []
    for (cid, score, summary), status in zip(rows, statuses, strict=True):
        if status is None or status in (b"resumed", b"cancelled"):
            stale.append(cid)  # gone or finished without its entry being dropped (a crash in between)
            continue
        entry = orjson.loads(summary)
        entry["status"] = status.decode() if isinstance(status, bytes) else str(status)
        entry["_score"] = score
        out.append(entry)
    for cid in stale:
        await remove(io, tenant, cid)
    more = len(out) > limit
    return out[:limit], more
