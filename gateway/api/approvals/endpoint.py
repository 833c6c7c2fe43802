"""``GET /v1/continuations`` (the tenant's paused loops) and ``GET /v1/audit`` (who decided what).

Both list newest first with an opaque cursor (base64url of the last entry's sort key) and a
bounded ``limit`` (default 20, at most 100). Any key of the tenant may read them: caller keys
and approver keys alike (an approver may list and decide, not call models). An admin key reads
every tenant's (``every_tenant``).
"""

from __future__ import annotations

import base64
import binascii
import math
from datetime import UTC, datetime
from typing import Any

import orjson
from starlette.requests import Request

from gateway.api.approvals.every_tenant import Row, admin_tenants, merged, presented_admin
from gateway.api.driver import Operation, RoutedSurface
from gateway.api.request.lifecycle import Work
from gateway.api.services import ApprovalServices, approval_services
from gateway.config.model import ApiKey
from gateway.errors import bad_request
from gateway.http.json_response import JSONResponse
from gateway.loop.approvals import with_status
from gateway.store.audit.pages import audit_page, entry_key

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
# A cursor the gateway issues is well under this; a longer one is refused before it is decoded.
MAX_CURSOR = 512
# With a status filter, at most this many store pages are read to fill one response page.
MAX_FILTER_PAGES = 5
# ``pending`` is the one word for a paused continuation waiting for its answer (the objects' ``status``);
# ``paused``, the filter's first spelling, stays accepted as its alias so existing calls keep working.
STATUS_FILTERS = {"pending": ("pending",), "paused": ("pending",), "claimed": ("claimed",),
                  "all": ("pending", "claimed")}


def key_identity(key: ApiKey) -> tuple[str, str]:
    """The key's public ``id`` and ``name`` (never the secret)."""
    return key.id, key.name


def parse_limit(raw: str | None) -> int:
    if raw is None or raw == "":
        return DEFAULT_LIMIT
    try:
        value = int(raw)
    except ValueError:
        raise bad_request(f"'limit' must be an integer between 1 and {MAX_LIMIT}", "limit") from None
    if not 1 <= value <= MAX_LIMIT:
        raise bad_request(f"'limit' must be an integer between 1 and {MAX_LIMIT}", "limit")
    return value


def encode_cursor(key: tuple[float, str]) -> str:
    return base64.urlsafe_b64encode(orjson.dumps([key[0], key[1]])).decode().rstrip("=")


def decode_cursor(raw: str | None) -> tuple[float, str] | None:
    if raw is None or raw == "":
        return None
    try:
        if len(raw) > MAX_CURSOR:
            raise ValueError
        value = orjson.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        if (not isinstance(value, list) or len(value) != 2 or not isinstance(value[0], (int, float))
                or isinstance(value[0], bool) or not isinstance(value[1], str) or not math.isfinite(value[0])):
            raise ValueError
    except (ValueError, binascii.Error, orjson.JSONDecodeError):
        raise bad_request("'cursor' is not a cursor this gateway issued", "cursor") from None
    return float(value[0]), value[1]


def parse_time(raw: str | None, param: str) -> float | None:
    """Epoch seconds or ISO 8601 (a time without an offset is UTC)."""
    if raw is None or raw == "":
        return None
    if len(raw) <= 64:
        try:
            value = float(raw)
            if math.isfinite(value):
                return value
        except ValueError:
            pass
        try:
            parsed = datetime.fromisoformat(raw)
            return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
        except ValueError:
            pass
    raise bad_request(f"'{param}' must be epoch seconds or an ISO 8601 time", param)


#: an admin key's listings say so (``scope``): the inbox then names each item's tenant
ALL_TENANTS = {"scope": "all_tenants"}


def _list(data: list[dict[str, Any]], more: bool, last: tuple[float, str] | None,
          extra: dict[str, str] | None = None) -> JSONResponse:
    cursor = encode_cursor(last) if more and last is not None else None
    body = {"object": "list", "data": data, "has_more": more, "next_cursor": cursor, **(extra or {})}
    return JSONResponse(orjson.dumps(body))


