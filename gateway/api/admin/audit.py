"""``GET /admin/audit`` and ``GET /admin/tenants``: the audit log of any tenant, for the console (admin keys only).

``/v1/audit`` shows a tenant's log to that tenant's keys; an operator with an admin key reads any
tenant's here, with the same query (``tenant`` required; ``from``, ``to``, ``limit``, ``cursor``)
and the same entries and paging. ``/admin/tenants`` names the tenants there are (the config's
and the managed keys'), which is what the console offers to choose from.
"""

from __future__ import annotations

import orjson
from starlette.requests import Request

from gateway.api.admin.endpoint import admin_operation
from gateway.api.admin.usage import MAX_PARAM_CHARS
from gateway.api.approvals.endpoint import audit_view, decode_cursor, encode_cursor, parse_limit, parse_time
from gateway.api.driver import Operation
from gateway.api.request.lifecycle import Work
from gateway.api.services import AdminServices
from gateway.errors import bad_request
from gateway.http.json_response import JSONResponse
from gateway.store.audit.pages import audit_page, entry_key


async def admin_audit(request: Request, services: AdminServices, work: Work) -> JSONResponse:
    work.authenticate_admin()
    query = request.query_params
    tenant = query.get("tenant") or ""
    if not tenant:
        raise bad_request("'tenant' is required: the audit log is kept per tenant (GET /admin/tenants lists "
                          "them)", "tenant")
    if len(tenant) > MAX_PARAM_CHARS:
        raise bad_request(f"'tenant' is longer than {MAX_PARAM_CHARS} characters", "tenant")
    limit = parse_limit(query.get("limit"))
    before = decode_cursor(query.get("cursor"))
    since, until = parse_time(query.get("from"), "from"), parse_time(query.get("to"), "to")
    entries, more = await audit_page(services.audit, tenant, since, until, before, limit)
    cursor = encode_cursor(entry_key(entries[-1])) if more and entries else None
    data = [{**audit_view(entry), "tenant": tenant} for entry in entries]
    return JSONResponse(orjson.dumps({"object": "list", "data": data, "has_more": more, "next_cursor": cursor}))


async def admin_tenants(request: Request, services: AdminServices, work: Work) -> JSONResponse:
    work.authenticate_admin()
    tenants = await services.tenants.known()
    return JSONResponse(orjson.dumps({"object": "list", "data": tenants, "has_more": False}))


AUDIT: tuple[Operation[AdminServices], ...] = (admin_operation("GET", "/admin/audit", admin_audit),
                                               admin_operation("GET", "/admin/tenants", admin_tenants))
