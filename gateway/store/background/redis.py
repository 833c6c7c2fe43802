"""Background runs in Redis, shared by every replica (the contract: base.py).

Key layout (the ``{bg:<id>}`` hash tag keeps both keys of a run in one Cluster slot)::

    loopgate:{bg:<id>}:run   hash  t=tenant s=status o=owner lu=lease_until c=cancel flag st=stream
                                   r=snapshot (JSON) ca=created_at n=events stored f=first sequence number
                                   b=bytes of events stored
    loopgate:{bg:<id>}:ev    list  the stored events, oldest first (expires with the run)

Every owner operation is one Lua script that checks the owner and the status before writing
(the fence), and returns the cancel flag, so a cancel set from any replica reaches the owner on
its next write or heartbeat. Snapshots and events are opaque blobs to the scripts. With
``store.wait_replicas``, the creation (its id is then given out) and the end of a run are
acknowledged only once replicas confirm them (``WAIT``), like a pause.
"""

from __future__ import annotations

from typing import Any, cast

import orjson

from gateway.store.background.base import BackgroundRun, BackgroundStore, EventsLimit, RunLost, RunNotFound
from gateway.store.redis_client.client import RedisIO
from gateway.store.redis_client.keys import PREFIX, esc, num
from gateway.store.ttl import check_ttl

# Owner operations. ARGV[1] = owner. Replies: {'ok', cancel flag} | {'lost', status} | {'gone'}.
_OWNED = """
local v = redis.call('HMGET', KEYS[1], 'o', 's', 'c')
if not v[2] then return {'gone'} end
if v[1] ~= ARGV[1] or (v[2] ~= 'queued' and v[2] ~= 'in_progress') then return {'lost', v[2]} end
local cancel = v[3] or ''
"""

# KEYS run, ev; ARGV tenant, status, owner, lease_until, stream, snapshot, created_at, ttl
CREATE = """
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('HSET', KEYS[1], 't', ARGV[1], 's', ARGV[2], 'o', ARGV[3], 'lu', ARGV[4], 'st', ARGV[5],
           'r', ARGV[6], 'ca', ARGV[7], 'n', 0, 'f', 0, 'b', 0, 'c', '')
redis.call('EXPIRE', KEYS[1], ARGV[8])
return 1
"""

# KEYS run; ARGV owner, lease_until
BEAT = _OWNED + """
redis.call('HSET', KEYS[1], 'lu', ARGV[2])
return {'ok', cancel}
"""

# KEYS run; ARGV owner, status, snapshot, lease_until
UPDATE = _OWNED + """
redis.call('HSET', KEYS[1], 's', ARGV[2], 'r', ARGV[3], 'lu', ARGV[4])
return {'ok', cancel}
"""

# KEYS run, ev; ARGV owner, lease_until, max_events, max_bytes, nbytes, first_seq, event...
APPEND = _OWNED + """
local n = tonumber(redis.call('HGET', KEYS[1], 'n') or '0')
local b = tonumber(redis.call('HGET', KEYS[1], 'b') or '0')
local k = #ARGV - 6
if n + k > tonumber(ARGV[3]) or b + tonumber(ARGV[5]) > tonumber(ARGV[4]) then return {'limit', cancel} end
redis.call('RPUSH', KEYS[2], unpack(ARGV, 7))
if n == 0 then
  redis.call('HSET', KEYS[1], 'f', ARGV[6])
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
end
redis.call('HSET', KEYS[1], 'n', n + k, 'b', b + tonumber(ARGV[5]), 'lu', ARGV[2])
return {'ok', cancel}
"""

# KEYS run, ev; ARGV owner, status, snapshot, ttl, last event ('' for none), its sequence number
FINISH = _OWNED + """
redis.call('HSET', KEYS[1], 's', ARGV[2], 'r', ARGV[3], 'lu', '0')
if ARGV[5] ~= '' then
  local n = tonumber(redis.call('HGET', KEYS[1], 'n') or '0')
  redis.call('RPUSH', KEYS[2], ARGV[5])
  if n == 0 then redis.call('HSET', KEYS[1], 'f', ARGV[6]) end
  redis.call('HSET', KEYS[1], 'n', n + 1)
  redis.call('HINCRBY', KEYS[1], 'b', string.len(ARGV[5]))
end
redis.call('EXPIRE', KEYS[1], ARGV[4])
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('EXPIRE', KEYS[2], ARGV[4]) end
return {'ok', cancel}
"""

