"""Rate limits shared by every replica: at most one Lua script call per request, none far from a limit.

Far from a limit a script call also leases this process a slice of the bucket (and a block of
concurrency slots) that the next requests spend locally (lease.py says how much, for how
long, and how it goes back). Near a limit, or for small limits, every request is one script call
to take and, for tpm or max_concurrent, one to settle, exactly as if nothing were leased. The
calls of one loop turn (many requests under load) go out as one pipeline (redis_client/batch.py).

Key layout (the tenant is the hash tag, so every key one request touches is in one slot)::

    loopgate:{l:<tenant>}:t:b         hash  r=requests left t=tokens left ts=updated (tenant bucket)
    loopgate:{l:<tenant>}:t:c         zset  in-flight request ids and leased slots, scored by lease end
    loopgate:{l:<tenant>}:k:<id>:b    the same per key
    loopgate:{l:<tenant>}:k:<id>:c

Buckets expire 120 s after their last change (a full refill takes 60 s: an absent bucket and a
full one are the same); a slot set expires with its longest lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from typing import Any

from gateway.cancellation import check_cancelled, stop_tasks
from gateway.store.limits.base import (
    SETTLED,
    Decision,
    LimitScope,
    PendingDecision,
    PendingSettle,
    RateLimiter,
    Settled,
    decision,
)
from gateway.store.limits.lease import CORRECTION_WINDOW_S, IDLE_S, SLOT_LEASE_S, SLOT_RENEW_S, TICK_S, Lease
from gateway.store.limits.scripts import ACQUIRE, SETTLE, TIDY
from gateway.store.redis_client.batch import ScriptBatcher
from gateway.store.redis_client.client import RedisIO
from gateway.store.redis_client.keys import PREFIX, esc, num

log = logging.getLogger("loopgate.limits")

#: a lease with nothing held is forgotten after this long without use (far above any script call)
_FORGET_S = 10.0

_SCOPES_CACHE_LIMIT = 20_000

_Ticket = tuple[list[Lease], int]  # the leases of a request's scopes, bit i: scope i holds a per-request slot


def scope_keys(tenant: str, scope: LimitScope) -> list[str]:
    base = f"{PREFIX}{{l:{esc(tenant)}}}:" + ("t" if scope.kind == "tenant" else f"k:{esc(scope.ident)}")
    return [f"{base}:b", f"{base}:c"]


class RedisRateLimiter(RateLimiter):
    def __init__(self, io: RedisIO) -> None:
        self._acquire = io.register(ACQUIRE)
        self._settle = io.register(SETTLE)
        self._tidy = io.register(TIDY)
        # Takes and settles of one loop turn share a round trip (gateway/store/redis_client/batch.py).
        # A hung store costs a limited request at most ``store.fail_open_ms`` (then it fails open).
        self._batch = ScriptBatcher(io, "rate_limit", fail_open=True)
        self._leases: dict[tuple[str, LimitScope], Lease] = {}
        self._by_scopes: dict[int, tuple[tuple[LimitScope, ...], str, list[Lease]]] = {}
        self._prefix = "lease:" + secrets.token_hex(6) + ":"  # leased slot names: unique to this process
        self._serial = 0
        self._keeper: asyncio.Task[None] | None = None
        self._failure_logged = 0.0

    def _leases_of(self, tenant: str, scopes: tuple[LimitScope, ...]) -> list[Lease]:
        """The leases of ``scopes`` (cached per tuple: the request path passes the same one per key)."""
        cached = self._by_scopes.get(id(scopes))
        # The entry holds the tuple, so its id is not reused while it is there.
        if cached is not None and cached[0] is scopes and cached[1] == tenant:
            return cached[2]
        leases = []
        for scope in scopes:
            lease = self._leases.get((tenant, scope))
            if lease is None:
                self._serial += 1
                lease = self._leases[(tenant, scope)] = Lease(scope, scope_keys(tenant, scope),
                                                              f"{self._prefix}{self._serial}:")
            leases.append(lease)
        if len(self._by_scopes) >= _SCOPES_CACHE_LIMIT:
            self._by_scopes.clear()
        self._by_scopes[id(scopes)] = (scopes, tenant, leases)
        if self._keeper is None:
            self._keeper = asyncio.get_running_loop().create_task(self._keep())
        return leases

    def admit(self, tenant: str, scopes: tuple[LimitScope, ...], tokens: int, member: str,
              lease_s: float, now: float | None = None) -> Decision | PendingDecision:
        """Taken from the leased allowance when it covers every scope (no round trip); else the script call."""
        leases = self._leases_of(tenant, scopes)
        if len(leases) == 1:  # the common case: one scope, one check-and-take
            lease = leases[0]
            if lease.take_if_covered(tokens, time.monotonic()):
                scope = lease.scope
                return Decision(True, scope.rpm, min(scope.rpm, lease.level_r + lease.requests), scope.tpm,
                                min(scope.tpm, lease.level_t + lease.tokens), None, None, 0.0, False, lease)
            return self._admit_remote(tenant, scopes, leases, tokens, member, lease_s, now)
        for lease in leases:
            if not lease.covers(tokens):
                return self._admit_remote(tenant, scopes, leases, tokens, member, lease_s, now)
        mono = time.monotonic()
        for lease in leases:
            lease.take(tokens, mono)
        return self._decided(scopes, leases, None, 0)

    async def _admit_remote(self, tenant: str, scopes: tuple[LimitScope, ...], leases: list[Lease], tokens: int,
                            member: str, lease_s: float, now: float | None) -> Decision:
        """What the leases did not cover: wait once for a slice on its way, else one script call."""
        asking = [lease.asking for lease in leases if lease.asking is not None]
        if asking:  # a slice is on its way: share it, then look again
            await asyncio.wait(asking)
            if all(lease.covers(tokens) for lease in leases):
                mono = time.monotonic()
                for lease in leases:
                    lease.take(tokens, mono)
                return self._decided(scopes, leases, None, 0)
        return await self._call(tenant, scopes, leases, tokens, member, lease_s, time.time() if now is None else now)

    async def _call(self, tenant: str, scopes: tuple[LimitScope, ...], leases: list[Lease], tokens: int,
                    member: str, lease_s: float, now: float) -> Decision:
        """One script call for what the leases do not cover, with a new slice where there is room."""
        mono = time.monotonic()
        keys: list[str] = []
        args: list[Any] = [num(now), tokens, member, num(now + lease_s), num(now + SLOT_LEASE_S)]
        # What this request took locally (given back if Redis refuses): requests, tokens, slot.
        local: list[tuple[int, int, int]] = []
        firsts: list[int] = []
        asking: list[Lease] = []
        for scope, lease in zip(scopes, leases, strict=True):
            keys += lease.keys
            need_r = need_t = need_c = 0
            took_r = took_t = took_c = 0
            if scope.rpm:
                if lease.requests >= 1:
                    lease.requests -= 1
                    took_r = 1
                else:
                    need_r = 1
            if scope.tpm:
                if lease.tokens >= tokens:
                    lease.tokens -= tokens
                    took_t = tokens
                else:
                    need_t = tokens
            if scope.max_concurrent:
                if lease.in_flight < len(lease.slots):
                    lease.in_flight += 1
                    took_c = 1
                else:
                    need_c = 1
            local.append((took_r, took_t, took_c))
            room_r = room_t = room_c = 0
            if lease.leasing and lease.asking is None:  # one slice at a time: a burst must not take one each
                asking.append(lease)
                lease.asking = asyncio.get_running_loop().create_future()
                room_r = max(0, lease.want_r - int(lease.requests)) if lease.want_r else 0
                room_t = max(0, lease.want_t - int(lease.tokens)) if lease.want_t else 0
                room_c = max(0, lease.want_c - (len(lease.slots) - lease.in_flight)) if lease.want_c and need_c else 0
            debt, lease.debt = lease.debt, 0  # the correction rides along (lost with the call on an outage)
            firsts.append(lease.next_slot)
            args += [scope.rpm, scope.tpm, scope.max_concurrent, need_r, need_t, need_c, room_r, room_t, room_c,
                     debt, lease.next_slot, lease.slot_prefix]
            lease.next_slot += room_c + 1
            lease.last_used = mono
        try:
            reply = (await self._batch.call(self._acquire, keys, args)).split()
        except BaseException:
            _give_back_local(leases, local)
            raise
        finally:
            for lease in asking:
                if lease.asking is not None:
                    lease.asking.set_result(None)
                lease.asking = None
        allowed = int(reply[0]) == 1
        exact = 0
        for index, lease in enumerate(leases):
            level_r, level_t, got_r, got_t, got_c = reply[4 + 5 * index: 9 + 5 * index]
            lease.level_r, lease.level_t = float(level_r), float(level_t)
            if not allowed:
                continue
            lease.requests += int(got_r)
            lease.tokens += int(got_t)
            slots = int(got_c)
            if slots:  # the request's own slot is one of the block
                if not lease.slots:
                    lease.renew_at = mono + SLOT_LEASE_S - SLOT_RENEW_S
                lease.slots += [f"{lease.slot_prefix}{firsts[index] + n}" for n in range(slots)]
                lease.in_flight += 1
            elif scopes[index].max_concurrent and not local[index][2]:
                exact |= 1 << index  # a per-request slot: freed by the settle call
        if not allowed:
            _give_back_local(leases, local)
        return self._decided(scopes, leases, list(reply[:4]), exact)

    @staticmethod
    def _decided(scopes: tuple[LimitScope, ...], leases: list[Lease], head: list[Any] | None, exact: int) -> Decision:
        """The decision with the leases' levels (``head``: the script's verdict; None: allowed here)."""
        if head is None and len(leases) == 1:  # the common case, without the search for the tightest scope
            lease = leases[0]
            scope = lease.scope
            verdict = Decision(True, scope.rpm, min(scope.rpm, lease.level_r + lease.requests), scope.tpm,
                               min(scope.tpm, lease.level_t + lease.tokens))
        else:
            levels: list[Any] = [1, 0, 0, 0.0] if head is None else head
            for lease in leases:
                scope = lease.scope
                levels += (min(scope.rpm, lease.level_r + lease.requests), min(scope.tpm, lease.level_t + lease.tokens))
            verdict = decision(scopes, levels)
        verdict.ticket = (leases, exact)
        return verdict

    def settle(self, tenant: str, scopes: tuple[LimitScope, ...], extra_tokens: int, member: str,
               ticket: object = None) -> Settled | PendingSettle:
        """Settled here when the leases pay the correction (and hold the slots); else one script call
        takes what they could not pay and frees per-request slots (lease.py ``settle_taken``)."""
        if ticket.__class__ is Lease:  # admitted from one scope's lease
            remote = ticket.settle_taken(extra_tokens)
            if remote is None:
                return SETTLED
            return self._settle_remote(tenant, scopes, [remote], member, [ticket], 0)
        if not isinstance(ticket, tuple):  # no ticket: every slot is a per-request one, nothing leased
            return self._settle_remote(tenant, scopes, [extra_tokens] * len(scopes), member, [], -1)
        leases, exact = ticket
        owed: list[int] = []
        needed = False
        for index, held in enumerate(leases):
            remote = held.settle_taken(extra_tokens, not exact & (1 << index))
            if remote is not None:
                needed = True
            owed.append(remote or 0)
        return self._settle_remote(tenant, scopes, owed, member, leases, exact) if needed else SETTLED

    async def _settle_remote(self, tenant: str, scopes: tuple[LimitScope, ...], owed: list[int], member: str,
                             leases: list[Lease], exact: int) -> None:
        """The script call for what the leases did not settle: the tokens they could not pay (``owed``, per
        scope) and per-request slots. A bucket it leaves below zero takes this process's slice back too."""
        args: list[Any] = [num(time.time()), member]
        for index, scope in enumerate(scopes):
            args += [scope.tpm, owed[index], scope.max_concurrent if exact & (1 << index) else 0]
        reply = await self._batch.call(self._settle, [key for scope in scopes for key in scope_keys(tenant, scope)],
                                       args)
        if leases:
            for lease, level, taken in zip(leases, reply.split(), owed, strict=True):
                if lease.has_t and taken:
                    level_t = float(level)
                    if level_t < 0:
                        lease.in_debt(level_t)
                    else:
                        lease.level_t = level_t

    async def _keep(self) -> None:
        """Every TICK_S: give back what idle leases hold, send due corrections, renew leased slots."""
        while True:
            check_cancelled()  # a store call may have swallowed the cancellation (gateway/cancellation.py)
            await asyncio.sleep(TICK_S)
            try:
                await self._tidy_all(closing=False)
            except Exception as exc:  # an outage: the leases' time limits still bound what is held
                mono = time.monotonic()
                if mono - self._failure_logged > 60:
                    self._failure_logged = mono
                    log.warning("leased rate-limit allowance could not be synced with the store: %s", exc)

    async def _tidy_all(self, closing: bool) -> None:
        mono = time.monotonic()
        now = time.time()
        calls = []
        for key, lease in list(self._leases.items()):
            idle = closing or mono - lease.last_used >= IDLE_S
            give_r = int(lease.requests) if idle else 0
            give_t = int(lease.tokens) if idle else 0
            flush = bool(lease.debt) and (idle or mono - lease.debt_since >= CORRECTION_WINDOW_S)
            spare = max(0, len(lease.slots) - (0 if closing else lease.in_flight))
            release = spare if idle else max(0, spare - lease.want_c)
            renew = len(lease.slots) > release and mono >= lease.renew_at
            if not (give_r or give_t or flush or release or renew):
                if mono - lease.last_used >= _FORGET_S and not lease.held():
                    del self._leases[key]
                    lease.retired = True
                    self._by_scopes.clear()  # it may hold the lease
                continue
            add_t = give_t - (lease.debt if flush else 0)
            lease.requests -= give_r
            lease.tokens -= give_t
            if flush:
                lease.debt = 0
            released = lease.slots[len(lease.slots) - release:]
            del lease.slots[len(lease.slots) - release:]
            renewing = lease.slots if renew else []
            if renew:
                lease.renew_at = mono + SLOT_LEASE_S - SLOT_RENEW_S
            scope = lease.scope
            args: list[Any] = [num(now), scope.rpm, scope.tpm, give_r, add_t, num(now + SLOT_LEASE_S), len(released),
                               *released, *renewing]
            calls.append((lease, self._batch.call(self._tidy, lease.keys, args)))
        if not calls:
            return
        replies = await asyncio.gather(*(call for _, call in calls), return_exceptions=True)
        failed: BaseException | None = None
        for (lease, _), reply in zip(calls, replies, strict=True):
            if isinstance(reply, BaseException):
                failed = reply
                continue
            level_r, level_t, *lost = reply.split()
            lease.level_r, lease.level_t = float(level_r), float(level_t)
            if lost:  # expired while this process could not renew them: another may have them now
                gone = {name.decode() if isinstance(name, bytes) else name for name in lost}
                lease.slots = [name for name in lease.slots if name not in gone]
        if failed is not None:
            raise failed

    async def aclose(self) -> None:
        """Stop the keeper and give back everything leased (a replica that stops holds nothing)."""
        if self._keeper is not None:
            await stop_tasks([self._keeper], "rate-limit leases")
            self._keeper = None
        with contextlib.suppress(Exception):
            await self._tidy_all(closing=True)


def _give_back_local(leases: list[Lease], local: list[tuple[int, int, int]]) -> None:
    for lease, (took_r, took_t, took_c) in zip(leases, local, strict=True):
        lease.requests += took_r
        lease.tokens += took_t
        lease.in_flight -= took_c
