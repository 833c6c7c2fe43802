"""Daily usage aggregates per tenant and per key: the interface (memory.py, redis.py implement it).

Every request adds one ``UsageDelta`` to six rows: the tenant's and the key's row of the day
(UTC), of the month, and of all time. Day rows answer ``GET /admin/usage``; month and total rows
let a budget check read one row per budget instead of summing days. Rows expire
``retention_days`` after their last write (Redis), so nothing lives forever by accident; a
``total`` row therefore counts spending since the last gap of that many days without traffic.

Day rows also carry a breakdown by route and model (``Dims``): the request's route (its
bounded metrics label, from the config) and, per answered call, the target that answered it
(``provider:model`` from the config; ``provider:*`` for a direct route, so a caller's made-up
model name never becomes a row). Month and total rows have none (budgets need none). A day row
written before the breakdown existed (or whose breakdown was lost) shows its remainder as route
and model ``unknown`` (``with_remainder``), so the parts always add up to the row.

Cost is kept in nano-USD integers so sums are exact, and shown in USD.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import add, sub
from typing import Literal

Scope = Literal["tenant", "key"]
Period = Literal["day", "month", "total"]
#: hash field names, in ``UsageDelta`` order
FIELDS = ("r", "e", "p", "c", "ca", "rs", "n", "tc")
#: where a row (a list in ``FIELDS`` order) holds what a budget compares
PROMPT_TOKENS, COMPLETION_TOKENS, COST_NANO = FIELDS.index("p"), FIELDS.index("c"), FIELDS.index("n")
DEFAULT_RETENTION_DAYS = 400
#: the route and model of counts a day row holds without a breakdown (written before it existed)
UNKNOWN = "unknown"
#: the model of a request no target answered (refused, failed before any answer)
NO_MODEL = "none"
#: a request's breakdown: (route, model, values in ``FIELDS`` order) per model that answered it
Dims = Sequence[tuple[str, str, Sequence[int]]]
#: one day row's breakdown: (route, model) -> values in ``FIELDS`` order
Breakdown = dict[tuple[str, str], list[int]]


@dataclass(slots=True)
class UsageDelta:
    requests: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cost_nano: int = 0
    tool_calls: int = 0

    def values(self) -> tuple[int, ...]:
        return (self.requests, self.errors, self.prompt_tokens, self.completion_tokens, self.cached_tokens,
                self.reasoning_tokens, self.cost_nano, self.tool_calls)


@dataclass(frozen=True, slots=True)
class Want:
    """A budget row a request is admitted against: whose, which period, in USD or tokens, and its limit
    (nano-USD or tokens)."""

    scope: Scope
    period: Period
    usd: bool
    limit: int


@dataclass(slots=True)
class Spent:
    """What a budget compares: tokens (prompt + completion) and cost in nano-USD."""

    tokens: int = 0
    cost_nano: int = 0


_periods: tuple[int, tuple[str, str, str]] = (-1, ("", "", ""))


def period_names(now: float) -> tuple[str, str, str]:
    """The rows a write at ``now`` lands in: ``d:YYYY-MM-DD``, ``m:YYYY-MM``, ``all`` (UTC).

    Formatted once per UTC day (strftime is a visible share of a request's cost otherwise).
    """
    global _periods
    day_index = int(now // 86400)
    if day_index != _periods[0]:
        day = time.strftime("%Y-%m-%d", time.gmtime(now))
        _periods = (day_index, (f"d:{day}", f"m:{day[:7]}", "all"))
    return _periods[1]


def merge(row: list[int], values: Sequence[int]) -> None:
    row[:] = map(add, row, values)


def with_remainder(total: Sequence[int], parts: Breakdown) -> Breakdown:
    """``parts`` plus, under (``UNKNOWN``, ``UNKNOWN``), what the row counts beyond them (rows from
    before the breakdown); nothing added when the parts account for all of it."""
    rest = list(total)
    for values in parts.values():
        rest[:] = map(sub, rest, values)
    if any(rest):
        merged = parts.get((UNKNOWN, UNKNOWN))
        if merged is None:
            parts[(UNKNOWN, UNKNOWN)] = rest
        else:
            merge(merged, rest)
    return parts


def period_name(period: Period, now: float) -> str:
    return period_names(now)[("day", "month", "total").index(period)]


class UsageStore(ABC):
    """Where the aggregates live; every async method is one store round trip at most.

    ``add_now`` is what a request calls: synchronous, no store round trip (the in-process store adds
    at once, Redis queues for its next flush); False means the delta was dropped (too much waiting).
    ``on_error(op, cause)`` hears about failures that have no caller to raise to (a background flush).
    """

    on_error: Callable[[str, BaseException | str], None] | None = None

    @abstractmethod
    def add_now(self, tenant: str, key_id: str, values: tuple[int, ...], now: float,
                release: str | None = None, dims: Dims = ()) -> bool:
        """Add ``values`` (``UsageDelta`` order) to the tenant's rows and (when ``key_id``) the key's rows,
        now or at the next flush; ``release``: the request's budget reservation (``reserve``), given
        back in the same write, so its spending is never out of sight in between; ``dims``: the
        values split by route and model, kept on the day rows; they must add up to ``values`` (the
        stores keep the parts and sum them into the rows); without them the counts have no
        breakdown (they read as ``UNKNOWN``)."""

    @abstractmethod
    async def reserve(self, tenant: str, key_id: str, wants: list[Want], tokens: int, cost_nano: int, rid: str,
                      lease_s: float, now: float) -> tuple[int, list[Spent], list[Spent]]:
        """Budget admission, one atomic step: unless a wanted row has reached its limit (what it spent plus
        what requests in flight reserved), reserve ``tokens`` and ``cost_nano`` on every wanted row as
        ``rid`` (given back by ``add_now(release=rid)``, or after ``lease_s`` if never).

        Returns the index of the first exhausted want (-1: reserved) and, per want, what it spent
        and what requests in flight had reserved on it (their sum is what the check compares).
        """

    @abstractmethod
    async def add(self, tenant: str, key_id: str, delta: UsageDelta, now: float, dims: Dims = ()) -> None:
        """``add_now`` and, for a store that queues, the write itself."""

    @abstractmethod
    async def drain(self, timeout_s: float) -> None:
        """At shutdown: write what is queued (bounded)."""

    @abstractmethod
    async def spent(self, tenant: str, key_id: str, wants: list[tuple[Scope, Period]], now: float) -> list[Spent]:
        """One ``Spent`` per wanted (scope, period), in order."""

    @abstractmethod
    async def days(self, tenant: str, key_id: str, days: list[str]) -> list[list[int]]:
        """The day rows (``YYYY-MM-DD``) of the tenant, or of its key when ``key_id``; zeros where none."""

    @abstractmethod
    async def breakdown(self, tenant: str, key_id: str, days: list[str]) -> list[Breakdown]:
        """Per day row (``YYYY-MM-DD``) of the tenant, or of its key when ``key_id``: its values by (route,
        model), the remainder without a breakdown under ``UNKNOWN`` (``with_remainder``); {} where none."""