# KEYS run; ARGV tenant. Replies {'ok', status} | {'nf'}.
CANCEL = """
local v = redis.call('HMGET', KEYS[1], 't', 's')
if not v[1] or v[1] ~= ARGV[1] then return {'nf'} end
if v[2] == 'queued' or v[2] == 'in_progress' then redis.call('HSET', KEYS[1], 'c', '1') end
return {'ok', v[2]}
"""

# KEYS run, ev; ARGV tenant, now, seen_events, status, snapshot, event ('' for none), ttl
EXPIRE = """
local v = redis.call('HMGET', KEYS[1], 't', 's', 'lu', 'n')
if not v[1] or v[1] ~= ARGV[1] then return {'nf'} end
if v[2] ~= 'queued' and v[2] ~= 'in_progress' then return {'no'} end
if tonumber(v[3] or '0') >= tonumber(ARGV[2]) or tonumber(v[4] or '0') ~= tonumber(ARGV[3]) then return {'no'} end
redis.call('HSET', KEYS[1], 's', ARGV[4], 'r', ARGV[5], 'lu', '0', 'o', '')
if ARGV[6] ~= '' then
  redis.call('RPUSH', KEYS[2], ARGV[6])
  redis.call('HINCRBY', KEYS[1], 'n', 1)
  redis.call('HINCRBY', KEYS[1], 'b', string.len(ARGV[6]))
end
redis.call('EXPIRE', KEYS[1], ARGV[7])
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('EXPIRE', KEYS[2], ARGV[7]) end
return {'ok'}
"""

# KEYS run, ev; ARGV tenant, after_seq, limit. Replies {'ok', event...} | {'nf'}.
EVENTS = """
local v = redis.call('HMGET', KEYS[1], 't', 'f')
if not v[1] or v[1] ~= ARGV[1] then return {'nf'} end
local start = tonumber(ARGV[2]) + 1 - tonumber(v[2] or '0')
if start < 0 then start = 0 end
local limit = tonumber(ARGV[3])
if limit <= 0 then return {'ok'} end
local out = redis.call('LRANGE', KEYS[2], start, start + limit - 1)
table.insert(out, 1, 'ok')
return out
"""

# KEYS run, ev; ARGV tenant
DELETE = """
local t = redis.call('HGET', KEYS[1], 't')
if not t or t ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
"""

_FIELDS = ["t", "s", "o", "lu", "st", "r", "ca", "c", "n", "f"]


def run_keys(run_id: str) -> list[str]:
    base = f"{PREFIX}{{bg:{esc(run_id)}}}"
    return [f"{base}:run", f"{base}:ev"]


