"""Rate limits (requests and tokens per minute, concurrent requests) per key and per tenant.

Requests and tokens are token buckets, as OpenAI's limits are: a bucket holds up to the limit and
refills continuously at limit/60 per second, a request takes 1 request and its token estimate
from every bucket that applies, or from none (all checks pass before anything is taken). After
the request, the difference between the reported usage and the estimate is taken too (it may
leave a bucket in debt, which later requests wait out). Concurrency is a set of in-flight request
ids, each with a lease (``routing.request_timeout_s``), so a replica that dies mid-request
cannot leak a slot forever.

``RateLimiter`` has one method per operation, ``admit`` and ``settle``, each one atomic step: at
most one Lua script call in Redis (every key of a request shares its tenant's hash tag; far from
a limit none, see lease.py), one synchronous function in memory. Each answers at once with a
ready result (a ``Decision``; ``SETTLED``) when no store call is needed, else with the coroutine
that makes it. This module holds the types and the interface; memory.py the in-process
implementation, redis.py the shared one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Coroutine, Generator
from dataclasses import dataclass
from typing import Any, Final

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

    def __await__(self) -> Generator[Any, None, Decision]:
        """A ready decision awaits as itself, so a caller that does not care for the fast path awaits ``admit``."""
        return self
        yield  # a generator that never yields: no event-loop turn

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
    return Window(limit, min(limit, int(level)) if level > 0 else 0, reset_seconds(limit, level))


def reset_seconds(limit: int, level: float) -> float:
    """How long a bucket at ``level`` takes to be full again (it refills at ``limit`` a minute)."""
    return (limit - level) * 60 / limit if level < limit else 0.0


class Settled:
    """``SETTLED``: a ``settle`` done in this process (awaiting it returns at once)."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield  # a generator that never yields: awaiting a ready result costs no event-loop turn


SETTLED: Final = Settled()

#: ``admit`` when it needs the store: nothing is taken until it runs (``close()`` it to give up)
PendingDecision = Coroutine[Any, Any, Decision]
#: ``settle`` when a part needs the store
PendingSettle = Coroutine[Any, Any, None]


class RateLimiter(ABC):
    """One method per operation; each answers at once when this process can decide, else with a coroutine.

    Most requests are decided without the store (in memory; on Redis, from the leased allowance),
    and a coroutine per request is a measurable share of what a limit costs, so the ready results
    are returned as they are (and still await as themselves, for callers that do not care).
    """

    @abstractmethod
    def admit(self, tenant: str, scopes: tuple[LimitScope, ...], tokens: int, member: str, lease_s: float,
              now: float | None = None) -> Decision | PendingDecision:
        """Take one request and ``tokens`` from every scope, and a concurrency slot ``member``, or nothing.

        A ``Decision`` when decided here, else the coroutine asking the store for it. ``now`` (Unix
        seconds, default the clock) is for tests.
        """

    @abstractmethod
    def settle(self, tenant: str, scopes: tuple[LimitScope, ...], extra_tokens: int, member: str,
               ticket: object = None) -> Settled | PendingSettle:
        """Take ``extra_tokens`` more (negative: give back) and free the slot ``member``.

        ``ticket``: the admitting ``Decision``'s. ``SETTLED`` when done here, else the coroutine
        that settles the rest with the store.
        """

    @abstractmethod
    async def aclose(self) -> None:
        """Give back whatever this process holds of the shared limits."""
