"""``GET /admin/budgets``: every budget there is, what it has spent in its period and what is left (admin keys only).

The same rows the budget check reads before each request (``gateway/usage/budgets.py``), read
once now: tenants' budgets (``tenants.NAME.budget``) and keys' (config and managed, revoked ones
left out). ``spent`` and ``remaining`` are in the budget's unit (tokens, or USD with six
decimals); ``resets_at`` is when the period starts over (``null`` for ``total``). Query:
``tenant`` (only that tenant's budgets).
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from starlette.requests import Request

from gateway.api.admin.endpoint import admin_operation
from gateway.api.driver import Operation
from gateway.api.request.lifecycle import Work
from gateway.api.services import AdminServices
from gateway.config.keys_section import Budget
from gateway.errors import GatewayError
from gateway.http.json_response import JSONResponse
from gateway.store.keys.base import from_record
from gateway.store.usage.base import Scope, Spent
from gateway.usage.budgets import reset_time
from gateway.usage.pricing import NANO


def _entry(scope: Scope, tenant: str, key_id: str | None, name: str | None, budget: Budget, spent: Spent,
           now: float) -> dict[str, Any]:
    used = round(spent.cost_nano / NANO, 6) if budget.unit == "usd" else spent.tokens
    return {"object": "budget", "scope": scope, "tenant": tenant, "key_id": key_id, "key_name": name,
            "limit": budget.limit, "unit": budget.unit, "period": budget.period, "spent": used,
            "remaining": max(0, round(budget.limit - used, 6)), "resets_at": reset_time(budget.period, now)}


async def list_budgets(request: Request, services: AdminServices, work: Work) -> JSONResponse:
    work.authenticate_admin()
    store = services.usage
    if store is None:
        raise GatewayError(404, "usage is not recorded: usage.record is off", "not_found_error",
                           code="usage_disabled")
    only = request.query_params.get("tenant") or None
    now = time.time()
    data = []
    for name, tenant in sorted(services.tenant_config.items()):
        if tenant.budget is not None and only in (None, name):
            [spent] = await store.spent(name, "", [("tenant", tenant.budget.period)], now)
            data.append(_entry("tenant", name, None, None, tenant.budget, spent, now))
    keys = list(services.tenants.config_keys)
    _, records = await services.key_store.load()
    for record in records:
        try:
            keys.append(from_record(record)[1])
        except (KeyError, TypeError, ValueError, OverflowError, OSError, AttributeError):
            continue  # shown degraded by /admin/keys; it has no budget anyone can read
    for key in keys:
        if key.budget is None or not key.id or key.revoked or only not in (None, key.tenant):
            continue
        [spent] = await store.spent(key.tenant, key.id, [("key", key.budget.period)], now)
        data.append(_entry("key", key.tenant, key.id, key.name, key.budget, spent, now))
    return JSONResponse(orjson.dumps({"object": "list", "data": data, "has_more": False}))


BUDGETS: tuple[Operation[AdminServices], ...] = (admin_operation("GET", "/admin/budgets", list_budgets),)
