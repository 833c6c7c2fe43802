"""Budgets of keys and tenants: checked before every request and every resume, from the usage aggregates.

The check is one store read (one script call; the month and total rows exist for exactly this), and a
key or tenant without a budget costs no store call at all. It is a soft limit: spending is
compared before a request starts, so a loop that crosses the budget mid-way finishes, and
requests already running when it is crossed finish too; the next one is refused with 429
``insufficient_quota``. A store that cannot answer lets the request through (logged, counted in
``loopgate_usage_store_failures_total{op="budget_check"}``): an outage of the accounting store
does not take the gateway down with it.

Every surface that runs the loop (chat completions, both resume ways, the Responses API) calls
``Metering.check_budget`` the same way.
"""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass

from gateway.config.model import ApiKey, Budget
from gateway.errors import GatewayError
from gateway.store.usage import Period, Scope, Spent
from gateway.usage.pricing import NANO


@dataclass(frozen=True, slots=True)
class BudgetCheck:
    """One budget to compare: whose it is (for the message), its row, and its limit."""

    scope: Scope
    owner: str
    period: Period
    unit: str
    limit: float


def exhausted(check: BudgetCheck, spent: Spent) -> bool:
    if check.unit == "usd":
        return spent.cost_nano >= check.limit * NANO
    return spent.tokens >= check.limit


def refusal(check: BudgetCheck, spent: Spent, now: float) -> GatewayError:
    used = f"{spent.cost_nano / NANO:.6f} USD" if check.unit == "usd" else f"{spent.tokens} tokens"
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
        checks.append(BudgetCheck("key", key.id, budget.period, budget.unit, budget.limit))
    if tenant_budget is not None:
        checks.append(BudgetCheck("tenant", repr(key.tenant), tenant_budget.period, tenant_budget.unit,
                                  tenant_budget.limit))
    return checks
