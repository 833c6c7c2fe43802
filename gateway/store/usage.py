"""Daily usage aggregates per tenant and per key: the interface and the in-process store.

Every request adds one ``UsageDelta`` to six rows: the tenant's and the key's row of the day
(UTC), of the month, and of all time. Day rows answer ``GET /admin/usage``; month and total rows
let a budget check read one row per budget instead of summing days. Rows expire
``retention_days`` after their last write (Redis), so nothing lives forever by accident; a
``total`` row therefore counts spending since the last gap of that many days without traffic.

Cost is kept in nano-USD integers so sums are exact, and shown in USD.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import add
from typing import Literal

Scope = Literal["tenant", "key"]
Period = Literal["day", "month", "total"]
#: hash field names, in ``UsageDelta`` order
FIELDS = ("r", "e", "p", "c", "ca", "rs", "n", "tc")
DEFAULT_RETENTION_DAYS = 400


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
    def add_now(self, tenant: str, key_id: str, values: tuple[int, ...], now: float) -> bool:
        """Add ``values`` (``UsageDelta`` order) to the tenant's rows and (when ``key_id``) the key's rows,
        now or at the next flush."""

    @abstractmethod
    async def add(self, tenant: str, key_id: str, delta: UsageDelta, now: float) -> None:
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


class MemoryUsage(UsageStore):
    """One process's aggregates (``memory://``): gone at restart, like every memory-store record.

    A request only adds its counts to one pending row per (tenant, key, day); the six period rows
    are brought up to date when something reads them (or when many rows wait), so the hot path pays
    one dict update, not six.
    """

    #: pending rows applied at once past this many (a gateway nobody reads usage from stays bounded)
    MAX_PENDING = 1024

    def __init__(self, retention_days: int = DEFAULT_RETENTION_DAYS) -> None:
        self._rows: dict[tuple[str, str, str], list[int]] = {}
        self._pending: dict[tuple[str, str, tuple[str, str, str]], list[int]] = {}
        self._retention_s = retention_days * 86400
        self._pruned_day = ""

    async def add(self, tenant: str, key_id: str, delta: UsageDelta, now: float) -> None:
        self.add_now(tenant, key_id, delta.values(), now)

    async def drain(self, timeout_s: float) -> None:
        """Nothing leaves the process: there is nothing to write."""

    def add_now(self, tenant: str, key_id: str, values: tuple[int, ...], now: float) -> bool:
        periods = period_names(now)
        if periods[0] != self._pruned_day:  # a new day: once a day, old rows go
            self._apply()
            self._prune(now)
            self._pruned_day = periods[0]
        entry = (tenant, key_id, periods)
        row = self._pending.get(entry)
        if row is None:
            if len(self._pending) >= self.MAX_PENDING:
                self._apply()
            self._pending[entry] = list(values)
        else:
            merge(row, values)
        return True

    def _apply(self) -> None:
        pending, self._pending = self._pending, {}
        rows = self._rows
        for (tenant, key_id, periods), values in pending.items():
            for owner in (("", key_id) if key_id else ("",)):
                for period in periods:
                    row = rows.get((tenant, owner, period))
                    if row is None:
                        rows[(tenant, owner, period)] = list(values)
                    else:
                        merge(row, values)

    def _prune(self, now: float) -> None:
        """Day and month rows past the retention go (totals stay: they are one row per tenant or key)."""
        oldest = time.strftime("%Y-%m-%d", time.gmtime(now - self._retention_s))
        for key in [k for k in self._rows if (k[2].startswith("d:") and k[2][2:] < oldest)
                    or (k[2].startswith("m:") and k[2][2:] < oldest[:7])]:
            del self._rows[key]

    async def spent(self, tenant: str, key_id: str, wants: list[tuple[Scope, Period]], now: float) -> list[Spent]:
        self._apply()
        found = []
        for scope, period in wants:
            row = self._rows.get((tenant, key_id if scope == "key" else "", period_name(period, now)))
            found.append(Spent(row[2] + row[3], row[6]) if row else Spent())
        return found

    async def days(self, tenant: str, key_id: str, days: list[str]) -> list[list[int]]:
        self._apply()
        return [list(self._rows.get((tenant, key_id, f"d:{day}")) or [0] * len(FIELDS)) for day in days]
