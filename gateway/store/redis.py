"""The shared store: Redis, for several workers or replicas behind a load balancer.

Key layout (every key under ``loopgate:``; the ``{...}`` part is the Redis Cluster hash tag, so
every key one Lua script or multi-key command touches lives in one slot)::

    loopgate:{<continuation id>}:rec          hash  t=tenant s=status cu=claimed_until b=body ids=[tool_call_id]
    loopgate:{t:<tenant>}:tc:<tool_call_id>   string -> continuation id (resume way A index)
    loopgate:{t:<tenant>}:ledger:<tool_call_id>  string, JSON execution record
    loopgate:{t:<tenant>}:art:<tool_call_id>  string, JSON artifact (one MGET for many ids)
    loopgate:{t:<tenant>}:audit               list, capped (RPUSH + LTRIM)
    loopgate:{h:<target>}:fails               integer, consecutive failures (expires after a window)
    loopgate:{h:<target>}:open                string open-until timestamp, PX = cooldown

Braces and ``%`` inside tenants, ids and targets are percent-encoded so a value can never
change which part of a key is the hash tag. Every write sets its TTL in the same command or
script, so nothing lives forever by accident. The continuation's state machine (claim,
release, finish, cancel) runs as Lua scripts on the one record key: the check and the change
are atomic, and the tenant comparison happens inside the script. The body is an opaque blob
the scripts never parse (no cjson round trip can alter the transcript).

Outages fail fast: bounded connect/read timeouts, a single retry (for a pooled connection the
server dropped) and a deadline over each whole operation; every connection or timeout error
surfaces as ``StoreUnavailable``.
Time comes from the replica's clock (``time.time()``); leases and cooldowns are seconds long,
so NTP-level skew between replicas does not matter.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import orjson
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.store.base import (
    Continuation,
    ContinuationConflict,
    ContinuationNotFound,
    ContinuationStatus,
    Store,
    StoreUnavailable,
    audit_entry,
    check_ttl,
    failure_window,
)

PREFIX = "loopgate:"


def _esc(value: str) -> str:
    """Keep ``{``/``}`` out of key parts: they would move the hash tag."""
    return value.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


def record_key(continuation_id: str) -> str:
    return f"{PREFIX}{{{_esc(continuation_id)}}}:rec"


def tenant_key(tenant: str, kind: str, sub: str | None = None) -> str:
    base = f"{PREFIX}{{t:{_esc(tenant)}}}:{kind}"
    return base if sub is None else f"{base}:{_esc(sub)}"


def health_keys(target: str) -> tuple[str, str]:
    base = f"{PREFIX}{{h:{_esc(target)}}}"
    return f"{base}:fails", f"{base}:open"


# -- Lua -------------------------------------------------------------------------------------------
# Replies are tables {code, payload}: code 'ok' | 'nf' (404) | 'conflict' (409, payload = status).
# Missing hash fields read as false; an unknown key, another tenant or a cancelled record is 'nf'.
_LOAD = """
local v = redis.call('HMGET', KEYS[1], 't', 's', 'cu')
if not v[1] or v[1] ~= ARGV[1] or v[2] == 'cancelled' then return {'nf'} end
local s = v[2]
local cu = tonumber(v[3] or '') or 0
"""

_SAVE = """
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 't', ARGV[1], 's', ARGV[2], 'cu', ARGV[3], 'b', ARGV[4], 'ids', ARGV[5])
redis.call('EXPIRE', KEYS[1], ARGV[6])
return 1
"""

# ARGV: tenant, now, claimed_until
_CLAIM = _LOAD + """
if s == 'claimed' and cu > tonumber(ARGV[2]) then return {'conflict', s} end
if s ~= 'pending' and s ~= 'claimed' then return {'conflict', s} end
redis.call('HSET', KEYS[1], 's', 'claimed', 'cu', ARGV[3])
return {'ok', redis.call('HGET', KEYS[1], 'b')}
"""

# ARGV: tenant
_RELEASE = _LOAD + """
if s ~= 'pending' and s ~= 'claimed' then return {'conflict', s} end
redis.call('HSET', KEYS[1], 's', 'pending', 'cu', '')
return {'ok'}
"""

# ARGV: tenant
_FINISH = _LOAD + """
if s ~= 'claimed' then return {'conflict', s} end
redis.call('HSET', KEYS[1], 's', 'resumed', 'cu', '')
return {'ok', redis.call('HGET', KEYS[1], 'ids')}
"""

# ARGV: tenant, now
_CANCEL = _LOAD + """
if s == 'claimed' and cu > tonumber(ARGV[2]) then return {'conflict', s} end
if s ~= 'pending' and s ~= 'claimed' then return {'conflict', s} end
local ids = redis.call('HGET', KEYS[1], 'ids')
redis.call('DEL', KEYS[1])
return {'ok', ids}
"""

# KEYS: index keys of one tenant (one hash tag); ARGV[1]: continuation id. Deletes only entries
# that still point at this continuation.
_UNINDEX = """
local n = 0
for _, k in ipairs(KEYS) do
  if redis.call('GET', k) == ARGV[1] then redis.call('DEL', k); n = n + 1 end
