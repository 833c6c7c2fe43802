"""Usage aggregates in Redis: summed in process, flushed as one pipeline per tenant every ``usage.flush_s``;
a budget check is one script call answering one string.

Keys (all of a tenant's rows share the hash tag ``{u:<tenant>}``, so everything one flush adds
for a tenant sits in one slot and goes out as one pipeline, Cluster included)::

    loopgate:{u:<tenant>}:<period>               hash r e p c ca rs n tc (see base.py)
    loopgate:{u:<tenant>}:k:<key id>:<period>    the same for one key of the tenant

A day row also holds its breakdown (base.py) in fields ``<route>|<model>|<field>`` (``|`` and ``%``
in a name escaped as ``%7C``, ``%25``), one per counter, so HINCRBY sums them like the totals;
a row from before the breakdown simply has none of them.

``<period>`` is ``d:YYYY-MM-DD``, ``m:YYYY-MM`` or ``all`` (UTC). Every write renews the row's
TTL (``retention_days``). Counters are integers (cost in nano-USD), so HINCRBY sums exactly.

Why coalesce: one redis-py command costs a request about as many instructions as the rest of a
proxied request (bench/README.md), while adding a request's counts to a dict is cheap, and
under load one flush carries many requests. The price is
that counts reach Redis up to ``flush_s`` after the response (budgets are soft limits anyway),
and a crash loses at most that much; a graceful stop flushes. A failed flush's counts are dropped, logged
and counted by the caller (they do not pile up during an outage; a hung store may still apply
them); its budget releases are kept and sent again (see ``reserve``: a release applies once).
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any

from gateway.observability.fail_open import USAGE
from gateway.store.redis_client.batch import ScriptBatcher
from gateway.store.redis_client.client import RedisIO
from gateway.store.redis_client.keys import PREFIX, esc, num
from gateway.store.usage.base import (
    DEFAULT_RETENTION_DAYS,
    FIELDS,
    Breakdown,
    Dims,
    Period,
    Scope,
    Spent,
    UsageDelta,
    UsageStore,
    Want,
    merge,
    period_name,
    period_names,
)
from gateway.store.usage.redis_breakdown import dim_fields, parse_breakdown
from gateway.store.usage.redis_scripts import ADD as _ADD
from gateway.store.usage.redis_scripts import RELEASE as _RELEASE
from gateway.store.usage.redis_scripts import RESERVE as _RESERVE
from gateway.store.usage.redis_scripts import SPENT as _SPENT

DEFAULT_FLUSH_S = 0.5
#: reservations this process made and has not released yet (in flight); past it the oldest are
#: forgotten here (Redis ends them with their lease)
MAX_HOLDS = 100_000
#: releases still waiting (a write failed) sent ahead of a reservation of their tenant, at most
INLINE_RELEASES = 32
#: marks a release in a flush's calls (first argument)
_RELEASE_MARK = object()
#: distinct (tenant, key, day) entries waiting; past it new ones are refused (counted by the caller)
MAX_PENDING = 100_000
#: the route of pending counts that have no breakdown (a name no route has)
_NO_PART = "\x00"


def usage_key(tenant: str, key_id: str, period: str) -> str:
    base = f"{PREFIX}{{u:{esc(tenant)}}}"
    return f"{base}:k:{esc(key_id)}:{period}" if key_id else f"{base}:{period}"


class RedisUsage(UsageStore):
    """Shares the store's ``RedisIO``: connections, deadlines and error mapping (a ``StoreUnavailable``)."""

    def __init__(self, io: RedisIO, retention_days: int = DEFAULT_RETENTION_DAYS,
                 flush_s: float = DEFAULT_FLUSH_S) -> None:
        self._io = io
        self._ttl_s = retention_days * 86400
        self._flush_s = flush_s
        self._spent = io.register(_SPENT)
        # (tenant, key id, periods, route, model) -> summed counts, waiting for the next flush: one entry
        # per part of the day rows' breakdown (``_NO_PART`` route: counts without one); the rows' totals
        # are their sum, made at the flush (a request pays one dict update, as without a breakdown)
        self._pending: dict[tuple[str, str, tuple[str, str, str], str, str], list[int]] = {}
        # (route, model) -> its hash fields, built once (bounded by the config's routes and targets)
        self._dim_fields: dict[tuple[str, str], tuple[str, ...]] = {}
        self._timer: asyncio.TimerHandle | None = None
        # pending entry -> its row names, built once (the same entries come back every flush)
        self._key_names: dict[tuple[str, str, tuple[str, str, str]], list[str]] = {}
        self._flushing: set[asyncio.Task[None]] = set()
        self._reserve = io.register(_RESERVE)
        self._release = io.register(_RELEASE)
        # A hung store costs a budgeted request at most ``store.fail_open_ms`` (then it fails open).
        self._budget_calls = ScriptBatcher(io, "budget_reserve", fail_open=True)
        # rid -> (tenant, the release's keys, its args): what this process reserved and has not given back
        self._holds: dict[str, tuple[str, list[str], list[Any]]] = {}
        # tenant -> releases waiting for the next flush (sent with the usage they account for)
        self._releases: dict[str, list[tuple[list[str], list[Any]]]] = {}

    def add_now(self, tenant: str, key_id: str, values: tuple[int, ...], now: float,
                release: str | None = None, dims: Dims = ()) -> bool:
        """Queue ``values`` (and the release of the request's reservation) for the next flush; False when
        too much is already waiting (dropped; the reservation then ends with its lease). A request that
        held a reservation starts the flush at once (before its answer is sent)."""
        hold = None
        if release is not None:
            hold = self._holds.pop(release, None)
            if hold is not None:
                self._releases.setdefault(hold[0], []).append((hold[1], hold[2]))
        periods = period_names(now)
        pending = self._pending
        for route, model, part in dims or ((_NO_PART, "", values),):
            entry = (tenant, key_id, periods, route, model)
            row = pending.get(entry)
            if row is None:
                if len(pending) >= MAX_PENDING:
                    return False
                pending[entry] = list(part)
            else:
                merge(row, part)
        if release is not None and hold is not None:
            # A reservation (a request near a budget, or a new key's, which holds its whole answer) must
            # not stand in for the real spending longer than the write takes: written now, not in flush_s.
            if self._timer is not None:
                self._timer.cancel()
            self._start_flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._flush_s, self._start_flush)
        return True

    def _start_flush(self) -> None:
        self._timer = None
        task = asyncio.get_running_loop().create_task(self._flush_quietly())
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)

    async def _flush_quietly(self) -> None:
        try:
            await self.flush()
        except Exception as exc:  # reported; never an unhandled task error
            if self.on_error is not None:
                self.on_error("write", exc)
        else:
            if USAGE.in_burst:
                USAGE.answered()

    async def flush(self) -> None:
        """Send what is waiting: one pipeline per tenant (one slot each), all tenants concurrently."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending, self._pending = self._pending, {}
        releases, self._releases = self._releases, {}
        # the rows' totals and breakdown fields, per (tenant, key id, periods)
        rows: dict[tuple[str, str, tuple[str, str, str]], tuple[list[int], list[Any]]] = {}
        for (tenant, key_id, periods, route, model), values in pending.items():
            found = rows.get((tenant, key_id, periods))
            if found is None:
                found = rows[(tenant, key_id, periods)] = ([0] * len(FIELDS), [])
            merge(found[0], values)
            if route is not _NO_PART:
                for field, value in zip(self._fields_of((route, model)), values, strict=True):
                    if value:
                        found[1].extend((field, value))
        by_tenant: dict[str, list[tuple[list[str], list[Any]]]] = {}
        for entry, (totals, parts) in rows.items():
            args: list[Any] = [self._ttl_s, 2 if entry[1] else 1, 0]
            for field, value in zip(FIELDS, totals, strict=True):
                if value:
                    args += [field, value]
            args[2] = (len(args) - 3) // 2
            args += parts
            by_tenant.setdefault(entry[0], []).append((self._keys(entry), args))
        for tenant, calls in releases.items():  # after the adds: never a moment with neither counted
            by_tenant.setdefault(tenant, []).extend((keys, [_RELEASE_MARK, *args]) for keys, args in calls)
        if not by_tenant:
            return
        if len(by_tenant) == 1:  # the common case: no gather, no task per tenant
            ((tenant, calls),) = by_tenant.items()
            try:
                await self._send(calls)
            except BaseException:
                self._requeue(tenant, releases)
                raise
            return
        results = await asyncio.gather(*(self._send(calls) for calls in by_tenant.values()), return_exceptions=True)
        for tenant, result in zip(by_tenant, results, strict=True):
            if isinstance(result, BaseException):
                self._requeue(tenant, releases)
        failure = next((r for r in results if isinstance(r, BaseException)), None)
        if failure is not None:
            raise failure

    def _requeue(self, tenant: str, releases: dict[str, list[tuple[list[str], list[Any]]]]) -> None:
        """A failed write's releases wait for the next (the counts do not: a hung store may still apply
        them, and twice would overcount; a release applies once however often it is sent)."""
        for release in releases.get(tenant, ()):
            self._queue_release(tenant, release)

    def _fields_of(self, dim: tuple[str, str]) -> tuple[str, ...]:
        fields = self._dim_fields.get(dim)
        if fields is None:
            if len(self._dim_fields) >= MAX_PENDING:
                self._dim_fields.clear()
            fields = self._dim_fields[dim] = dim_fields(*dim)
        return fields

    def _keys(self, entry: tuple[str, str, tuple[str, str, str]]) -> list[str]:
        """The rows of a pending entry: its tenant's and (with a key id) its key's, for its three periods,
        the day rows first (``_ADD`` adds the breakdown to them)."""
        keys = self._key_names.get(entry)
        if keys is None:
            tenant, key_id, (day, month, total) = entry
            if key_id:
                keys = [usage_key(tenant, "", day), usage_key(tenant, key_id, day)]
                keys += [usage_key(tenant, owner, p) for owner in ("", key_id) for p in (month, total)]
            else:
                keys = [usage_key(tenant, "", p) for p in (day, month, total)]
            if len(self._key_names) >= MAX_PENDING:
                self._key_names.clear()
            self._key_names[entry] = keys
        return keys

    async def _send(self, calls: list[tuple[list[str], list[Any]]]) -> None:
        stamp = num(time.time())

        # EVAL with the scripts' text (never NOSCRIPT), on the lean path where there is one: a release must not
        # wait for a connection of its own while the next request's reservation goes ahead on a warm one.
        commands = [("EVAL", _RELEASE, len(keys), *keys, *args[1:], stamp) if args and args[0] is _RELEASE_MARK
                    else ("EVAL", _ADD, len(keys), *keys, *args) for keys, args in calls]
        async with self._io.guard("usage_add"):
            await self._io.pipeline(calls[0][0][0], commands)

    async def drain(self, timeout_s: float) -> None:
        if self._flushing:
            await asyncio.wait(list(self._flushing), timeout=timeout_s)
        if self._pending or self._releases:
            async with asyncio.timeout(timeout_s):
                await self.flush()

    async def add(self, tenant: str, key_id: str, delta: UsageDelta, now: float, dims: Dims = ()) -> None:
        """Add and write at once (tests, tools): ``add_now`` plus a flush."""
        if not self.add_now(tenant, key_id, delta.values(), now, dims=dims):
            raise OverflowError("too many usage rows waiting for the store")
        await self.flush()

    async def spent(self, tenant: str, key_id: str, wants: list[tuple[Scope, Period]], now: float) -> list[Spent]:
        keys = [usage_key(tenant, key_id if scope == "key" else "", period_name(period, now))
                for scope, period in wants]
        async with self._io.guard("usage_spent", fail_open=True):  # a budget check fails open
            reply, _ = await self._io.script(self._spent, keys, [], False)
        text = reply.decode() if isinstance(reply, bytes) else str(reply)
        found = []
        for item in text.split(","):
            prompt, completion, cost = item.split(":")
            found.append(Spent(int(prompt) + int(completion), int(cost)))
        return found

    async def reserve(self, tenant: str, key_id: str, wants: list[Want], tokens: int, cost_nano: int, rid: str,
                      lease_s: float, now: float) -> tuple[int, list[Spent], list[Spent]]:
        keys: list[str] = []
        release_keys: list[str] = []
        tail: list[Any] = []
        for want in wants:
            row = usage_key(tenant, key_id if want.scope == "key" else "", period_name(want.period, now))
            keys += [row, f"{row}:rz", f"{row}:rh"]
            release_keys += [f"{row}:rz", f"{row}:rh"]
            tail += [1 if want.usd else 0, want.limit]
        rx = f"{keys[0]}:rx"
        keys.append(rx)
        release_keys.append(rx)
        member = f"{rid}|{tokens}|{cost_nano}"
        lease_ms = max(1, int(lease_s * 1000))
        args: list[Any] = [num(now), num(now + lease_s), member, tokens, cost_nano, lease_ms, *tail]
        release = (release_keys, [member, -tokens, -cost_nano, num(now + lease_s), lease_ms])
        self._send_releases(tenant)
        try:
            reply = await self._budget_calls.call(self._reserve, keys, args)
        except BaseException:
            # No answer (a hung store past store.fail_open_ms, a caller gone): the script may still run
            # (a thawed Redis runs what was written before), holding the budget for the whole lease
            # with no request left to give it back. Given back now, whatever happened to it.
            self._queue_release(tenant, release)
            raise
        text = reply.decode() if isinstance(reply, bytes) else str(reply)
        head, *rows = text.split(",")
        found, reserved = [], []
        for item in rows:
            spent_tokens, spent_nano, held_tokens, held_nano = item.split(":")
            found.append(Spent(int(spent_tokens), int(spent_nano)))
            reserved.append(Spent(int(held_tokens), int(held_nano)))
        refused = int(head)
        if refused < 0:
            if len(self._holds) >= MAX_HOLDS:
                self._holds.pop(next(iter(self._holds)))
            self._holds[rid] = (tenant, *release)
        return refused, found, reserved

    def _queue_release(self, tenant: str, release: tuple[list[str], list[Any]]) -> None:
        """A release for the next flush (soon: a reservation holds a budget); kept until written or
        its reservation's lease is over (Redis has ended it then)."""
        if float(release[1][3]) <= time.time():
            return
        waiting = self._releases.setdefault(tenant, [])
        if len(waiting) >= MAX_HOLDS:
            del waiting[0]  # the oldest ends with its lease
        waiting.append(release)
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._flush_s, self._start_flush)

    def _send_releases(self, tenant: str) -> None:
        """Releases of ``tenant`` still waiting (their write failed) go first, in the reservation's
        pipeline: a budget is never judged on reservations no request holds once the store answers."""
        waiting = self._releases.get(tenant)
        if not waiting or self._io.cluster:
            return
        sent, rest = waiting[:INLINE_RELEASES], waiting[INLINE_RELEASES:]
        if rest:
            self._releases[tenant] = rest  # the flush takes them (one request's pipeline stays small)
        else:
            del self._releases[tenant]
        stamp = num(time.time())
        for keys, args in sent:
            future = self._budget_calls.queue(self._release, keys, [*args, stamp])
            future.add_done_callback(functools.partial(self._released, tenant, (keys, args)))

    def _released(self, tenant: str, item: tuple[list[str], list[Any]], done: asyncio.Future[Any]) -> None:
        """A release sent with a reservation: written, or waiting for the next try."""
        if done.cancelled() or done.exception() is not None:
            self._queue_release(tenant, item)

    async def days(self, tenant: str, key_id: str, days: list[str]) -> list[list[int]]:
        keys = [usage_key(tenant, key_id, f"d:{day}") for day in days]
        if not keys:
            return []

        def build(pipe: Any) -> None:
            for key in keys:
                pipe.hmget(key, *FIELDS)

        async with self._io.guard("usage_days"):
            replies, _ = await self._io.run(keys[0], build, False)
        return [[int(v or 0) for v in reply] for reply in replies]

    async def breakdown(self, tenant: str, key_id: str, days: list[str]) -> list[Breakdown]:
        keys = [usage_key(tenant, key_id, f"d:{day}") for day in days]
        if not keys:
            return []

        def build(pipe: Any) -> None:
            for key in keys:
                pipe.hgetall(key)

        async with self._io.guard("usage_days"):
            replies, _ = await self._io.run(keys[0], build, False)
        return [parse_breakdown(reply) for reply in replies]

