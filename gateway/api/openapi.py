"""``GET /openapi.json``: an OpenAPI 3.1 description of what the gateway adds to the provider APIs.

The OpenAI and Anthropic surfaces (``/v1/chat/completions``, ``/v1/responses``, ``/v1/messages``)
follow their providers' own published descriptions and are only listed here by reference; this
document describes the gateway's own endpoints: continuations (pause and resume), the approvals
inbox API and audit log, the admin API (keys, usage) and health. It is data, built once at import
and served as the same bytes every time; ``tests/test_openapi.py`` validates it with an OpenAPI
validator and checks that every path it names is a route of the app.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request

from gateway import __version__
from gateway.http.json_response import JSONResponse

_JSON = "application/json"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _ok(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {_JSON: {"schema": schema}}}


def _errors(*statuses: str) -> dict[str, Any]:
    return {status: {"$ref": f"#/components/responses/{_ERROR_NAMES[status]}"} for status in statuses}


_ERROR_NAMES = {"400": "BadRequest", "401": "Unauthorized", "404": "NotFound", "409": "Conflict",
                "503": "StoreUnavailable"}

_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string", "maxLength": 100}}
_LIMIT = {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
          "description": "Entries per page."}
_CURSOR = {"name": "cursor", "in": "query", "schema": {"type": "string"},
           "description": "The previous page's `next_cursor`."}


def _page(item: str) -> dict[str, Any]:
    return {"type": "object", "required": ["object", "data", "has_more"],
            "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": _ref(item)},
                           "has_more": {"type": "boolean"}, "next_cursor": {"type": ["string", "null"]}}}


_SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object", "required": ["error"],
        "properties": {"error": {"type": "object", "required": ["message", "type"], "properties": {
            "message": {"type": "string"}, "type": {"type": "string"},
            "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}},
    },
    "Continuation": {
        "type": "object", "required": ["id", "status"],
        "description": "A paused tool loop: the calls waiting for a result or a person's decision.",
        "properties": {
            "id": {"type": "string"}, "object": {"type": "string"},
            "status": {"type": "string", "description": "paused, or claimed (being resumed)"},
            "model": {"type": "string"}, "created_at": {"type": "number"}, "expires_at": {"type": "number"},
            "pending": {"type": "array", "items": _ref("PendingCall")},
        },
        "additionalProperties": True,
    },
    "PendingCall": {
        "type": "object", "required": ["tool_call_id", "name", "reason"],
        "description": "A call the loop waits for: the client's result, a person's approval, or the user's input "
                       "to a running server tool (`elicitation`, MCP).",
        "properties": {
            "tool_call_id": {"type": "string"}, "name": {"type": "string"},
            "reason": {"type": "string", "enum": ["client", "approval", "elicitation"]},
            "arguments": {"type": "string"}, "arguments_sha256": {"type": "string"},
            "approval_deadline": {"type": ["integer", "null"]}, "approval_expired": {"type": "boolean"},
            "elicitation": _ref("Elicitation"), "elicitation_deadline": {"type": ["integer", "null"]},
            "elicitation_expired": {"type": "boolean"}},
        "additionalProperties": True,
    },
    "Elicitation": {
        "type": "object", "required": ["server", "mode", "message"],
        "description": "What a running MCP tool asks the user: a form (`requested_schema`, flat) or a page to open "
                       "(`url`, never fetched by the gateway).",
        "properties": {"server": {"type": "string"}, "mode": {"type": "string", "enum": ["form", "url"]},
                       "message": {"type": "string"}, "requested_schema": {"type": "object"},
                       "url": {"type": "string"}},
    },
    "Decision": {
        "type": "object", "required": ["tool_call_id"],
        "description": "`approve` for an approval-required server tool, `output` for a client tool only (an `output` "
                       "for a call awaiting a decision is a 400 `approval_pending`/`elicitation_pending`), or "
                       "`action` (with `content` for an accepted form) for a call asking the user for input "
                       "(`elicitation`): fields `content` leaves out take the schema's `default`s, then it must "
                       "satisfy the question's `requested_schema` (a 400 naming the field otherwise).",
        "properties": {"tool_call_id": {"type": "string"}, "approve": {"type": "boolean"},
                       "reason": {"type": "string"}, "output": {"type": "string"},
                       "arguments_sha256": {"type": "string"},
                       "action": {"type": "string", "enum": ["accept", "decline", "cancel"]},
                       "content": {"type": "object", "additionalProperties": {
                           "type": ["string", "number", "integer", "boolean", "array"]}}},
    },
    "Decisions": {
        "type": "object", "required": ["decisions"],
        "properties": {"decisions": {"type": "array", "items": _ref("Decision")}, "stream": {"type": "boolean"},
                       "stream_options": {"type": "object", "properties": {"include_usage": {"type": "boolean"}}}},
    },
    "Deleted": {
        "type": "object", "required": ["id", "object", "deleted"],
        "properties": {"id": {"type": "string"}, "object": {"type": "string"}, "deleted": {"const": True}},
    },
    "AuditEntry": {
        "type": "object", "required": ["id", "object", "event"],
        "properties": {
            "id": {"type": ["string", "null"]}, "object": {"const": "audit.entry"}, "event": {"type": "string"},
            "created_at": {"type": ["number", "null"]},
            "key": {"type": "object", "properties": {"id": {"type": ["string", "null"]},
                                                     "name": {"type": ["string", "null"]}}},
            "tool": {"type": ["string", "null"]}, "tool_call_id": {"type": ["string", "null"]},
            "continuation_id": {"type": ["string", "null"]}, "arguments_sha256": {"type": ["string", "null"]},
            "reason": {"type": ["string", "null"]}, "admin": {"type": "object", "additionalProperties": True},
            "changes": {"type": "array", "items": {"type": "string"}},
        },
    },
    "Budget": {
        "type": "object", "required": ["limit"],
        "properties": {"limit": {"type": "number", "exclusiveMinimum": 0},
                       "unit": {"type": "string", "enum": ["tokens", "usd"]},
                       "period": {"type": "string", "enum": ["day", "month", "total"]}},
    },
    "KeyFields": {
        "type": "object",
        "description": "Editable fields of a managed key; `null` unsets one (PATCH).",
        "properties": {
            "name": {"type": "string"}, "role": {"type": "string", "enum": ["caller", "approver"]},
            "models": {"type": ["array", "null"], "items": {"type": "string"}},
            "tools": {"type": ["array", "null"], "items": {"type": "string"}},
            "rpm": {"type": ["integer", "null"]}, "tpm": {"type": ["integer", "null"]},
            "max_concurrent": {"type": ["integer", "null"]}, "headless": {"type": "boolean"},
            "budget": {"oneOf": [_ref("Budget"), {"type": "null"}]},
            "expires_at": {"type": ["string", "null"], "format": "date-time"},
        },
    },
    "NewKey": {"allOf": [_ref("KeyFields"), {"type": "object", "required": ["tenant"],
                                             "properties": {"tenant": {"type": "string"}}}]},
    "ApiKey": {
        "allOf": [_ref("KeyFields"), {"type": "object", "required": ["id", "object", "tenant"], "properties": {
            "id": {"type": "string"}, "object": {"const": "api_key"}, "tenant": {"type": "string"},
            "source": {"type": "string", "enum": ["config", "admin"]}, "revoked": {"type": "boolean"},
            "key": {"type": "string", "description": "The secret: in the create response only, shown once."}}}],
    },
    "UsageRow": {
        "type": "object",
        "properties": {k: {"type": "integer"} for k in (
            "requests", "errors", "prompt_tokens", "completion_tokens", "total_tokens", "cached_tokens",
            "reasoning_tokens", "tool_calls")} | {"date": {"type": "string", "format": "date"},
                                                  "tenant": {"type": "string"},
                                                  "key_id": {"type": ["string", "null"]},
                                                  "route": {"type": ["string", "null"]},
                                                  "model": {"type": ["string", "null"]},
                                                  "cost_usd": {"type": "number"}},
    },
    "Readiness": {
        "type": "object", "required": ["ready", "store"],
        "properties": {"ready": {"type": "boolean"},
                       "store": {"type": "object", "properties": {"kind": {"type": "string"},
                                                                  "reachable": {"type": "boolean"}}},
                       "circuits": {"type": "object", "additionalProperties": {"type": "string"}}},
    },
}

_PATHS: dict[str, Any] = {
    "/v1/continuations": {"get": {
        "tags": ["approvals"], "operationId": "listContinuations",
        "summary": "The tenant's paused loops, newest first (what the approvals inbox shows).",
        "parameters": [_LIMIT, _CURSOR, {"name": "status", "in": "query", "schema": {
            "type": "string", "enum": ["paused", "claimed", "all"], "default": "all"}}],
        "responses": {"200": _ok("A page of continuations.", _page("Continuation")), **_errors("400", "401", "503")},
    }},
    "/v1/continuations/{id}": {
        "parameters": [_ID],
        "get": {"tags": ["continuations"], "operationId": "getContinuation",
                "summary": "A paused loop and the tool calls it waits for.",
                "responses": {"200": _ok("The continuation.", _ref("Continuation")),
                              **_errors("401", "404", "503")}},
        "post": {"tags": ["continuations"], "operationId": "resumeContinuation",
                 "summary": "Resume with decisions (way B): approve or deny each call, give a client tool's output, or "
                            "answer a running tool's question (accept with content, decline, cancel). "
                            "Answers like the surface the loop was started on (chat completion or Anthropic message); "
                            "`stream: true` answers with server-sent events.",
                 "requestBody": {"required": True, "content": {_JSON: {"schema": _ref("Decisions")}}},
                 "responses": {"200": {"description": "The resumed loop's answer (or its next pause).",
                                       "content": {_JSON: {"schema": {"type": "object"}},
                                                   "text/event-stream": {"schema": {"type": "string"}}}},
                               **_errors("400", "401", "404", "409", "503")}},
        "delete": {"tags": ["continuations"], "operationId": "cancelContinuation",
                   "summary": "Cancel a paused loop: it can no longer be resumed.",
                   "responses": {"200": _ok("Cancelled.", _ref("Deleted")), **_errors("401", "404", "503")}},
    },
    "/v1/audit": {"get": {
        "tags": ["approvals"], "operationId": "listAudit",
        "summary": "The tenant's audit log: approvals, denials, expiries and admin changes, newest first.",
        "parameters": [_LIMIT, _CURSOR,
                       {"name": "from", "in": "query", "schema": {"type": "string", "format": "date-time"}},
                       {"name": "to", "in": "query", "schema": {"type": "string", "format": "date-time"}}],
        "responses": {"200": _ok("A page of audit entries.", _page("AuditEntry")), **_errors("400", "401", "503")},
    }},
    "/admin/keys": {
        "get": {"tags": ["admin"], "operationId": "listKeys", "security": [{"adminKey": []}],
                "summary": "Every key (config keys included, `source: config`); never a secret.",
                "parameters": [{"name": "tenant", "in": "query", "schema": {"type": "string"}}],
                "responses": {"200": _ok("The keys.", _page("ApiKey")), **_errors("401", "404", "503")}},
        "post": {"tags": ["admin"], "operationId": "createKey", "security": [{"adminKey": []}],
                 "summary": "Create a managed key; its secret is in this response only.",
                 "requestBody": {"required": True, "content": {_JSON: {"schema": _ref("NewKey")}}},
                 "responses": {"201": _ok("The new key, with its secret.", _ref("ApiKey")),
                               **_errors("400", "401", "404", "409", "503")}},
    },
    "/admin/keys/{id}": {
        "parameters": [_ID],
        "get": {"tags": ["admin"], "operationId": "getKey", "security": [{"adminKey": []}], "summary": "One key.",
                "responses": {"200": _ok("The key.", _ref("ApiKey")), **_errors("401", "404", "503")}},
        "patch": {"tags": ["admin"], "operationId": "updateKey", "security": [{"adminKey": []}],
                  "summary": "Change a managed key's fields (`tenant` cannot change; `null` unsets).",
                  "requestBody": {"required": True, "content": {_JSON: {"schema": _ref("KeyFields")}}},
                  "responses": {"200": _ok("The key as changed.", _ref("ApiKey")),
                                **_errors("400", "401", "404", "409", "503")}},
        "delete": {"tags": ["admin"], "operationId": "revokeKey", "security": [{"adminKey": []}],
                   "summary": "Revoke a managed key (it stays listed with `revoked: true`).",
                   "responses": {"200": _ok("Revoked.", _ref("Deleted")), **_errors("401", "404", "409", "503")}},
    },
    "/admin/usage": {"get": {
        "tags": ["admin"], "operationId": "getUsage", "security": [{"adminKey": []}],
        "summary": "Daily usage per tenant (or one key): requests, tokens, tool calls, cost.",
        "parameters": [{"name": name, "in": "query", "schema": {"type": "string"}}
                       for name in ("from", "to", "tenant", "key", "route", "model", "group_by")],
        "responses": {"200": _ok("Usage rows.", _page("UsageRow")), **_errors("400", "401", "404", "503")},
    }},
    "/admin/budgets": {"get": {
        "tags": ["admin"], "operationId": "listBudgets", "security": [{"adminKey": []}],
        "summary": "Every tenant and key budget: limit, spent in its period, remaining, when it resets.",
        "parameters": [{"name": "tenant", "in": "query", "schema": {"type": "string"}}],
        "responses": {"200": _ok("The budgets.", {"type": "object"}), **_errors("401", "404", "503")},
    }},
    "/admin/audit": {"get": {
        "tags": ["admin"], "operationId": "adminAudit", "security": [{"adminKey": []}],
        "summary": "Any tenant's audit log (the entries and paging of /v1/audit).",
        "parameters": [{"name": "tenant", "in": "query", "required": True, "schema": {"type": "string"}},
                       _LIMIT, _CURSOR,
                       {"name": "from", "in": "query", "schema": {"type": "string", "format": "date-time"}},
                       {"name": "to", "in": "query", "schema": {"type": "string", "format": "date-time"}}],
        "responses": {"200": _ok("A page of audit entries.", _page("AuditEntry")),
                      **_errors("400", "401", "404", "503")},
    }},
    "/admin/tenants": {"get": {
        "tags": ["admin"], "operationId": "listTenants", "security": [{"adminKey": []}],
        "summary": "The tenants there are (configured and of managed keys).",
        "responses": {"200": _ok("Tenant names.", {"type": "object"}), **_errors("401", "404", "503")},
    }},
    "/admin/console/overview": {"get": {
        "tags": ["admin"], "operationId": "consoleOverview", "security": [{"adminKey": []}],
        "summary": "The console's overview from every replica's rollups: series per route, failovers, circuits, "
                   "paused continuations.",
        "parameters": [{"name": "minutes", "in": "query", "schema": {"type": "integer", "minimum": 1}}],
        "responses": {"200": _ok("The overview.", {"type": "object"}), **_errors("400", "401", "404", "503")},
    }},
    "/healthz": {"get": {"tags": ["operations"], "operationId": "healthz", "security": [],
                         "summary": "The process answers.",
                         "responses": {"200": _ok("Alive.", {"type": "object", "properties": {
                             "status": {"const": "ok"}}})}}},
    "/readyz": {"get": {"tags": ["operations"], "operationId": "readyz", "security": [],
                        "summary": "Ready when the store answers; circuit states per target.",
                        "responses": {"200": _ok("Ready.", _ref("Readiness")),
                                      "503": _ok("Not ready: the store does not answer.", _ref("Readiness"))}}},
    "/metrics": {"get": {"tags": ["operations"], "operationId": "metrics", "security": [],
                         "summary": "Prometheus metrics (summed over workers).",
                         "responses": {"200": {"description": "Prometheus text format.",
                                               "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
}

_DESCRIPTION = """What Loopgate adds to the OpenAI and Anthropic APIs it serves.

