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

Deployments (gateway/store/redis_connect.py): one server, a Sentinel-managed master, or a
Cluster. Keys used together share a hash tag, so every script and MGET touches one slot; the
only write that spans two slots (a pause: its record, and its tenant's tool-call index) is
sent as one pipeline per owning node.

Durability (``wait_replicas`` > 0): a pause, a claim and a ledger entry are followed by ``WAIT
N timeout`` in the same pipeline, hence on the same connection to the node that owns the key,
and acknowledged only when N replicas confirmed it, so a failover cannot lose what a client was
told. A shortfall is ``ReplicationUnconfirmed`` (a ``StoreUnavailable``: a 503) and is cleaned
up: an unconfirmed pause is deleted (best effort; its id was never given out), an unconfirmed
claim released; an unconfirmed ledger entry is kept, because the tool did run and the entry can
only prevent a second run.

Outages fail fast: bounded connect/read timeouts, a single retry (for a pooled connection the
server dropped) and a deadline over each whole operation; every connection, timeout, failover
(CLUSTERDOWN, TRYAGAIN, READONLY, MASTERDOWN), authentication or permission error surfaces as
``StoreUnavailable`` with a message that never contains a credential.
Time comes from the replica's clock (``time.time()``); leases and cooldowns are seconds long,
so NTP-level skew between replicas does not matter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, cast

import orjson
from redis.exceptions import (
    AskError,
    AuthenticationWrongNumberOfArgsError,
    ClusterDownError,
    MovedError,
    NoPermissionError,
    NoScriptError,
    ReadOnlyError,
    RedisClusterException,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.config.model import StoreSentinel, StoreTls
from gateway.store import redis_listing as listing
from gateway.store import redis_scripts as scripts
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
from gateway.store.redis_connect import connect
from gateway.store.redis_outbox import RedisOutbox

PREFIX = "loopgate:"
log = logging.getLogger("loopgate.store")

# Redis errors that mean "not available right now" (an outage, a failover in progress, a
# misconfigured credential): a 503 for this request, never a 500 with a traceback.
_UNAVAILABLE: tuple[type[BaseException], ...] = (
    RedisConnectionError, RedisTimeoutError, OSError, ClusterDownError, TryAgainError, ReadOnlyError,
    RedisClusterException, NoPermissionError, AuthenticationWrongNumberOfArgsError, MovedError, AskError,
)

Build = Callable[[Any], None]


def _describe(exc: BaseException) -> str:
    """A short, credential-free cause for logs and errors.

    redis-py's "no master found" text embeds the whole client repr (secrets redacted, but a
    kilobyte long); keep its head and the per-sentinel errors at its end.
    """
    text = str(exc)
    head, sep, rest = text.partition(" : <")
    if sep:
        text = f"{head} ({rest.rpartition(' - ')[2]})" if " - " in rest else head
    return text[:300]


def _evalsha(pipe: Any, script: Any, keys: list[str], args: list[Any]) -> None:
    """Queue a registered script by its SHA (``_run`` loads it on NOSCRIPT)."""
    pipe.evalsha(script.sha, len(keys), *keys, *args)


class ReplicationUnconfirmed(StoreUnavailable):
    """``WAIT`` confirmed fewer replicas than ``store.wait_replicas`` in time: the write is not acknowledged."""


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


def _f(value: float) -> str:
    """A float as a string that round-trips exactly (Lua numbers returned to Redis become integers)."""
    return repr(float(value))


class RedisStore(Store):
    """A ``redis[s][+cluster]://`` or ``unix://`` URL, plus the deployment options of ``store`` (see README)."""

    kind = "redis"

    def __init__(self, url: str, *, username: str | None = None, password: str | None = None,
                 tls: StoreTls | None = None, cluster: bool = False, sentinel: StoreSentinel | None = None,
                 wait_replicas: int = 0, wait_timeout_ms: int = 500, socket_connect_timeout: float = 2.0,
                 socket_timeout: float = 2.0, op_timeout: float = 3.0, max_connections: int = 256,
                 pool_timeout: float = 2.0, audit_max: int = 10_000, health_check_interval: float = 30.0) -> None:
        wait_s = wait_timeout_ms / 1000 if wait_replicas > 0 else 0.0
        self._conn = connect(url, username=username, password=password, tls=tls, cluster=cluster, sentinel=sentinel,
                             socket_connect_timeout=socket_connect_timeout,
                             # A WAIT holds the connection for up to its timeout: the read must outlast it.
                             socket_timeout=max(socket_timeout, wait_s + 1.0) if wait_s else socket_timeout,
                             max_connections=max_connections, pool_timeout=pool_timeout,
                             health_check_interval=health_check_interval)
        self._r = self._conn.client
        self.description = self._conn.description
        # A deadline for each whole operation: redis-py retries at the command and the connect level,
        # so against a hung server the socket timeouts alone would add up to several times their value.
        self._op_timeout = op_timeout
        self._durable_timeout = op_timeout + wait_s
        self._wait_replicas = max(0, int(wait_replicas))
        self._wait_timeout_ms = max(1, int(wait_timeout_ms))
        self._audit_max = audit_max
        # Registered once: each call is an EVALSHA, with a transparent SCRIPT LOAD after a flush/failover.
        self._save = self._r.register_script(scripts.SAVE)
        self._claim = self._r.register_script(scripts.CLAIM)
        self._release = self._r.register_script(scripts.RELEASE)
        self._finish = self._r.register_script(scripts.FINISH)
        self._unfinish = self._r.register_script(scripts.UNFINISH)
        self._cancel = self._r.register_script(scripts.CANCEL)
        self._unindex = self._r.register_script(scripts.UNINDEX)
        self._audit = self._r.register_script(scripts.AUDIT)
        self._health_fail = self._r.register_script(scripts.HEALTH_FAIL)
        self._page = self._r.register_script(listing.PAGE)
        self._list_add = self._r.register_script(listing.ADD)
        self._scripts: tuple[Any, ...] = (self._save, self._claim, self._release, self._finish, self._unfinish,
                                          self._cancel, self._unindex, self._audit, self._health_fail, self._page,
                                          self._list_add)

    @asynccontextmanager
    async def _guard(self, op: str, durable: bool = False) -> AsyncIterator[None]:
        """Turn "Redis is not there" into ``StoreUnavailable``; other Redis errors are bugs and propagate."""
        deadline = self._durable_timeout if durable else self._op_timeout
        try:
            async with asyncio.timeout(deadline):
                yield
        except _UNAVAILABLE as exc:  # builtin TimeoutError is an OSError
            cause = _describe(exc) or f"no answer within {deadline}s"  # our deadline has no message
            raise StoreUnavailable(f"redis unavailable during {op}: {cause}") from exc

    async def _run(self, key: str, build: Build, durable: bool) -> tuple[list[Any], int | None]:
        """Run ``build``'s commands as one pipeline on the node owning ``key``; with durability, then ``WAIT``.

        Returns the replies and the number of replicas ``WAIT`` confirmed (None without durability).
        One pipeline is one connection, which is what ``WAIT`` counts. Scripts go in as plain
        EVALSHA (no SCRIPT EXISTS round trip first); a node that lacks them (a flush, a promoted
        replica: the script cache is not replicated) answers NOSCRIPT before running anything of
        that script, gets them loaded and the pipeline runs again (its other writes are idempotent).
        On a Cluster, an answer that says the slot is elsewhere now (MOVED, READONLY, a dead node:
        a failover or a reshard) re-reads the slot map and, only if the slot has a new owner,
        tries once more there: the old owner no longer accepts writes for it, so nothing runs twice.
        """
        wait = durable and self._wait_replicas > 0
        client = await self._conn.owner(key)
        loaded = moved = False
        while True:
            try:
                async with client.pipeline(transaction=False) as pipe:
                    build(pipe)
                    if wait:
                        pipe.execute_command("WAIT", self._wait_replicas, self._wait_timeout_ms)
                    replies = await pipe.execute()
            except NoScriptError:
                if loaded:
                    raise
                loaded = True
                for script in self._scripts:
                    await client.script_load(script.script)
                continue
            except (MovedError, AskError, RedisConnectionError, ReadOnlyError):
                if not self._conn.cluster or moved:
                    raise
                moved = True
                with contextlib.suppress(Exception):
                    await self._conn.refresh()
                moved_to = await self._conn.owner(key)
                if moved_to is client:
                    raise
                client = moved_to
                continue
            if wait:
                return list(replies[:-1]), int(replies[-1])
            return list(replies), None

    async def _script(self, script: Any, keys: list[str], args: list[Any], durable: bool) -> tuple[Any, int | None]:
        """One script call; waited for through ``_run`` only when durability is on (else one plain EVALSHA)."""
        if not (durable and self._wait_replicas > 0):
            return await script(keys=keys, args=args), None

        def call(pipe: Any) -> None:
            _evalsha(pipe, script, keys, args)

        replies, acked = await self._run(keys[0], call, True)
        return replies[0], acked

    def _confirmed(self, acked: int | None) -> bool:
        return acked is None or acked >= self._wait_replicas

    def _unconfirmed(self, op: str, acked: int | None) -> ReplicationUnconfirmed:
        return ReplicationUnconfirmed(
            f"redis did not confirm {op} on {self._wait_replicas} replica(s) within {self._wait_timeout_ms} ms "
            f"({acked or 0} confirmed); it was not acknowledged")

    async def unavailable_reason(self) -> str | None:
        try:
            async with self._guard("ping"):
                await self._r.ping()
        except StoreUnavailable as exc:
            return str(exc)
        except Exception as exc:  # an unexpected reply is as unready as no reply; never raise from a probe
            return f"{type(exc).__name__}: {exc}"
        return None

    async def ping(self) -> bool:
        try:
            async with self._guard("ping"):
                return bool(await self._r.ping())
        except Exception:
            return False

    def outbox(self, name: str) -> RedisOutbox:
        return RedisOutbox(self._r, self._guard, name)  # stateless: all state is in Redis

    async def aclose(self) -> None:
        await self._conn.aclose()

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
        await listing.remove(self, tenant, continuation_id)
        if ids:
            keys = [tenant_key(tenant, "tc", tc) for tc in ids]
            await self._unindex(keys=keys, args=[continuation_id])

    async def save_continuation(self, c: Continuation, ttl_s: int) -> None:
        ids = c.tool_call_ids
        ex = check_ttl(ttl_s)
        args: list[bytes | str | int | float] = [
            c.tenant, c.status, "" if c.claimed_until is None else _f(c.claimed_until), c.to_bytes(),
            orjson.dumps(ids), ex]
        rec = record_key(c.id)
        index = [tenant_key(c.tenant, "tc", tc) for tc in ids]

        def write_record(pipe: Any) -> None:
            _evalsha(pipe, self._save, [rec], args)

        def write_index(pipe: Any) -> None:
            for key in index:
                pipe.set(key, c.id, ex=ex)
            listing.queue_add(pipe, self._list_add, c, ex)

        def write_both(pipe: Any) -> None:
            write_record(pipe)
            write_index(pipe)

        async with self._guard("save_continuation", durable=True):
            try:
                if self._conn.cluster and (index or c.summary is not None):
                    # Two slots (the record's, the tenant's): one pipeline (and WAIT) per owning node.
                    # Both run to completion before any clean-up, so none lands after the clean-up.
                    done = await asyncio.gather(self._run(rec, write_record, True),
                                                self._run(listing.listing_keys(c.tenant)[0], write_index, True),
                                                return_exceptions=True)
                    failed = next((d for d in done if isinstance(d, BaseException)), None)
                    if failed is not None:
                        raise failed
                    acked = [cast(tuple[list[Any], int | None], d)[1] for d in done]
                else:
                    # One round trip: the record (atomic, with its TTL), every index entry, the WAIT.
                    acked = [(await self._run(rec, write_both, True))[1]]
            except _UNAVAILABLE:
                # Unreachable: a clean-up would only wait out another deadline. Whatever part landed
                # expires with its TTL and is harmless, since the client never got its id.
                raise
            except Exception:
                await self._forget(c, rec, index)
                raise
            if not all(self._confirmed(a) for a in acked):
                await self._forget(c, rec, index)
                raise self._unconfirmed("the pause", min(a or 0 for a in acked))

    async def _forget(self, c: Continuation, rec: str, index: list[str]) -> None:
        """Best effort: a pause that was not acknowledged must not stay resumable (the client never got its id)."""
        try:
            async with asyncio.timeout(self._op_timeout):
                await self._r.delete(rec)
                if index:
                    await self._unindex(keys=index, args=[c.id])
        except Exception as exc:  # the store is failing already: the record expires with its TTL
            log.debug("could not delete unacknowledged continuation %s: %s", c.id, exc)

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
        rec = record_key(continuation_id)

        async with self._guard("claim_continuation", durable=True):
            reply, acked = await self._script(self._claim, [rec], [tenant, _f(now), _f(until)], True)
            if reply[0] == b"ok" and not self._confirmed(acked):
                # Not acknowledged, so not taken: leave it resumable (a failed release expires with the lease).
                with contextlib.suppress(Exception):
                    await self._release(keys=[rec], args=[tenant])
                raise self._unconfirmed("the claim", acked)
        c = Continuation.from_bytes(self._check(reply, continuation_id)[1])
        c.status = "claimed"
        c.claimed_until = until
        return c

    async def release_continuation(self, continuation_id: str, tenant: str) -> None:
        async with self._guard("release_continuation"):
            reply = await self._release(keys=[record_key(continuation_id)], args=[tenant])
        self._check(reply, continuation_id)

    async def finish_continuation(self, continuation_id: str, tenant: str) -> None:
        """Mark a resume done; with ``wait_replicas``, only once replicas confirm it.

        An unconfirmed finish could be undone by a failover (the record back at ``claimed``, and
        resumable a second time once the lease ends), so it is reverted to resumable and reported
        as unavailable: the client is told the resume failed and may retry; approved tools are in
        the ledger, so none runs twice.
        """
        rec = record_key(continuation_id)
        async with self._guard("finish_continuation", durable=True):
            reply, acked = await self._script(self._finish, [rec], [tenant], True)
            if reply[0] == b"ok" and not self._confirmed(acked):
                with contextlib.suppress(Exception):
                    await self._unfinish(keys=[rec], args=[tenant])
                raise self._unconfirmed("the end of the resume", acked)
            ids_json = self._check(reply, continuation_id)[1]
            await self._drop_index(tenant, continuation_id, ids_json)

    async def cancel_continuation(self, continuation_id: str, tenant: str) -> bool:
        async with self._guard("cancel_continuation"):
            reply = await self._cancel(keys=[record_key(continuation_id)], args=[tenant, _f(time.time())])
            ids_json = self._check(reply, continuation_id)[1]
            await self._drop_index(tenant, continuation_id, ids_json)
        return True

    async def list_continuations(self, tenant: str, limit: int,
                                 before: tuple[float, str] | None = None) -> tuple[list[dict[str, Any]], bool]:
        async with self._guard("list_continuations"):
            return await listing.page(self, self._page, tenant, time.time(), limit, before)

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
        key = tenant_key(tenant, "ledger", tool_call_id)

        async with self._guard("ledger_put", durable=True):
            if self._wait_replicas > 0:
                _, acked = await self._run(key, lambda pipe: pipe.set(key, raw, ex=ex), True)
            else:
                await self._r.set(key, raw, ex=ex)
                acked = None
        if not self._confirmed(acked):
            # Kept: the tool did run, and the entry can only stop a second run.
            raise self._unconfirmed("the tool ledger entry", acked)

    # -- artifacts -------------------------------------------------------------------------------
    async def put_artifacts(self, tenant: str, items: dict[str, dict[str, Any]], ttl_s: int) -> None:
        if not items:
            return
        ex = check_ttl(ttl_s)
        encoded = {tenant_key(tenant, "art", tc): orjson.dumps(a) for tc, a in items.items()}

        def put(pipe: Any) -> None:
            for key, raw in encoded.items():
                pipe.set(key, raw, ex=ex)

        async with self._guard("put_artifacts"):  # one tenant, one slot, one pipeline
            await self._run(next(iter(encoded)), put, False)

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
        async with self._guard("append_audit"):
            await self._audit(keys=[key], args=[raw, self._audit_max])

    async def audit_tail(self, tenant: str, skip: int, count: int) -> list[dict[str, Any]]:
        async with self._guard("audit_tail"):
            raws = await self._r.lrange(tenant_key(tenant, "audit"), -(skip + count), -(skip + 1))
        return [orjson.loads(raw) for raw in raws]

    async def read_audit(self, tenant: str, limit: int = 100) -> list[dict[str, Any]]:
        return await self.audit_tail(tenant, 0, limit) if limit > 0 else []

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
