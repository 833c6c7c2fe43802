"""Budgets of keys and tenants: checked before every request and every resume.

Admission reserves the request's estimate, as ``tpm`` does: one atomic script call in the store
refuses the request when a budget's row has spent, plus what requests in flight reserved, its
limit, and otherwise reserves the estimate on every row (the key's budget and its tenant's) until
the request's usage is recorded (the reservation goes back in the same write) or its lease ends.
So a burst stops at the budget on every replica at once; the overshoot is at most what requests
in flight when it ran out spend above what they reserved.

Far from the limit a store call per request would cost about as much as the rest of a request,
so each reading (every store call answers with one; ``SpentCache``) lets this process admit
requests on its own while the reading's spent and reserved plus what it admitted since stay under
``FAR_SHARE`` (half) of the limit, and what it admitted since under ``LOCAL_SHARE`` (2 %) of it
(``take_local``): those reserve nothing, at most 2 % of a budget per process and reading. A
reading older than ``REFRESH_S``, or a budget nearer its limit, asks the store again. A budget
this process saw exhausted is refused from its reading, without a store call; between readings
the process adds what it records itself. A key or tenant without a budget costs nothing. A store
that cannot answer (down, or hung past ``store.fail_open_ms``) lets the request through, counted
in ``loopgate_store_fail_open_total{domain="budgets"}`` and
``loopgate_usage_store_failures_total{op="budget_check"}``: an outage of the accounting store
does not take the gateway down with it.

Every surface that runs the loop (chat completions, both resume ways, the Responses API) calls
``Meter.check_budget`` the same way.
"""

from __future__ import annotations

import asyncio
import calendar
import time
from dataclasses import dataclass, field

from gateway.config.model import ApiKey, Budget
from gateway.errors import GatewayError
from gateway.store.usage.base import Period, Scope, Spent
from gateway.usage.pricing import NANO


@dataclass(frozen=True, slots=True)
class BudgetCheck:
    """One budget to compare: whose it is (for the message), its row, and its limit."""

    scope: Scope
    owner: str
    period: Period
    unit: str
    limit: float
    #: the key id or the tenant name (``owner`` is how the message names it)
    ident: str = ""
    #: ``(scope, ident)``: the row's key in ``SpentCache`` (made once, read per request)
    row: tuple[str, str] = field(init=False, compare=False)
    #: whether a ``Reading``'s cost (nano-USD) or its tokens count for this budget, and the amount
    #: there that exhausts it: one test and one comparison per check on the request path
    usd: bool = field(init=False, compare=False)
    threshold: float = field(init=False, compare=False)
    #: ``take_local``'s caps, made once: ``FAR_SHARE`` and ``LOCAL_SHARE`` of ``threshold``
    far_cap: float = field(init=False, compare=False)
    local_cap: float = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "row", (self.scope, self.ident))
        usd = self.unit == "usd"
        object.__setattr__(self, "usd", usd)
        threshold = self.limit * NANO if usd else self.limit
        object.__setattr__(self, "threshold", threshold)
        object.__setattr__(self, "far_cap", threshold * FAR_SHARE)
        object.__setattr__(self, "local_cap", threshold * LOCAL_SHARE)

    def exhausted(self, seen: Reading) -> bool:
        """``seen`` has spent this budget."""
        return (seen.cost_nano if self.usd else seen.tokens) >= self.threshold


def refusal(check: BudgetCheck, spent: Spent, now: float, reserved: Spent | None = None) -> GatewayError:
    """The 429; ``reserved``: what requests in flight hold of the budget (their estimates), when that counted."""
    used = f"{spent.cost_nano / NANO:.6f} USD" if check.unit == "usd" else f"{spent.tokens} tokens"
    if reserved is not None and (reserved.cost_nano if check.unit == "usd" else reserved.tokens) > 0:
        held = f"{reserved.cost_nano / NANO:.6f} USD" if check.unit == "usd" else f"{reserved.tokens} tokens"
        used += f" (and requests in flight hold {held} more)"
    limit = f"{check.limit:g} USD" if check.unit == "usd" else f"{check.limit:g} tokens"
    when = {"day": "today (UTC)", "month": "this month (UTC)", "total": "in total"}[check.period]
    resets = reset_time(check.period, now)
    tail = f"; it resets at {resets}" if resets else "; raise the budget to continue"
    return GatewayError(429, f"Budget exhausted: {check.scope} {check.owner} has used {used} of its {limit} budget "
                             f"{when}{tail}.", "insufficient_quota", code="insufficient_quota")