end
return n
"""

# KEYS: fails, open. ARGV: threshold, window_ms, open_until (string), cooldown_ms.
# Returns the open-until string while open, nil while closed.
_HEALTH_FAIL = """
local n = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if n < tonumber(ARGV[1]) then return false end
local cur = redis.call('GET', KEYS[2])
if cur then return cur end
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
return ARGV[3]
"""


def _f(value: float) -> str:
    """A float as a string that round-trips exactly (Lua numbers returned to Redis become integers)."""
    return repr(float(value))


class RedisStore(Store):
    """``redis://``, ``rediss://`` or ``unix://`` URL; a blocking pool so load waits rather than errors."""

    kind = "redis"

    def __init__(self, url: str, *, socket_connect_timeout: float = 2.0, socket_timeout: float = 2.0,
                 op_timeout: float = 3.0, max_connections: int = 256, pool_timeout: float = 2.0,
                 audit_max: int = 10_000, health_check_interval: float = 30.0) -> None:
        self._pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=pool_timeout,
            socket_connect_timeout=socket_connect_timeout,
            socket_timeout=socket_timeout,
            # One quick retry covers a pooled connection the server closed; an outage still fails fast.
            retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 1),
            health_check_interval=health_check_interval,
        )
        self._r = aioredis.Redis(connection_pool=self._pool)
        # A deadline for each whole operation: redis-py retries at the command and the connect level,
        # so against a hung server the socket timeouts alone would add up to several times their value.
        self._op_timeout = op_timeout
        self._audit_max = audit_max
        # Registered once: each call is an EVALSHA, with a transparent SCRIPT LOAD after a flush/failover.
        self._save = self._r.register_script(_SAVE)
        self._claim = self._r.register_script(_CLAIM)
        self._release = self._r.register_script(_RELEASE)
        self._finish = self._r.register_script(_FINISH)
        self._cancel = self._r.register_script(_CANCEL)
        self._unindex = self._r.register_script(_UNINDEX)
        self._health_fail = self._r.register_script(_HEALTH_FAIL)

    @asynccontextmanager
    async def _guard(self, op: str) -> AsyncIterator[None]:
        """Turn "Redis is not there" into ``StoreUnavailable``; other Redis errors are bugs and propagate."""
        try:
            async with asyncio.timeout(self._op_timeout):
                yield
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:  # builtin TimeoutError is an OSError
            cause = str(exc) or f"no answer within {self._op_timeout}s"  # our deadline has no message
            raise StoreUnavailable(f"redis unavailable during {op}: {cause}") from exc

    async def ping(self) -> bool:
        try:
            async with self._guard("ping"):
                return bool(await self._r.ping())
        except Exception:
            return False

    async def aclose(self) -> None:
        await self._r.aclose()
        await self._pool.aclose()

    # -- continuations ---------------------------------------------------------------------------
    @staticmethod
    def _check(reply: list[Any], continuation_id: str) -> list[Any]:
        code = reply[0]
        if code == b"ok":
            return reply
        if code == b"conflict":
            raise ContinuationConflict(continuation_id, reply[1].decode())
        raise ContinuationNotFound(continuation_id)

    async def _drop_index(self, tenant: str, continuation_id: str, ids_json: bytes | None) -> None:
        ids = orjson.loads(ids_json) if ids_json else []
        if ids:
            keys = [tenant_key(tenant, "tc", tc) for tc in ids]
            await self._unindex(keys=keys, args=[continuation_id])

    async def save_continuation(self, c: Continuation, ttl_s: int) -> None:
        ids = c.tool_call_ids
        ex = check_ttl(ttl_s)
        args: list[bytes | str | int | float] = [
            c.tenant, c.status, "" if c.claimed_until is None else _f(c.claimed_until), c.to_bytes(),
            orjson.dumps(ids), ex]
        # One round trip: the record (atomic, with its TTL) and every index entry.
        async with self._guard("save_continuation"), self._r.pipeline(transaction=False) as pipe:
            await self._save(keys=[record_key(c.id)], args=args, client=pipe)
            for tc in ids:
                pipe.set(tenant_key(c.tenant, "tc", tc), c.id, ex=ex)
            await pipe.execute()

    async def get_continuation(self, continuation_id: str, tenant: str) -> Continuation:
        async with self._guard("get_continuation"):
            # The client is built without decode_responses: every value is bytes (or None).
            fields = cast(list[bytes | None], await self._r.hmget(record_key(continuation_id), ["t", "s", "cu", "b"]))
        t, s, cu, body = fields
        if t is None or s is None or body is None or t.decode() != tenant or s == b"cancelled":
            raise ContinuationNotFound(continuation_id)
        c = Continuation.from_bytes(body)
        c.status = cast(ContinuationStatus, s.decode())
        c.claimed_until = float(cu) if cu else None
        return c

    async def claim_continuation(self, continuation_id: str, tenant: str, lease_s: float) -> Continuation:
        now = time.time()
        until = now + lease_s
        async with self._guard("claim_continuation"):
            reply = await self._claim(keys=[record_key(continuation_id)], args=[tenant, _f(now), _f(until)])
        c = Continuation.from_bytes(self._check(reply, continuation_id)[1])
        c.status = "claimed"
        c.claimed_until = until
        return c

    async def release_continuation(self, continuation_id: str, tenant: str) -> None:
        async with self._guard("release_continuation"):
            reply = await self._release(keys=[record_key(continuation_id)], args=[tenant])
        self._check(reply, continuation_id)

    async def finish_continuation(self, continuation_id: str, tenant: str) -> None:
        async with self._guard("finish_continuation"):
            reply = await self._finish(keys=[record_key(continuation_id)], args=[tenant])
            ids_json = self._check(reply, continuation_id)[1]
            await self._drop_index(tenant, continuation_id, ids_json)

    async def cancel_continuation(self, continuation_id: str, tenant: str) -> bool:
        async with self._guard("cancel_continuation"):
            reply = await self._cancel(keys=[record_key(continuation_id)], args=[tenant, _f(time.time())])
            ids_json = self._check(reply, continuation_id)[1]
            await self._drop_index(tenant, continuation_id, ids_json)
        return True

    async def find_continuation_by_tool_call(self, tenant: str, tool_call_id: str) -> str | None:
        async with self._guard("find_continuation_by_tool_call"):
            raw = cast(bytes | None, await self._r.get(tenant_key(tenant, "tc", tool_call_id)))
        return None if raw is None else raw.decode()

    # -- ledger ----------------------------------------------------------------------------------
    async def ledger_get(self, tenant: str, tool_call_id: str) -> dict[str, Any] | None:
        async with self._guard("ledger_get"):
            raw = await self._r.get(tenant_key(tenant, "ledger", tool_call_id))
        return None if raw is None else orjson.loads(raw)

    async def ledger_put(self, tenant: str, tool_call_id: str, record: dict[str, Any], ttl_s: int) -> None:
        raw, ex = orjson.dumps(record), check_ttl(ttl_s)
        async with self._guard("ledger_put"):
            await self._r.set(tenant_key(tenant, "ledger", tool_call_id), raw, ex=ex)

    # -- artifacts -------------------------------------------------------------------------------
    async def put_artifacts(self, tenant: str, items: dict[str, dict[str, Any]], ttl_s: int) -> None:
        if not items:
            return
        ex = check_ttl(ttl_s)
        encoded = {tenant_key(tenant, "art", tc): orjson.dumps(a) for tc, a in items.items()}
        async with self._guard("put_artifacts"), self._r.pipeline(transaction=False) as pipe:
            for key, raw in encoded.items():
                pipe.set(key, raw, ex=ex)
            await pipe.execute()

    async def get_artifacts(self, tenant: str, ids: list[str]) -> dict[str, dict[str, Any]]:
        if not ids:
            return {}
        async with self._guard("get_artifacts"):
            # One MGET: all of a tenant's artifact keys share its hash tag (cluster-safe).
            raws = await self._r.mget([tenant_key(tenant, "art", tc) for tc in ids])
        return {tc: orjson.loads(raw) for tc, raw in zip(ids, raws, strict=True) if raw is not None}

    # -- audit -----------------------------------------------------------------------------------
    async def append_audit(self, entry: dict[str, Any]) -> None:
        tenant, entry = audit_entry(entry, time.time())
        raw = orjson.dumps(entry)
        key = tenant_key(tenant, "audit")
        async with self._guard("append_audit"), self._r.pipeline(transaction=True) as pipe:
            pipe.rpush(key, raw)
            pipe.ltrim(key, -self._audit_max, -1)
            await pipe.execute()

    async def read_audit(self, tenant: str, limit: int = 100) -> list[dict[str, Any]]:
        if limit <= 0:
            return []
        async with self._guard("read_audit"):
            raws = await self._r.lrange(tenant_key(tenant, "audit"), -limit, -1)
        return [orjson.loads(raw) for raw in raws]

    # -- health ----------------------------------------------------------------------------------
    async def health_report(self, target: str, failed: bool, threshold: int, cooldown_s: float) -> float | None:
        fails, open_ = health_keys(target)
        async with self._guard("health_report"):
            if not failed:
                await self._r.delete(fails, open_)  # one command, one slot
                return None
            until = time.time() + cooldown_s
            raw = await self._health_fail(
                keys=[fails, open_],
                args=[int(threshold), max(1, int(failure_window(cooldown_s) * 1000)), _f(until),
                      max(1, int(cooldown_s * 1000))],
            )
        return None if raw is None else float(raw)

    async def health_open_until(self, target: str) -> float | None:
        async with self._guard("health_open_until"):
            raw = await self._r.get(health_keys(target)[1])
        if raw is None:
            return None
        until = float(raw)
        return until if until > time.time() else None
