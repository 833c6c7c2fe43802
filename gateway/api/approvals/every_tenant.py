"""An admin key in the approvals inbox: every tenant's paused loops, listed and decided (issue 52).

The inbox's API (``GET /v1/continuations``, ``GET /v1/audit``, ``/v1/continuations/{id}``) shows a
tenant's key its own tenant. An admin key (``auth.admin_keys``) signs in to the console, whose
Approvals tab is this inbox, and may see and decide every tenant's approvals: its listings merge
the known tenants' pages (each item names its ``tenant``; ``?tenant=`` narrows to one), and on one
continuation it names the tenant with ``?tenant=`` (continuations are kept per tenant).

It decides as itself: the audit log and the ``decided`` notification name the admin key, while
the resumed work stays the asker's (``Work.charge_to``: its limits, budget and usage rows).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request

from gateway.api.admin.tenants import Tenants
from gateway.api.admin.usage import MAX_PARAM_CHARS
from gateway.api.request.lifecycle import Work
from gateway.config.keys_section import secret_digest
from gateway.config.model import AdminKey, ApiKey
from gateway.errors import bad_request

#: an admin's listing merges at most this many tenants' pages (the known tenants, sorted); past it
#: ``has_more`` is true and ``?tenant=`` reaches the others
MAX_TENANTS = 200

#: a listed item with its sort key (the store's: expiry or time, then id; newest first)
Row = tuple[tuple[float, str], dict[str, Any]]


def presented_admin(work: Work) -> AdminKey | None:
    """The admin key the request presents as its Bearer token; None for any other (or no admin keys)."""
    admin_keys = work.lifecycle.admin_keys
    header = work.incoming.authorization
    if not admin_keys or not header:
        return None
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return admin_keys.get(secret_digest(token))


def tenant_param(request: Request, required: bool) -> str | None:
    tenant = request.query_params.get("tenant") or ""
    if not tenant:
        if required:
            raise bad_request("an admin key names the continuation's tenant: add '?tenant=' (every item of "
                              "GET /v1/continuations carries its tenant)", "tenant")
        return None
    if len(tenant) > MAX_PARAM_CHARS:
        raise bad_request(f"'tenant' is longer than {MAX_PARAM_CHARS} characters", "tenant")
    return tenant


async def decider_in(request: Request, work: Work, deciding: bool = False) -> ApiKey:
    """Who reads, decides or cancels one continuation: the caller's own key, or an admin key acting in
    ``?tenant=`` as a key of no secret that may decide (approver role, every route) named after it.

    ``deciding``: a resume, metered (``charge_to`` then moves the charge to the asker); an admin's read
    or cancel is recorded by name only, never as a usage row of its own.
    """
    admin = presented_admin(work)
    if admin is None:
        return await work.authenticate()
    tenant = tenant_param(request, required=True)
    assert tenant is not None
    key = ApiKey(key="", tenant=tenant, id=f"admin:{admin.name}", name=admin.name, role="approver")
    if deciding:
        work.act_for(key)
    else:
        work.key = key
    return key


async def admin_tenants(request: Request, tenants: Tenants) -> tuple[list[str], bool]:
    """The tenants an admin's listing covers: ``?tenant=``, or the known ones (and whether some were left out)."""
    one = tenant_param(request, required=False)
    if one is not None:
        return [one], False
    known = await tenants.known()
    return known[:MAX_TENANTS], len(known) > MAX_TENANTS


async def merged(tenants: list[str], left_out: bool, limit: int,
                 page: Callable[[str], Awaitable[tuple[list[Row], bool]]]
                 ) -> tuple[list[dict[str, Any]], bool, tuple[float, str] | None]:
    """The first ``limit`` rows of every tenant's page, newest first, each naming its tenant; whether more
    exist, and the last row's key (the next page's cursor, valid for every tenant: the order is global)."""
    pages = await asyncio.gather(*(page(tenant) for tenant in tenants))
    more = left_out
    rows: list[Row] = []
    for tenant, (found, tenant_more) in zip(tenants, pages, strict=True):
        more = more or tenant_more
        rows.extend((sort_key, {**item, "tenant": tenant}) for sort_key, item in found)
    rows.sort(key=lambda row: row[0], reverse=True)
    if len(rows) > limit:
        more, rows = True, rows[:limit]
    return [item for _, item in rows], more, rows[-1][0] if rows else None