def reset_time(period: Period, now: float) -> str | None:
    """When a period's spending starts again from zero (ISO 8601 UTC), None for ``total``."""
    if period == "total":
        return None
    day = time.gmtime(now)
    if period == "day":
        start = calendar.timegm((day.tm_year, day.tm_mon, day.tm_mday, 0, 0, 0)) + 86400
    else:
        year, month = (day.tm_year + 1, 1) if day.tm_mon == 12 else (day.tm_year, day.tm_mon + 1)
        start = calendar.timegm((year, month, 1, 0, 0, 0))
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start))


def budget_checks(key: ApiKey, tenant_budget: Budget | None) -> list[BudgetCheck]:
    """The budgets that apply to a request of ``key``: its own (when it has an id) and its tenant's."""
    checks = []
    budget = key.budget
    if budget is not None and key.id:
        checks.append(BudgetCheck("key", key.id, budget.period, budget.unit, budget.limit, key.id))
    if tenant_budget is not None:
        checks.append(BudgetCheck("tenant", repr(key.tenant), tenant_budget.period, tenant_budget.unit,
                                  tenant_budget.limit, key.tenant))
    return checks


#: how old a store reading of a budget's spending may get before the next check reads it again
REFRESH_S = 1.0
#: budget rows remembered per process (past it the memory starts over; they are re-read)
MAX_CACHED = 100_000
#: far from its limit a budget admits requests without a store call: while its last reading (spent
#: plus reserved) and what this process admitted since stay under this share of the limit ...
FAR_SHARE = 0.5
#: ... and what this process admitted since that reading stays under this share (2 %, as a ``tpm``
#: slice); a budget too small for one request's estimate in that share is exact per request
LOCAL_SHARE = 0.02


class Reading:
    """A budget row as this process knows it: the store's reading plus what this process recorded since."""

    __slots__ = ("cost_nano", "local", "period", "read_at", "reserved", "tokens")

    def __init__(self, read_at: float, period: Period, tokens: int, cost_nano: int, reserved: int = 0) -> None:
        self.read_at = read_at  # monotonic
        self.period = period
        self.tokens = tokens
        self.cost_nano = cost_nano
        #: what requests in flight had reserved at the reading, in the budget's unit
        self.reserved = reserved
        #: the estimates this process admitted since the reading without a store call, in the budget's unit
        self.local = 0

    def spent(self) -> Spent:
        return Spent(self.tokens, self.cost_nano)