class RedisBackground(BackgroundStore):
    """Uses the connections, deadlines and error mapping of the store's ``RedisIO``."""

    def __init__(self, io: RedisIO) -> None:
        self._io = io
        # Registered with the io: its waited pipelines load them again on NOSCRIPT.
        self._create = io.register(CREATE)
        self._beat = io.register(BEAT)
        self._update = io.register(UPDATE)
        self._append = io.register(APPEND)
        self._finish = io.register(FINISH)
        self._cancel = io.register(CANCEL)
        self._expire = io.register(EXPIRE)
        self._events = io.register(EVENTS)
        self._delete = io.register(DELETE)

    @staticmethod
    def _owned(reply: list[Any], run_id: str) -> bool:
        code = reply[0]
        if code == b"ok":
            return bool(reply[1] == b"1")
        if code == b"limit":
            raise EventsLimit(f"background response {run_id!r} reached its stored-events cap")
        raise RunLost(run_id, reply[1].decode() if len(reply) > 1 and reply[1] else None)

    async def create(self, run: BackgroundRun, ttl_s: int) -> None:
        """With ``store.wait_replicas``, acknowledged only once replicas have it (its id is given out next)."""
        io = self._io
        async with io.guard("background_create", durable=True):
            _, acked = await io.script(self._create, run_keys(run.id), [
                run.tenant, run.status, run.owner, num(run.lease_until), "1" if run.stream else "",
                orjson.dumps(run.response), num(run.created_at), check_ttl(ttl_s)], True)
        if not io.confirmed(acked):
            raise io.unconfirmed("the background response", acked)

    async def heartbeat(self, run_id: str, owner: str, lease_until: float) -> bool:
        async with self._io.guard("background_heartbeat"):
            reply = await self._beat(keys=run_keys(run_id)[:1], args=[owner, num(lease_until)])
        return self._owned(reply, run_id)

    async def update(self, run_id: str, owner: str, status: str, response: dict[str, Any],
                     lease_until: float) -> bool:
        async with self._io.guard("background_update"):
            reply = await self._update(keys=run_keys(run_id)[:1],
                                       args=[owner, status, orjson.dumps(response), num(lease_until)])
        return self._owned(reply, run_id)

    async def append(self, run_id: str, owner: str, events: list[bytes], first_seq: int, lease_until: float,
                     max_events: int, max_bytes: int) -> bool:
        if not events:
            return await self.heartbeat(run_id, owner, lease_until)
        size = sum(len(e) for e in events)
        async with self._io.guard("background_append"):
            reply = await self._append(keys=run_keys(run_id), args=[
                owner, num(lease_until), max_events, max_bytes, size, first_seq, *events])
        return self._owned(reply, run_id)

    async def finish(self, run_id: str, owner: str, status: str, response: dict[str, Any], ttl_s: int,
                     event: bytes | None = None, seq: int = 0) -> None:
        io = self._io
        async with io.guard("background_finish", durable=True):
            reply, acked = await io.script(self._finish, run_keys(run_id), [
                owner, status, orjson.dumps(response), check_ttl(ttl_s), event or b"", int(seq)], True)
        self._owned(reply, run_id)
        if not io.confirmed(acked):
            raise io.unconfirmed("the end of the background response", acked)

    async def get(self, run_id: str, tenant: str) -> BackgroundRun:
        async with self._io.guard("background_get"):
            values = cast(list[bytes | None], await self._io.client.hmget(run_keys(run_id)[0], _FIELDS))
        t, s, o, lu, st, r, ca, c, n, f = values
        if t is None or s is None or r is None or t.decode() != tenant:
            raise RunNotFound(run_id)
        return BackgroundRun(id=run_id, tenant=tenant, status=s.decode(), owner=(o or b"").decode(),
                             lease_until=float(lu or 0), stream=st == b"1", response=orjson.loads(r),
                             created_at=float(ca or 0), cancel_requested=c == b"1", events=int(n or 0),
                             first_seq=int(f or 0))

    async def events(self, run_id: str, tenant: str, after_seq: int, limit: int) -> list[bytes]:
        async with self._io.guard("background_events"):
            reply = await self._events(keys=run_keys(run_id), args=[tenant, int(after_seq), int(limit)])
        if reply[0] != b"ok":
            raise RunNotFound(run_id)
        return list(reply[1:])

    async def request_cancel(self, run_id: str, tenant: str) -> str:
        async with self._io.guard("background_cancel"):
            reply = await self._cancel(keys=run_keys(run_id)[:1], args=[tenant])
        if reply[0] != b"ok":
            raise RunNotFound(run_id)
        return str(reply[1].decode())

    async def expire(self, run_id: str, tenant: str, now: float, seen_events: int, status: str,
                     response: dict[str, Any], event: bytes | None, ttl_s: int) -> bool:
        async with self._io.guard("background_expire"):
            reply = await self._expire(keys=run_keys(run_id), args=[
                tenant, num(now), int(seen_events), status, orjson.dumps(response), event or b"", check_ttl(ttl_s)])
        if reply[0] == b"nf":
            raise RunNotFound(run_id)
        return bool(reply[0] == b"ok")

    async def delete(self, run_id: str, tenant: str) -> bool:
        async with self._io.guard("background_delete"):
            return bool(await self._delete(keys=run_keys(run_id), args=[tenant]))

