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


@dataclass(slots=True)
class Window:
    """What the ``x-ratelimit-*-requests`` (or ``-tokens``) headers say: the tightest scope's bucket."""

    limit: int
    remaining: int
    reset_s: float


class Decision:
    """A limiter's verdict, with the tightest scope's levels after the take (what the headers show).

    Built for every limited request, so it holds plain numbers (a limit of 0: that kind is not
    limited); ``requests`` and ``tokens`` make their ``Window`` only when asked.
    """

    __slots__ = ("allowed", "kind", "level_r", "level_t", "limit_r", "limit_t", "retry_after_s", "scope", "ticket",
                 "too_large")

    def __init__(self, allowed: bool, limit_r: int = 0, level_r: float = 0.0, limit_t: int = 0, level_t: float = 0.0,
                 kind: str | None = None, scope: str | None = None, retry_after_s: float = 0.0,
                 too_large: bool = False, ticket: object = None) -> None:
        self.allowed = allowed
        self.limit_r = limit_r
        self.level_r = level_r
        self.limit_t = limit_t
        self.level_t = level_t
        #: why not: requests | tokens | concurrency, and the scope that refused (key | tenant)
        self.kind = kind
        self.scope = scope
        self.retry_after_s = retry_after_s
        #: the estimate alone is above the tpm limit: no wait will let it through
        self.too_large = too_large
        #: what the limiter needs back at ``settle`` (Redis: which leases the request used)
        self.ticket = ticket

    @property
    def requests(self) -> Window | None:
        return _window(self.limit_r, self.level_r) if self.limit_r else None

    @property
    def tokens(self) -> Window | None:
        return _window(self.limit_t, self.level_t) if self.limit_t else None


def decision(scopes: tuple[LimitScope, ...], reply: list[Any]) -> Decision:
    """Build a ``Decision`` from the levels both implementations return.

    ``reply``: ``[verdict, kind_index, scope_index, retry_after_s, r1, t1, r2, t2, ...]`` with
    verdict 1 allowed, 0 refused, 2 refused as too large; levels are after the request's take.
    """
    limit_r = limit_t = 0
    level_r = level_t = 0.0
    for index, scope in enumerate(scopes):  # the tightest scope of each kind
        if scope.rpm:
            level = float(reply[4 + 2 * index])
            if not limit_r or level < level_r:
                limit_r, level_r = scope.rpm, level
        if scope.tpm:
            level = float(reply[5 + 2 * index])
            if not limit_t or level < level_t:
                limit_t, level_t = scope.tpm, level
    verdict = int(reply[0])
    if verdict == 1:
        return Decision(True, limit_r, level_r, limit_t, level_t)
    return Decision(False, limit_r, level_r, limit_t, level_t, KINDS[int(reply[1])], scopes[int(reply[2])].kind,
                    float(reply[3]), verdict == 2)


def _window(limit: int, level: float) -> Window:
    """``remaining`` whole units left, ``reset_s`` until the bucket is full again."""
    return Window(limit, int(level) if level > 0 else 0, reset_seconds(limit, level))


def reset_seconds(limit: int, level: float) -> float:
    """How long a bucket at ``level`` takes to be full again (it refills at ``limit`` a minute)."""
    return (limit - level) * 60 / limit if level < limit else 0.0


#: An admission ``take_now`` allowed: rpm and the requests level after it, tpm and the tokens level, the ticket.
Taken = tuple[int, float, int, float, object]


class RateLimiter(ABC):
    def acquire_now(self, tenant: str, scopes: tuple[LimitScope, ...], tokens: int, member: str,
                    lease_s: float) -> Decision | None:
        """``acquire`` without a coroutine where no store call is needed; None: await ``acquire``.

        Most requests are decided here (in memory; on Redis, from the leased allowance), and a
        coroutine per request is a measurable share of what a limit costs.
        """
        return None

    def single_lease(self, tenant: str, scopes: tuple[LimitScope, ...]) -> Any:
        """A lease of this process's own allowance for requests limited by ``scopes`` alone, with
        ``take_if_covered(tokens, monotonic_now)``, ``scope``, ``level_r``/``requests``,
        ``level_t``/``tokens``, ``retired`` and ``settle_taken(extra_tokens)`` (False: ``settle_remote``
        must follow, with the lease as its ticket). None: this limiter has none."""
        return None

    def take_now(self, tenant: str, scopes: tuple[LimitScope, ...], tokens: int) -> Taken | None:
        """The cheapest admission: one scope, allowed from what this process holds, as plain numbers.

        None: ask ``acquire_now`` (then ``acquire``). Nothing is taken when it returns None.
        """
        return None

    def settle_now(self, tenant: str, scopes: tuple[LimitScope, ...], extra_tokens: int, member: str,
                   ticket: object = None) -> bool:
        """The part of ``settle`` that needs no store call; False: ``settle_remote`` must follow."""
        return False

    async def settle_remote(self, tenant: str, scopes: tuple[LimitScope, ...], extra_tokens: int, member: str,
                            ticket: object = None) -> None:
        """What ``settle_now`` left to the store (by default the whole ``settle``)."""
        await self.settle(tenant, scopes, extra_tokens, member, ticket)

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
        return self.acquire_now(tenant, scopes, tokens, member, lease_s, now)

    def acquire_now(self, tenant: str, scopes: tuple[LimitScope, ...], tokens: int, member: str,
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
        self.settle_now(tenant, scopes, extra_tokens, member, ticket)

    def settle_now(self, tenant: str, scopes: tuple[LimitScope, ...], extra_tokens: int, member: str,
                   ticket: object = None) -> bool:
        now = time.time()
        for scope in scopes:
            if scope.tpm and extra_tokens:
                level = self._refill(scope, now)
                level[1] -= extra_tokens
                self._buckets[(scope.kind, scope.ident)] = level
            if scope.max_concurrent:
                self._slots.get((scope.kind, scope.ident), {}).pop(member, None)
        return True

    async def aclose(self) -> None:
        """Nothing to give back: the buckets are this process's own."""


def open_limiter(store: Any) -> RateLimiter:
    """The limiter beside ``store``: shared through Redis, or this process's own with ``memory://``."""
    if store.kind == "redis":
        from gateway.store.redis_limits import RedisRateLimiter

        return RedisRateLimiter(store)
    return MemoryRateLimiter()
