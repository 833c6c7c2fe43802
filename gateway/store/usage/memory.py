"""Usage aggregates in this process (``memory://``)."""

from __future__ import annotations

import time

from gateway.store.usage.base import (
    COMPLETION_TOKENS,
    COST_NANO,
    DEFAULT_RETENTION_DAYS,
    FIELDS,
    PROMPT_TOKENS,
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
    with_remainder,
)

#: the route of pending counts that have no breakdown (a name no route has)
_NO_PART = "\x00"


class MemoryUsage(UsageStore):
    """One process's aggregates (``memory://``): gone at restart, like every memory-store record.

    A request only adds its counts to one pending row per (tenant, key, day, route, model); the six
    period rows and the breakdown are brought up to date when something reads them (or when many
    rows wait), so the hot path pays one dict update, not seven.
    """

    #: pending rows applied at once past this many (a gateway nobody reads usage from stays bounded)
    MAX_PENDING = 1024

    def __init__(self, retention_days: int = DEFAULT_RETENTION_DAYS) -> None:
        self._rows: dict[tuple[str, str, str], list[int]] = {}
        # (tenant, key id, periods, route, model) -> counts not yet applied: one entry per request's part
        # (``_NO_PART`` route: counts without a breakdown)
        self._pending: dict[tuple[str, str, tuple[str, str, str], str, str], list[int]] = {}
        # the day rows' breakdowns: (tenant, owner, "d:DAY") -> (route, model) -> values
        self._dims: dict[tuple[str, str, str], Breakdown] = {}
        self._retention_s = retention_days * 86400
        self._pruned_day = ""
        # budget reservations of requests in flight: row -> [tokens, nano]; rid -> (rows, tokens, nano, until)
        self._reserved: dict[tuple[str, str, str], list[int]] = {}
        self._holds: dict[str, tuple[list[tuple[str, str, str]], int, int, float]] = {}

    async def add(self, tenant: str, key_id: str, delta: UsageDelta, now: float, dims: Dims = ()) -> None:
        self.add_now(tenant, key_id, delta.values(), now, dims=dims)

    async def drain(self, timeout_s: float) -> None:
        """Nothing leaves the process: there is nothing to write."""

    def add_now(self, tenant: str, key_id: str, values: tuple[int, ...], now: float,
                release: str | None = None, dims: Dims = ()) -> bool:
        if release is not None:
            self._release(release)
        periods = period_names(now)
        if periods[0] != self._pruned_day:  # a new day: once a day, old rows go
            self._apply()
            self._prune(now)
            self._pruned_day = periods[0]
        pending = self._pending
        for route, model, part in dims or ((_NO_PART, "", values),):
            entry = (tenant, key_id, periods, route, model)
            row = pending.get(entry)
            if row is None:
                if len(pending) >= self.MAX_PENDING:
                    self._apply()
                pending[entry] = list(part)
            else:
                merge(row, part)
        return True

    def _apply(self) -> None:
        """Pending parts into the period rows (their sum) and the day rows' breakdowns."""
        pending, self._pending = self._pending, {}
        rows, all_dims = self._rows, self._dims
        for (tenant, key_id, periods, route, model), values in pending.items():
            for owner in (("", key_id) if key_id else ("",)):
                for period in periods:
                    row = rows.get((tenant, owner, period))
                    if row is None:
                        rows[(tenant, owner, period)] = list(values)
                    else:
                        merge(row, values)
                if route is _NO_PART:
                    continue
                parts = all_dims.setdefault((tenant, owner, periods[0]), {})
                part = parts.get((route, model))
                if part is None:
                    parts[(route, model)] = list(values)
                else:
                    merge(part, values)

    def _prune(self, now: float) -> None:
        """Day and month rows past the retention go (totals stay: they are one row per tenant or key)."""
        oldest = time.strftime("%Y-%m-%d", time.gmtime(now - self._retention_s))
        for key in [k for k in self._rows if (k[2].startswith("d:") and k[2][2:] < oldest)
                    or (k[2].startswith("m:") and k[2][2:] < oldest[:7])]:
            del self._rows[key]
        for key in [k for k in self._dims if k[2][2:] < oldest]:
            del self._dims[key]

    async def spent(self, tenant: str, key_id: str, wants: list[tuple[Scope, Period]], now: float) -> list[Spent]:
        self._apply()
        found = []
        for scope, period in wants:
            row = self._rows.get((tenant, key_id if scope == "key" else "", period_name(period, now)))
            found.append(Spent(row[PROMPT_TOKENS] + row[COMPLETION_TOKENS], row[COST_NANO]) if row else Spent())
        return found

    async def reserve(self, tenant: str, key_id: str, wants: list[Want], tokens: int, cost_nano: int, rid: str,
                      lease_s: float, now: float) -> tuple[int, list[Spent], list[Spent]]:
        self._apply()
        self._expire(time.monotonic())
        rows = [(tenant, key_id if want.scope == "key" else "", period_name(want.period, now)) for want in wants]
        found, reserved, refused = [], [], -1
        for index, (want, row) in enumerate(zip(wants, rows, strict=True)):
            spent_row = self._rows.get(row)
            held = self._reserved.get(row) or [0, 0]
            spent = Spent(spent_row[PROMPT_TOKENS] + spent_row[COMPLETION_TOKENS] if spent_row else 0,
                          spent_row[COST_NANO] if spent_row else 0)
            found.append(spent)
            reserved.append(Spent(held[0], held[1]))
            total = spent.cost_nano + held[1] if want.usd else spent.tokens + held[0]
            if refused < 0 and total >= want.limit:
                refused = index
        if refused < 0:
            for row in rows:
                held = self._reserved.setdefault(row, [0, 0])
                held[0] += tokens
                held[1] += cost_nano
            self._holds[rid] = (rows, tokens, cost_nano, time.monotonic() + lease_s)
        return refused, found, reserved

    def _release(self, rid: str) -> None:
        hold = self._holds.pop(rid, None)
        if hold is None:
            return
        rows, tokens, cost_nano, _ = hold
        for row in rows:
            held = self._reserved.get(row)
            if held is not None:
                held[0] -= tokens
                held[1] -= cost_nano
                if held[0] <= 0 and held[1] <= 0:
                    del self._reserved[row]

    def _expire(self, mono: float) -> None:
        """Reservations whose request never reported back (a bug, a crash mid-way) end with their lease."""
        for rid in [rid for rid, hold in self._holds.items() if hold[3] <= mono]:
            self._release(rid)

    async def days(self, tenant: str, key_id: str, days: list[str]) -> list[list[int]]:
        self._apply()
        return [list(self._rows.get((tenant, key_id, f"d:{day}")) or [0] * len(FIELDS)) for day in days]

    async def breakdown(self, tenant: str, key_id: str, days: list[str]) -> list[Breakdown]:
        self._apply()
        found = []
        for day in days:
            total = self._rows.get((tenant, key_id, f"d:{day}"))
            parts = {dim: list(values) for dim, values in self._dims.get((tenant, key_id, f"d:{day}"), {}).items()}
            found.append(with_remainder(total, parts) if total is not None else parts)
        return found
