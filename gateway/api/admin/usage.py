"""``GET /admin/usage``: daily usage rows per tenant or per key (``auth.admin_keys`` only).

Query: ``tenant`` (one tenant; absent: every known tenant, from the config and the managed keys),
``key`` (a key id: that key's rows; its tenant is looked up unless ``tenant`` is given, which
also reaches a deleted key's rows), ``from`` and ``to`` (``YYYY-MM-DD``, UTC, inclusive, from
1970-01-01 to 9999-12-31; default the last 30 days up to today; at most ``MAX_DAYS`` days). Days
without traffic are left out.

``route`` and ``model`` keep only the usage of that route (its metrics label) or that answering
target (``provider:model``); ``group_by`` (``route``, ``model`` or both, comma-separated) splits
each day's row by them. Every row carries ``route`` and ``model``: the value it is split or
filtered by, null where it sums over all (the rows of before, unchanged otherwise). Counts a day
row holds from before the breakdown existed show as route and model ``unknown``.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import orjson
from starlette.requests import Request

from gateway.api.admin.endpoint import admin_operation
from gateway.api.driver import Operation
from gateway.api.request.lifecycle import Work
from gateway.api.services import AdminServices
from gateway.errors import GatewayError, bad_request, quoted
from gateway.http.json_response import JSONResponse
from gateway.store.usage.base import FIELDS, Breakdown, merge
from gateway.usage.pricing import usd

#: the widest date range one request may ask for (rows are read in one pipeline per tenant)
MAX_DAYS = 366
DEFAULT_DAYS = 30
#: tenants and key ids are short labels; longer values cannot exist
MAX_PARAM_CHARS = 100
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
#: what ``group_by`` may name
DIMENSIONS = ("route", "model")
#: the dates a query may name: the default range reaches 30 days before ``to`` without leaving the calendar
EARLIEST_DAY = dt.date(1970, 1, 1)


def _date(value: str | None, name: str, default: dt.date) -> dt.date:
    if value is None:
        return default
    try:
        if not _DATE.fullmatch(value):
            raise ValueError
        day = dt.date.fromisoformat(value)
    except ValueError:
        raise bad_request(f"{name!r} must be a date YYYY-MM-DD (UTC), got {quoted(value, 20)}", name,
                          "invalid_date") from None
    if day < EARLIEST_DAY:
        raise bad_request(f"{name!r} must be a date from {EARLIEST_DAY.isoformat()} to 9999-12-31, got "
                          f"{quoted(value, 20)}", name, "invalid_date")
    return day


def _param(request: Request, name: str) -> str | None:
    value = request.query_params.get(name)
    if value is None or value == "":
        return None
    if len(value) > MAX_PARAM_CHARS:
        raise bad_request(f"{name!r} is longer than {MAX_PARAM_CHARS} characters", name)
    return value


def day_range(start: str | None, end: str | None) -> list[str]:
    today = dt.datetime.now(dt.UTC).date()
    last = _date(end, "to", today)
    first = _date(start, "from", last - dt.timedelta(days=DEFAULT_DAYS - 1))
    if first > last:
        raise bad_request("'from' is after 'to'", "from", "invalid_date")
    count = (last - first).days + 1
    if count > MAX_DAYS:
        raise bad_request(f"the range holds {count} days; ask for at most {MAX_DAYS} at once", "from",
                          "range_too_large")
    return [(first + dt.timedelta(days=i)).isoformat() for i in range(count)]


def group_by(value: str | None) -> tuple[bool, bool]:
    """``group_by``: whether rows are split by route, by model."""
    if value is None:
        return False, False
    names = [name.strip() for name in value.split(",")]
    wrong = [name for name in names if name not in DIMENSIONS]
    if wrong:
        raise bad_request(f"'group_by' takes route and/or model (comma-separated), got {quoted(wrong[0], 40)}",
                          "group_by", "invalid_group_by")
    return "route" in names, "model" in names


def split(parts: Breakdown, route: str | None, model: str | None,
          by: tuple[bool, bool]) -> list[tuple[str | None, str | None, list[int]]]:
    """One day's breakdown filtered by ``route``/``model`` and summed into the groups ``by`` asks for."""
    groups: dict[tuple[str | None, str | None], list[int]] = {}
    for (part_route, part_model), values in parts.items():
        if (route is not None and part_route != route) or (model is not None and part_model != model):
            continue
        group = (part_route if by[0] else route, part_model if by[1] else model)
        found = groups.get(group)
        if found is None:
            groups[group] = list(values)
        else:
            merge(found, values)
    return [(r, m, values) for (r, m), values in sorted(groups.items(), key=lambda item: (item[0][0] or "",
                                                                                          item[0][1] or ""))]


def row(day: str, tenant: str, key_id: str, values: list[int], route: str | None = None,
        model: str | None = None) -> dict[str, Any]:
    counts = dict(zip(FIELDS, values, strict=True))
    return {"object": "usage.daily", "date": day, "tenant": tenant, "key_id": key_id or None,
            "route": route, "model": model,
            "requests": counts["r"], "errors": counts["e"], "prompt_tokens": counts["p"],
            "completion_tokens": counts["c"], "total_tokens": counts["p"] + counts["c"],
            "cached_tokens": counts["ca"], "reasoning_tokens": counts["rs"], "cost_usd": usd(counts["n"]),
            "tool_calls": counts["tc"]}


async def get_usage(request: Request, services: AdminServices, work: Work) -> JSONResponse:
    work.authenticate_admin()
    store = services.usage
    if store is None:
        raise GatewayError(404, "usage is not recorded: usage.record is off", "not_found_error",
                           code="usage_disabled")
    days = day_range(_param(request, "from"), _param(request, "to"))
    tenant, key_id = _param(request, "tenant"), _param(request, "key") or ""
    if key_id and tenant is None:
        tenant = await services.tenants.of_key(key_id)
        if tenant is None:
            raise GatewayError(404, f"no API key with id {quoted(key_id)} (for a deleted key's usage, "
                               "name its tenant too)", "not_found_error", "key", "key_not_found")
    route, model = _param(request, "route"), _param(request, "model")
    by = group_by(_param(request, "group_by"))
    tenants = [tenant] if tenant is not None else await services.tenants.known()
    data = []
    for name in tenants:
        if route is None and model is None and by == (False, False):
            for day, values in zip(days, await store.days(name, key_id, days), strict=True):
                if any(values):
                    data.append(row(day, name, key_id, values))
            continue
        for day, parts in zip(days, await store.breakdown(name, key_id, days), strict=True):
            for part_route, part_model, values in split(parts, route, model, by):
                if any(values):
                    data.append(row(day, name, key_id, values, part_route, part_model))
    return JSONResponse(orjson.dumps({"object": "list", "data": data, "has_more": False}))


USAGE: tuple[Operation[AdminServices], ...] = (admin_operation("GET", "/admin/usage", get_usage),)
