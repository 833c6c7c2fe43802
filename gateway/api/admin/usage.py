"""``GET /admin/usage``: daily usage rows per tenant or per key (``auth.admin_keys`` only).

Query: ``tenant`` (one tenant; absent: every known tenant, from the config and the managed keys),
``key`` (a key id: that key's rows; its tenant is looked up unless ``tenant`` is given, which
also reaches a deleted key's rows), ``from`` and ``to`` (``YYYY-MM-DD``, UTC, inclusive, from
1970-01-01 to 9999-12-31; default the last 30 days up to today; at most ``MAX_DAYS`` days). Days
without traffic are left out.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import orjson
from starlette.requests import Request
from starlette.routing import Route

from gateway.api.lifecycle import Work, endpoint
from gateway.api.runtime import Runtime
from gateway.errors import GatewayError, bad_request, quoted
from gateway.http.json_response import JSONResponse
from gateway.store.keys.base import tenant_of
from gateway.store.usage.base import FIELDS
from gateway.usage.pricing import usd

#: the widest date range one request may ask for (rows are read in one pipeline per tenant)
MAX_DAYS = 366
DEFAULT_DAYS = 30
#: tenants and key ids are short labels; longer values cannot exist
MAX_PARAM_CHARS = 100
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
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


async def known_tenants(runtime: Runtime) -> list[str]:
    tenants = {key.tenant for key in runtime.config.auth.keys} | set(runtime.config.tenants)
    _, records = await runtime.key_store.load()
    tenants |= {tenant for record in records if (tenant := tenant_of(record)) is not None}
    return sorted(tenants)


async def _key_tenant(runtime: Runtime, key_id: str) -> str | None:
    for key in runtime.config.auth.keys:
        if key.id == key_id:
            return key.tenant
    record = await runtime.key_store.get(key_id)
    return None if record is None else tenant_of(record)


def row(day: str, tenant: str, key_id: str, values: list[int]) -> dict[str, Any]:
    counts = dict(zip(FIELDS, values, strict=True))
    return {"object": "usage.daily", "date": day, "tenant": tenant, "key_id": key_id or None,
            "requests": counts["r"], "errors": counts["e"], "prompt_tokens": counts["p"],
            "completion_tokens": counts["c"], "total_tokens": counts["p"] + counts["c"],
            "cached_tokens": counts["ca"], "reasoning_tokens": counts["rs"], "cost_usd": usd(counts["n"]),
            "tool_calls": counts["tc"]}


async def get_usage(request: Request, runtime: Runtime, work: Work) -> JSONResponse:
    work.authenticate_admin()
    store = runtime.usage.store
    if store is None:
        raise GatewayError(404, "usage is not recorded: usage.record is off", "not_found_error",
                           code="usage_disabled")
    days = day_range(_param(request, "from"), _param(request, "to"))
    tenant, key_id = _param(request, "tenant"), _param(request, "key") or ""
    if key_id and tenant is None:
        tenant = await _key_tenant(runtime, key_id)
        if tenant is None:
            raise GatewayError(404, f"no API key with id {quoted(key_id)} (for a deleted key's usage, "
                               "name its tenant too)", "not_found_error", "key", "key_not_found")
    tenants = [tenant] if tenant is not None else await known_tenants(runtime)
    data = []
    for name in tenants:
        for day, values in zip(days, await store.days(name, key_id, days), strict=True):
            if any(values):
                data.append(row(day, name, key_id, values))
    return JSONResponse(orjson.dumps({"object": "list", "data": data, "has_more": False}))


def usage_routes() -> list[Route]:
    return [Route("/admin/usage", endpoint("/admin/usage", get_usage, metered=True), methods=["GET"])]