The model surfaces follow their providers' own API descriptions and are not repeated here:
`POST /v1/chat/completions` and `/v1/responses` with `/v1/responses/compact` and `/input_tokens` (OpenAI;
answers carry a `gateway` object with the loop's iterations, tool calls and failover attempts) and
`POST /v1/messages` (Anthropic). A loop
that pauses answers with a continuation id; the endpoints below inspect, resume and cancel it.

Authentication: `Authorization: Bearer <key>` (or `x-api-key`). With no keys configured, auth is
off and any key (or none) is accepted. The admin API takes an admin key (`auth.admin_keys`)."""

SPEC: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "Loopgate", "version": __version__, "description": _DESCRIPTION,
             "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"}},
    "tags": [{"name": "continuations", "description": "Paused tool loops: inspect, resume with decisions, cancel."},
             {"name": "approvals", "description": "The inbox API and the audit log."},
             {"name": "admin", "description": "Managed keys and usage (admin keys only)."},
             {"name": "operations", "description": "Health, readiness and metrics."}],
    "security": [{"apiKey": []}],
    "paths": _PATHS,
    "components": {
        "schemas": _SCHEMAS,
        "securitySchemes": {
            "apiKey": {"type": "http", "scheme": "bearer", "description": "A caller or approver key."},
            "adminKey": {"type": "http", "scheme": "bearer", "description": "An admin key (auth.admin_keys)."},
        },
        "responses": {name: {"description": name, "content": {_JSON: {"schema": _ref("Error")}}}
                      for name in _ERROR_NAMES.values()},
    },
}

_BODY = orjson.dumps(SPEC)


async def openapi_endpoint(request: Request) -> JSONResponse:
    return JSONResponse(_BODY)
