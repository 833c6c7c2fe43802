"""Rate limits (requests and tokens per minute, concurrent requests) per key and per tenant.

Requests and tokens are token buckets, as OpenAI's limits are: a bucket holds up to the limit and
refills continuously at limit/60 per second, a request takes 1 request and its token estimate
from every bucket that applies, or from none (all checks pass before anything is taken). After
the request, the difference between the reported usage and the estimate is taken too (it may
leave a bucket in debt, which later requests wait out). Concurrency is a set of in-flight request
ids, each with a lease (``routing.request_timeout_s``), so a replica that dies mid-request
cannot leak a slot forever.

``acquire`` and ``settle`` are each one atomic step: at most one Lua script call in Redis (every
key of a request shares its tenant's hash tag; far from a limit none, see redis_lease.py), one
synchronous function in memory. This module holds
the types and the in-process implementation; ``redis_limits`` the shared one.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

KINDS = ("requests", "tokens", "concurrency")


@dataclass(frozen=True, slots=True)
class LimitScope:
    """One set of limits: ``kind`` ``key`` (``ident`` = key id) or ``tenant`` (``ident`` = tenant); 0 = none."""

    kind: str
    ident: str
    rpm: int
    tpm: int
    max_concurrent: int


# Window and Decision are built per limited request: plain slotted classes initialise faster than frozen ones.
@dataclass(slots=True)
class Window:
    """What the ``x-ratelimit-*-requests`` (or ``-tokens``) headers say: the tightest scope's bucket."""

    limit: int
    remaining: int
    reset_s: float


@dataclass(slots=True)
class Decision:
    allowed: bool
    #: why not: requests | tokens | concurrency, and the scope that refused (key | tenant)
    kind: str | None = None
    scope: str | None = None
    retry_after_s: float = 0.0
    requests: Window | None = None
    tokens: Window | None = None
    #: the estimate alone is above the tpm limit: no wait will let it through
    too_large: bool = False
    #: what the limiter needs back at ``settle`` (Redis: which leases the request used)
    ticket: object = None


def decision(scopes: tuple[LimitScope, ...], reply: list[Any]) -> Decision:
    """Build a ``Decision`` from the levels both implementations return.

    ``reply``: ``[verdict, kind_index, scope_index, retry_after_s, r1, t1, r2, t2, ...]`` with
    verdict 1 allowed, 0 refused, 2 refused as too large; levels are after the request's take.
    """
    requests = tokens = None
    if len(scopes) == 1:  # the common case, without the search for the tightest scope
        scope = scopes[0]
        if scope.rpm:
            requests = _window(scope.rpm, float(reply[4]))
        if scope.tpm:
            tokens = _window(scope.tpm, float(reply[5]))
    else:
        tightest_r: tuple[int, float] | None = None
        tightest_t: tuple[int, float] | None = None
        for index, scope in enumerate(scopes):
            level_r, level_t = float(reply[4 + 2 * index]), float(reply[5 + 2 * index])
            if scope.rpm and (tightest_r is None or level_r < tightest_r[1]):
                tightest_r = (scope.rpm, level_r)
            if scope.tpm and (tightest_t is None or level_t < tightest_t[1]):
                tightest_t = (scope.tpm, level_t)
        requests = None if tightest_r is None else _window(*tightest_r)
        tokens = None if tightest_t is None else _window(*tightest_t)
    verdict = int(reply[0])
    if verdict == 1:
        return Decision(True, None, None, 0.0, requests, tokens)
    return Decision(False, KINDS[int(reply[1])], scopes[int(reply[2])].kind, float(reply[3]), requests, tokens,
                    verdict == 2)


def _window(limit: int, level: float) -> Window:
    """``remaining`` whole units left, ``reset_s`` until the bucket is full again."""
    return Window(limit, int(level) if level > 0 else 0, (limit - level) * 60 / limit if level < limit else 0.0)


