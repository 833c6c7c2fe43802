"""Continuations, the tool ledger and artifacts on Redis (part of ``RedisStore``).

Key layout (the ``{...}`` part is the Redis Cluster hash tag)::

    loopgate:{<continuation id>}:rec          hash  t=tenant s=status cu=claimed_until b=body ids=[tool_call_id]
                                              r=result (once resumed)
    loopgate:{t:<tenant>}:tc:<tool_call_id>   string -> continuation id (resume way A index), or
                                              "*ambiguous* <id> <id>..." when several live ones hold it
    loopgate:{t:<tenant>}:ledger:<tool_call_id>  string, JSON execution record
    loopgate:{t:<tenant>}:art:<tool_call_id>  string, JSON artifact (one MGET for many ids)

Every write sets its TTL in the same command or script, so nothing lives forever by accident.
The continuation's state machine (claim, release, finish, cancel) runs as Lua scripts on the one
record key: the check and the change are atomic, and the tenant comparison happens inside the
script. The body is an opaque blob the scripts never parse (no cjson round trip can alter the
transcript). A pause writes its record and its tenant's keys (the tool-call index, the listing), and the end of a
resume changes the record and drops its tenant's entries: where one server holds every key (a single
server, Sentinel) each is one script (``PAUSE``, ``FINISH_ALL``), one round trip; on a Cluster, one
script per slot (the pause's two as one pipeline per owning node). Way A's lookup, its read of the record and
its claim are one script there too (``FIND_CLAIM``: the claim is released by one more round trip only when the
resume is then refused); on a Cluster the lookup and the read are two commands and the claim a third, given the
continuation already read (``known``), so it does not send its body again.

Durability (``wait_replicas`` > 0, see ``RedisIO``): a pause, a claim and a ledger entry are
acknowledged only when confirmed. An unconfirmed pause is deleted (best effort; its id was never
given out), an unconfirmed claim released; an unconfirmed start of an approved call is deleted
(the tool does not run); an unconfirmed ledger result is kept, because the tool did run and the
entry can only prevent a second run.
Time comes from the replica's clock (``time.time()``); leases are seconds long, so NTP-level
skew between replicas does not matter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, cast

import orjson

from gateway.store.continuations import redis_listing as listing
from gateway.store.continuations import redis_scripts as scripts
from gateway.store.continuations.base import (
    AMBIGUOUS_TOOL_CALL,
    MAX_HOLDERS,
    RESUMED_TOOL_CALL,
    Continuation,
    ContinuationConflict,
    ContinuationNotFound,
    ContinuationStatus,
    ContinuationStore,
    claimable,
    claimed,
    indexed,
    warn_ambiguous,
)
from gateway.store.redis_client.client import UNAVAILABLE, RedisIO, evalsha
from gateway.store.redis_client.keys import RECORD_HEAD, RECORD_TAIL, num, record_key, tenant_key
from gateway.store.ttl import check_ttl

log = logging.getLogger("loopgate.store")


_RECORD_FIELDS = ["t", "s", "cu", "b", "r"]


def _loaded(continuation_id: str, tenant: str, fields: list[bytes | None]) -> Continuation:
    """A record's fields (``_RECORD_FIELDS``) as the continuation; not found unless live and the tenant's."""
    t, s, cu, body, result = fields
    if t is None or s is None or body is None or t.decode() != tenant or s == b"cancelled":
        raise ContinuationNotFound(continuation_id)
    c = Continuation.from_bytes(body)
    c.status = cast(ContinuationStatus, s.decode())
    c.claimed_until = float(cu) if cu else None
    c.result = result
    return c


class RedisContinuations(ContinuationStore):
    """The continuation part of ``RedisStore``, on its ``RedisIO``."""

    def __init__(self, io: RedisIO) -> None:
        self.io = io
        self._save = io.register(scripts.SAVE)
        self._claim = io.register(scripts.CLAIM)
        self._release = io.register(scripts.RELEASE)
        self._finish = io.register(scripts.FINISH)
        self._unfinish = io.register(scripts.UNFINISH)
        self._cancel = io.register(scripts.CANCEL)
        self._unindex = io.register(scripts.UNINDEX)
        self._index = io.register(scripts.INDEX)
        self._drop = io.register(scripts.DROP)
        self._pause = io.register(scripts.PAUSE)
        self._finish_all = io.register(scripts.FINISH_ALL)
        self._page = io.register(listing.PAGE)
        self._list_add = io.register(listing.ADD)
        self._find_claim = io.register(scripts.FIND_CLAIM)

    # -- continuations ---------------------------------------------------------------------------
    @staticmethod
    def _check(reply: list[Any], continuation_id: str) -> list[Any]:
        code = reply[0]
        if code == b"ok":
            return reply
        if code == b"conflict":
            raise ContinuationConflict(continuation_id, reply[1].decode())
        raise ContinuationNotFound(continuation_id)

    async def _drop_index(self, tenant: str, continuation_id: str, ids_json: bytes | None, resumed: bool) -> None:
        """The tenant's entries of a resumed or cancelled continuation: its listing entry, its way-A index (a
        resumed one's own entries stay, as ``RESUMED_TOOL_CALL`` ones)."""
        ids = orjson.loads(ids_json) if ids_json else []
        keys = [*listing.listing_keys(tenant), *(tenant_key(tenant, "tc", tc) for tc in ids)]
        await self.io.script(self._drop, keys, [continuation_id, AMBIGUOUS_TOOL_CALL,
                                                RESUMED_TOOL_CALL if resumed else ""], False)

    async def save_continuation(self, c: Continuation, ttl_s: int) -> None:
        ids = c.tool_call_ids
        ex = check_ttl(ttl_s)
        record = [c.tenant, c.status, "" if c.claimed_until is None else num(c.claimed_until), c.to_bytes(),
                  orjson.dumps(ids), ex]
        rec = record_key(c.id)
        index = [tenant_key(c.tenant, "tc", tc) for tc in ids]
        async with self.io.guard("save_continuation", durable=True):
            try:
                if self.io.cluster and (index or c.summary is not None):
                    acked = await self._save_per_slot(c, rec, record, index, ex)
                elif self.io.cluster:  # nothing of the tenant's to write
                    acked = [(await self.io.script(self._save, [rec], record, True))[1]]
                else:
                    # One script, one round trip (with the WAIT when durable): the record with its TTL, every
                    # index entry (an id another live continuation of the tenant holds becomes ambiguous), the
                    # listing entry.
                    summary = b"" if c.summary is None else orjson.dumps(c.summary)
                    keys = [rec, *listing.listing_keys(c.tenant), *index]
                    args = [*record, c.id, AMBIGUOUS_TOOL_CALL, MAX_HOLDERS, listing.score(c), summary,
                            RESUMED_TOOL_CALL]
                    acked = [(await self.io.script(self._pause, keys, args, True))[1]]
            except UNAVAILABLE:
                # Unreachable: a clean-up would only wait out another deadline. Whatever part landed
                # expires with its TTL and is harmless, since the client never got its id.
                raise
            except Exception:
                await self._forget(c, rec, index)
                raise
            if not all(self.io.confirmed(a) for a in acked):
                await self._forget(c, rec, index)
                raise self.io.unconfirmed("the pause", min(a or 0 for a in acked))

    async def _save_per_slot(self, c: Continuation, rec: str, record: list[Any], index: list[str],
                             ex: int) -> list[int | None]:
        """A Cluster's pause: the record on its node, the index and listing entries on the tenant's, each one
        pipeline (and WAIT). Both run to completion before any clean-up, so none lands after the clean-up."""
        def write_record(pipe: Any) -> None:
            evalsha(pipe, self._save, [rec], record)

        def write_index(pipe: Any) -> None:
            if index:  # an id another live continuation of the tenant holds becomes ambiguous (scripts.INDEX)
                evalsha(pipe, self._index, index, [c.id, ex, AMBIGUOUS_TOOL_CALL, MAX_HOLDERS, RESUMED_TOOL_CALL])
            listing.queue_add(pipe, self._list_add, c, ex)

        done = await asyncio.gather(self.io.run(rec, write_record, True),
                                    self.io.run(listing.listing_keys(c.tenant)[0], write_index, True),
                                    return_exceptions=True)
        failed = next((d for d in done if isinstance(d, BaseException)), None)
        if failed is not None:
            raise failed
        return [cast(tuple[list[Any], int | None], d)[1] for d in done]

    async def _forget(self, c: Continuation, rec: str, index: list[str]) -> None:
        """Best effort: a pause that was not acknowledged must not stay resumable (the client never got its id)."""
        try:
            async with asyncio.timeout(self.io.op_timeout):
                await self.io.command("DEL", rec)
                if index:
                    await self.io.script(self._unindex, index, [c.id, AMBIGUOUS_TOOL_CALL], False)
        except Exception as exc:  # the store is failing already: the record expires with its TTL
            log.debug("could not delete unacknowledged continuation %s: %s", c.id, exc)

    async def get_continuation(self, continuation_id: str, tenant: str) -> Continuation:
        async with self.io.guard("get_continuation"):
            # The client is built without decode_responses: every value is bytes (or None).
            raw = await self.io.command("HMGET", record_key(continuation_id), *_RECORD_FIELDS)
        return _loaded(continuation_id, tenant, cast(list[bytes | None], raw))

    async def find_paused(self, tenant: str, tool_call_ids: list[str],
                          lease_s: float | None = None) -> Continuation | None:
        if not tool_call_ids:
            return None
        # The tenant's index keys share its slot: one lookup, however many ids (a Cluster included).
        keys = [tenant_key(tenant, "tc", tc) for tc in tool_call_ids]
        if self.io.cluster:
            return await self._find_in_two_steps(tenant, keys)
        # One server holds every key: the index, the record and (without WAIT to confirm it) the claim in one
        # script, one round trip (redis_scripts.FIND_CLAIM).
        now = time.time()
        until = now + lease_s if lease_s is not None and self.io.wait_replicas == 0 else None
        args = [tenant, AMBIGUOUS_TOOL_CALL, RECORD_HEAD, RECORD_TAIL, num(now), "" if until is None else num(until),
                RESUMED_TOOL_CALL]
        async with self.io.guard("find_paused"):
            reply, _ = await self.io.script(self._find_claim, keys, args, False)
        for _ in range(reply[1]):
            warn_ambiguous()
        if len(reply) < 8:
            return None  # no id names one, or it is gone (expired, cancelled) between the pause and now
        try:
            c = _loaded(reply[0].decode(), tenant, reply[2:7])
        except ContinuationNotFound:
            return None
        if reply[7] == 1:
            c.held_until = until
        return c

    async def _find_in_two_steps(self, tenant: str, keys: list[str]) -> Continuation | None:
        """A Cluster's way-A lookup: the index (the tenant's slot), then the record (its own slot)."""
        command = self.io.command
        async with self.io.guard("find_paused"):
            held = cast(list[bytes | None], await command("MGET", *keys))
            found = next((cid for value in held if (cid := indexed(None if value is None else value.decode()))),
                         None)
            if found is None:
                return None
            raw = await command("HMGET", record_key(found), *_RECORD_FIELDS)
        try:
            return _loaded(found, tenant, cast(list[bytes | None], raw))
        except ContinuationNotFound:
            return None  # expired or cancelled between the index lookup and the read

    async def claim_continuation(self, continuation_id: str, tenant: str, lease_s: float,
                                 known: Continuation | None = None) -> Continuation:
        now = time.time()
        until = now + lease_s
        rec = record_key(continuation_id)
        args = [tenant, num(now), num(until), "" if claimable(known, continuation_id, tenant) else "1"]
        async with self.io.guard("claim_continuation", durable=True):
            reply, acked = await self.io.script(self._claim, [rec], args, True)
            if reply[0] == b"ok" and not self.io.confirmed(acked):
                # Not acknowledged, so not taken: leave it resumable (a failed release expires with the lease).
                with contextlib.suppress(Exception):
                    await self.io.script(self._release, [rec], [tenant], False)
                raise self.io.unconfirmed("the claim", acked)
        reply = self._check(reply, continuation_id)
        return claimed(known if len(reply) < 2 else Continuation.from_bytes(reply[1]), until)

    async def release_continuation(self, continuation_id: str, tenant: str) -> None:
        async with self.io.guard("release_continuation"):
            reply, _ = await self.io.script(self._release, [record_key(continuation_id)], [tenant], False)
        self._check(reply, continuation_id)

    async def finish_continuation(self, continuation_id: str, tenant: str, result: bytes | None = None,
                                  kept: Continuation | None = None) -> None:
        """Mark a resume done; with ``wait_replicas``, only once replicas confirm it.

        An unconfirmed finish could be undone by a failover (the record back at ``claimed``, and
        resumable a second time once the lease ends), so it is reverted to resumable and reported
        as unavailable: the client is told the resume failed and may retry; approved tools are in
        the ledger, so none runs twice. Hence, waited for, the record keeps its whole body.
        """
        rec = record_key(continuation_id)
        body = b"" if kept is None or self.io.wait_replicas > 0 else kept.to_bytes()
        if kept is not None and not self.io.cluster and self.io.wait_replicas == 0:
            # Nothing to confirm, one server: the record and the tenant's entries in one script.
            keys = [rec, *listing.listing_keys(tenant), *(tenant_key(tenant, "tc", tc) for tc in kept.tool_call_ids)]
            async with self.io.guard("finish_continuation"):
                reply, _ = await self.io.script(self._finish_all, keys, [tenant, result or b"", body, continuation_id,
                                                                        AMBIGUOUS_TOOL_CALL, RESUMED_TOOL_CALL], False)
            self._check(reply, continuation_id)
            return
        async with self.io.guard("finish_continuation", durable=True):
            reply, acked = await self.io.script(self._finish, [rec], [tenant, result or b"", body], True)
            if reply[0] == b"ok" and not self.io.confirmed(acked):
                with contextlib.suppress(Exception):
                    await self.io.script(self._unfinish, [rec], [tenant], False)
                raise self.io.unconfirmed("the end of the resume", acked)
            ids_json = self._check(reply, continuation_id)[1]
            await self._drop_index(tenant, continuation_id, ids_json, resumed=True)

    async def cancel_continuation(self, continuation_id: str, tenant: str) -> bool:
        async with self.io.guard("cancel_continuation"):
            reply, _ = await self.io.script(self._cancel, [record_key(continuation_id)], [tenant, num(time.time())],
                                            False)
            ids_json = self._check(reply, continuation_id)[1]
            await self._drop_index(tenant, continuation_id, ids_json, resumed=False)
        return True

    async def list_continuations(self, tenant: str, limit: int,
                                 before: tuple[float, str] | None = None) -> tuple[list[dict[str, Any]], bool]:
        async with self.io.guard("list_continuations"):
            return await listing.page(self.io, self._page, tenant, time.time(), limit, before)

    async def find_continuation_by_tool_call(self, tenant: str, tool_call_id: str) -> str | None:
        async with self.io.guard("find_continuation_by_tool_call"):
            raw = cast(bytes | None, await self.io.command("GET", tenant_key(tenant, "tc", tool_call_id)))
        return indexed(None if raw is None else raw.decode())

    # -- ledger ----------------------------------------------------------------------------------
    async def ledger_get(self, tenant: str, tool_call_id: str) -> dict[str, Any] | None:
        async with self.io.guard("ledger_get"):
            raw = await self.io.command("GET", tenant_key(tenant, "ledger", tool_call_id))
        return None if raw is None else orjson.loads(raw)

    async def ledger_put(self, tenant: str, tool_call_id: str, record: dict[str, Any], ttl_s: int) -> None:
        raw, ex = orjson.dumps(record), check_ttl(ttl_s)
        key = tenant_key(tenant, "ledger", tool_call_id)

        async with self.io.guard("ledger_put", durable=True):
            if self.io.wait_replicas > 0:
                _, acked = await self.io.run(key, lambda pipe: pipe.set(key, raw, ex=ex), True)
            else:
                await self.io.command("SET", key, raw, "EX", ex)
                acked = None
        if not self.io.confirmed(acked):
            # Kept: the tool did run, and the entry can only stop a second run.
            raise self.io.unconfirmed("the tool ledger entry", acked)

    async def ledger_claim(self, tenant: str, key: str, record: dict[str, Any], ttl_s: int,
                           undo_unconfirmed: bool = False) -> dict[str, Any] | None:
        raw, ex = orjson.dumps(record), check_ttl(ttl_s)
        name = tenant_key(tenant, "ledger", key)
        async with self.io.guard("ledger_claim", durable=True):
            if self.io.wait_replicas > 0:
                replies, acked = await self.io.run(name, lambda pipe: pipe.set(name, raw, ex=ex, nx=True), True)
                written = bool(replies[0])
            else:
                written = await self.io.command("SET", name, raw, "EX", ex, "NX") is not None
                acked = None
            if not written:
                there = await self.io.command("GET", name)
                # The same record is this claim (a pipeline resent after a failover finds its own write).
                if there != raw:
                    claimed: dict[str, Any] = orjson.loads(there) if there is not None else {}
                    return claimed
            if not self.io.confirmed(acked) and undo_unconfirmed:
                with contextlib.suppress(Exception):
                    await self.io.command("DEL", name)
        if not self.io.confirmed(acked):
            # A claim a failover may undo is not acted on: the caller fails (a resume is released and retried).
            raise self.io.unconfirmed("the tool ledger claim", acked)
        return None

    # -- artifacts -------------------------------------------------------------------------------
    async def put_artifacts(self, tenant: str, items: dict[str, dict[str, Any]], ttl_s: int) -> None:
        if not items:
            return
        ex = check_ttl(ttl_s)
        encoded = {tenant_key(tenant, "art", tc): orjson.dumps(a) for tc, a in items.items()}

        def put(pipe: Any) -> None:
            for key, raw in encoded.items():
                pipe.set(key, raw, ex=ex)

        async with self.io.guard("put_artifacts"):  # one tenant, one slot, one pipeline
            await self.io.run(next(iter(encoded)), put, False)

    async def get_artifacts(self, tenant: str, ids: list[str]) -> dict[str, dict[str, Any]]:
        if not ids:
            return {}
        async with self.io.guard("get_artifacts"):
            # One MGET: all of a tenant's artifact keys share its hash tag (cluster-safe).
            raws = await self.io.command("MGET", *(tenant_key(tenant, "art", tc) for tc in ids))
        return {tc: orjson.loads(raw) for tc, raw in zip(ids, raws, strict=True) if raw is not None}