class SpentCache:
    """Per budget row: a store reading (at most ``REFRESH_S`` old) plus what this process recorded since.

    ``reading`` marks the rows whose store read is under way (see ``stale``), so concurrent checks
    do not each read the same row.
    """

    __slots__ = ("_reading", "_seen")

    def __init__(self) -> None:
        # (scope, key id or tenant) -> its reading
        self._seen: dict[tuple[str, str], Reading] = {}
        # (scope, key id or tenant) -> resolved when the read under way for that row is over
        self._reading: dict[tuple[str, str], asyncio.Future[None]] = {}

    def stale(self, checks: list[BudgetCheck], now: float) -> list[BudgetCheck]:
        """The checks whose row needs a reading and is not being read already."""
        found = []
        for check in checks:
            row = (check.scope, check.ident)
            seen = self._seen.get(row)
            stale = seen is None or now - seen.read_at >= REFRESH_S or seen.period != check.period
            if stale and row not in self._reading:
                found.append(check)
        return found

    def needs_store(self, checks: list[BudgetCheck], now: float) -> bool:
        """Whether judging ``checks`` has to read the store or wait for a read (``stale`` or ``waits``)."""
        reading = self._reading
        for check in checks:
            row = (check.scope, check.ident)
            seen = self._seen.get(row)
            if seen is None or seen.period != check.period:
                return True  # no usable reading: read it, or wait for the read under way
            if now - seen.read_at >= REFRESH_S and row not in reading:
                return True
        return False

    def judge_now(self, checks: list[BudgetCheck], now: float) -> tuple[BudgetCheck, Spent] | bool:
        """The request path's one pass: True when a row needs the store (``needs_store``); else the first
        exhausted check with what its row spent, or False when every budget has room."""
        reading, seen_rows = self._reading, self._seen
        for check in checks:
            row = check.row
            seen = seen_rows.get(row)
            if seen is None or seen.period != check.period or (now - seen.read_at >= REFRESH_S and row not in reading):
                return True
            if check.exhausted(seen):
                return check, seen.spent()
        return False

    def waits(self, checks: list[BudgetCheck]) -> list[asyncio.Future[None]]:
        """The reads under way that a check has to wait for: those of rows with no usable reading yet."""
        found = []
        for check in checks:
            pending = self._reading.get((check.scope, check.ident))
            if pending is not None:
                seen = self._seen.get((check.scope, check.ident))
                if seen is None or seen.period != check.period:
                    found.append(pending)
        return found

    def reading(self, checks: list[BudgetCheck]) -> asyncio.Future[None]:
        """Mark the rows of ``checks`` as being read; ``read_over`` ends it, however the read went."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for check in checks:
            self._reading[(check.scope, check.ident)] = done
        return done

    def read_over(self, checks: list[BudgetCheck], done: asyncio.Future[None]) -> None:
        for check in checks:
            if self._reading.get((check.scope, check.ident)) is done:
                del self._reading[(check.scope, check.ident)]
        if not done.done():
            done.set_result(None)

    def remember(self, checks: list[BudgetCheck], spent: list[Spent], now: float,
                 reserved: list[Spent] | None = None) -> None:
        if len(self._seen) >= MAX_CACHED:
            self._seen.clear()
        for index, (check, amount) in enumerate(zip(checks, spent, strict=True)):
            held = reserved[index] if reserved is not None else None
            self._seen[(check.scope, check.ident)] = Reading(
                now, check.period, amount.tokens, amount.cost_nano,
                0 if held is None else held.cost_nano if check.usd else held.tokens)

    def take_local(self, checks: list[BudgetCheck], tokens: int, cost_nano: int) -> bool:
        """Admit a request of this estimate without the store, when every budget is far from its limit.

        True (and the estimate counted against the readings) when, for every check, the reading's
        spent and reserved plus what this process admitted since, plus this request, stay under
        ``FAR_SHARE`` of the limit, and what was admitted since stays under ``LOCAL_SHARE`` of it.
        The caller has just seen every reading fresh (``judge_now`` False). Each process admits at
        most ``LOCAL_SHARE`` of a budget per reading this way, reserving nothing.
        """
        seen_rows = self._seen
        if len(checks) == 1:  # the common case: one budget, one pass
            check = checks[0]
            seen = seen_rows[check.row]
            if check.usd:
                local = seen.local + cost_nano
                used = seen.cost_nano + seen.reserved + local
            else:
                local = seen.local + tokens
                used = seen.tokens + seen.reserved + local
            if local > check.local_cap or used > check.far_cap:
                return False
            seen.local = local
            return True
        for check in checks:
            seen = seen_rows[check.row]
            local = seen.local + (cost_nano if check.usd else tokens)
            used = (seen.cost_nano if check.usd else seen.tokens) + seen.reserved + local
            if local > check.local_cap or used > check.far_cap:
                return False
        for check in checks:
            seen_rows[check.row].local += cost_nano if check.usd else tokens
        return True

    def spent(self, check: BudgetCheck) -> Spent | None:
        seen = self._seen.get((check.scope, check.ident))
        return None if seen is None else seen.spent()

    def over(self, check: BudgetCheck) -> Spent | None:
        """What the row has spent when that exhausts ``check``'s budget, else None (also with no reading)."""
        seen = self._seen.get((check.scope, check.ident))
        if seen is None:
            return None
        if check.exhausted(seen):
            return seen.spent()
        return None

    def add(self, checks: list[BudgetCheck], tokens: int, cost_nano: int) -> None:
        """A request this process recorded, of a key with these checks: counted by the next check of
        their rows without waiting for a reading. (Every key of a tenant with a budget has that
        tenant's check: no row the request counts for is missed.)"""
        seen_rows = self._seen
        for check in checks:
            seen = seen_rows.get(check.row)
            if seen is not None:
                seen.tokens += tokens
                seen.cost_nano += cost_nano