class RateLimiter(ABC):
    @abstractmethod
    async def acquire(self, tenant: str, scopes: tuple[LimitScope, ...], tokens: int, member: str,
                      lease_s: float, now: float | None = None) -> Decision:
        """Take one request and ``tokens`` from every scope, and a concurrency slot ``member``, or nothing.

        ``now`` (Unix seconds, default the clock) is for tests.
        """

    @abstractmethod
    async def settle(self, tenant: str, scopes: tuple[LimitScope, ...], extra_tokens: int, member: str,
                     ticket: object = None) -> None:
        """Take ``extra_tokens`` more (negative: give back) and free the slot ``member``.

        ``ticket``: the admitting ``Decision``'s.
        """

    @abstractmethod
    async def aclose(self) -> None:
        """Give back whatever this process holds of the shared limits."""


class MemoryRateLimiter(RateLimiter):
    """The same buckets in this process (``memory://``: one process is the whole deployment)."""

    def __init__(self) -> None:
        self._buckets: dict[tuple[str, str], list[float]] = {}  # scope -> [requests, tokens, updated]
        self._slots: dict[tuple[str, str], dict[str, float]] = {}  # scope -> {member: lease end}

    def _refill(self, scope: LimitScope, now: float) -> list[float]:
        bucket = self._buckets.get((scope.kind, scope.ident))
        if bucket is None:
            return [float(scope.rpm), float(scope.tpm), now]
        elapsed = max(0.0, now - bucket[2])
        return [min(scope.rpm, bucket[0] + elapsed * scope.rpm / 60),
                min(scope.tpm, bucket[1] + elapsed * scope.tpm / 60), now]

    async def acquire(self, tenant: str, scopes: tuple[LimitScope, ...], tokens: int, member: str,
                      lease_s: float, now: float | None = None) -> Decision:
        now = time.time() if now is None else now
        levels = [self._refill(scope, now) for scope in scopes]
        flat: list[float] = [x for level in levels for x in level[:2]]
        for index, (scope, level) in enumerate(zip(scopes, levels, strict=True)):
            if scope.rpm and level[0] < 1:
                return decision(scopes, [0, 0, index, (1 - level[0]) * 60 / scope.rpm, *flat])
            if scope.tpm and tokens > scope.tpm:
                return decision(scopes, [2, 1, index, 60.0, *flat])
            if scope.tpm and level[1] < tokens:
                return decision(scopes, [0, 1, index, (tokens - level[1]) * 60 / scope.tpm, *flat])
            if scope.max_concurrent:
                slots = self._slots.setdefault((scope.kind, scope.ident), {})
                if len(slots) >= scope.max_concurrent:  # only then can expired leases matter
                    for gone in [m for m, until in slots.items() if until <= now]:
                        del slots[gone]
                if len(slots) >= scope.max_concurrent:
                    return decision(scopes, [0, 2, index, 1.0, *flat])
        for scope, level in zip(scopes, levels, strict=True):
            if scope.rpm or scope.tpm:
                level[0] -= 1 if scope.rpm else 0
                level[1] -= tokens if scope.tpm else 0
                self._buckets[(scope.kind, scope.ident)] = level
            if scope.max_concurrent:
                self._slots[(scope.kind, scope.ident)][member] = now + lease_s
        return decision(scopes, [1, 0, 0, 0.0, *(x for level in levels for x in level[:2])])

    async def settle(self, tenant: str, scopes: tuple[LimitScope, ...], extra_tokens: int, member: str,
                     ticket: object = None) -> None:
        now = time.time()
        for scope in scopes:
            if scope.tpm and extra_tokens:
                level = self._refill(scope, now)
                level[1] -= extra_tokens
                self._buckets[(scope.kind, scope.ident)] = level
            if scope.max_concurrent:
                self._slots.get((scope.kind, scope.ident), {}).pop(member, None)


    async def aclose(self) -> None:
        """Nothing to give back: the buckets are this process's own."""


def open_limiter(store: Any) -> RateLimiter:
    """The limiter beside ``store``: shared through Redis, or this process's own with ``memory://``."""
    if store.kind == "redis":
        from gateway.store.redis_limits import RedisRateLimiter

        return RedisRateLimiter(store)
    return MemoryRateLimiter()