async def _tenant_page(services: ApprovalServices, tenant: str, limit: int, before: tuple[float, str] | None,
                       wanted: tuple[str, ...]) -> tuple[list[Row], bool, tuple[float, str] | None]:
    """Up to ``limit`` of a tenant's continuations in ``wanted`` states, whether more exist, and the last
    entry read (the cursor: past the entries the filter left out too)."""
    data: list[Row] = []
    last = before
    more = True
    for _ in range(MAX_FILTER_PAGES):
        entries, more = await services.continuations.page(tenant, limit - len(data), last)
        for entry in entries:
            last = (float(entry["_score"]), str(entry["id"]))
            if entry["status"] in wanted:
                data.append((last, with_status(entry, entry["status"])))
        if not more or len(data) >= limit:
            break
    return data, more, last


async def list_continuations(request: Request, services: ApprovalServices, work: Work) -> JSONResponse:
    """The caller's tenant's continuations; an admin key's: every tenant's (``every_tenant``)."""
    query = request.query_params
    admin = presented_admin(work)
    key = None if admin is not None else await work.authenticate()
    limit = parse_limit(query.get("limit"))
    before = decode_cursor(query.get("cursor"))
    status = query.get("status") or "all"
    wanted = STATUS_FILTERS.get(status)
    if wanted is None:
        raise bad_request("'status' must be one of: pending (alias: paused), claimed, all", "status")
    if key is not None:
        rows, more, last = await _tenant_page(services, key.tenant, limit, before, wanted)
        return _list([item for _, item in rows], more, last)
    work.authenticate_admin()  # recorded as the admin key
    tenants, left_out = await admin_tenants(request, services.tenants)

    async def page(tenant: str) -> tuple[list[Row], bool]:
        rows, more, _ = await _tenant_page(services, tenant, limit, before, wanted)
        return rows, more

    data, more, last = await merged(tenants, left_out, limit, page)
    return _list(data, more, last, ALL_TENANTS)


def audit_view(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry as listed. A key's change (``key.created``/``key.updated``/``key.revoked``) names the key it
    changed in ``key``, the admin key that changed it in ``admin`` and the fields set in ``changes``."""
    view = {"id": entry.get("id"), "object": "audit.entry", "event": entry.get("event"),
            "created_at": entry.get("ts"), "key": {"id": entry.get("key_id"), "name": entry.get("key_name")},
            "tool": entry.get("tool"), "tool_call_id": entry.get("tool_call_id"),
            "continuation_id": entry.get("continuation_id"), "arguments_sha256": entry.get("arguments_sha256"),
            "reason": entry.get("reason")}
    if "admin" in entry:
        view["admin"] = entry["admin"]
        view["changes"] = entry.get("changes") or []
    return view


async def list_audit(request: Request, services: ApprovalServices, work: Work) -> JSONResponse:
    """The caller's tenant's audit log; an admin key's: every tenant's, merged newest first."""
    query = request.query_params
    admin = presented_admin(work)
    key = None if admin is not None else await work.authenticate()
    limit = parse_limit(query.get("limit"))
    before = decode_cursor(query.get("cursor"))
    since, until = parse_time(query.get("from"), "from"), parse_time(query.get("to"), "to")
    if key is not None:
        entries, more = await audit_page(services.audit, key.tenant, since, until, before, limit)
        last = entry_key(entries[-1]) if entries else None
        return _list([audit_view(e) for e in entries], more, last)
    work.authenticate_admin()
    tenants, left_out = await admin_tenants(request, services.tenants)

    async def page(tenant: str) -> tuple[list[Row], bool]:
        entries, more = await audit_page(services.audit, tenant, since, until, before, limit)
        return [(entry_key(e), audit_view(e)) for e in entries], more

    data, more, last = await merged(tenants, left_out, limit, page)
    return _list(data, more, last, ALL_TENANTS)


#: the inbox's listings
APPROVALS = RoutedSurface((
    Operation("GET", "/v1/continuations", list_continuations, approval_services),
    Operation("GET", "/v1/audit", list_audit, approval_services),
))
