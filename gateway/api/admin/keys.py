"""``/admin/keys``: create, list, show, edit and revoke managed API keys (``auth.admin_keys`` only).

A created key's secret is in the ``POST`` response's ``key`` field and nowhere else: the store
keeps its SHA-256. Every change bumps the store's key generation, which every replica polls
(``key_sync``): a revoke or an edit is in force everywhere within a second. Config keys are listed
too (``source: config``, read-only: they change with the config file).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from typing import Any

import orjson
from starlette.requests import Request
from starlette.routing import Route

from gateway.api.lifecycle import Work, endpoint
from gateway.api.runtime import Runtime
from gateway.config.checks import ConfigError, mapping
from gateway.config.keys_section import check_models, key_options, label, plain_label, secret_digest
from gateway.config.model import AdminKey, ApiKey
from gateway.errors import GatewayError, bad_request
from gateway.http.body import read_json
from gateway.http.json_response import JSONResponse
from gateway.loop.approvals import new_audit_id
from gateway.store.keys.base import KeyLimitReached, from_record, key_fields, new_key_id, new_secret, to_record

#: admin bodies are a handful of fields
MAX_ADMIN_BODY = 64 * 1024
MAX_ID_CHARS = 100
_EDITABLE = {"name", "role", "models", "rpm", "tpm", "max_concurrent", "budget", "headless", "expires_at", "tools"}
_CREATE = _EDITABLE | {"tenant"}


def _iso(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).isoformat().replace("+00:00", "Z")


def view(key: ApiKey) -> dict[str, Any]:
    """A key as the admin API shows it: every field but the secret, times as ISO 8601."""
    shown = key_fields(key)
    shown.update(object="api_key", expires_at=_iso(key.expires_at),
                 created_at=None if key.created_at is None else int(key.created_at),
                 expired=key.expires_at is not None and key.expires_at <= time.time(),
                 source="managed" if key.managed else "config")
    return shown


def _fields(body: Any, allowed: set[str], runtime: Runtime) -> dict[str, Any]:
    """The body's key fields, validated by the config's own rules (a mistake is a 400 naming the field)."""
    try:
        item = mapping(body if body is not None else {}, "", allowed)
        options = key_options(item, "")
        check_models(options["models"], "models", set(runtime.routes.names()), set(runtime.config.providers))
        if options["expires_at"] is not None and "expires_at" in item and options["expires_at"] <= time.time():
            raise ConfigError("expires_at", "is in the past")
        out = {name: value for name, value in options.items() if name in item}
        if "name" in item:
            out["name"] = label(item["name"], "name", "the key name")
        if "tenant" in item:
            out["tenant"] = plain_label(item["tenant"], "tenant", "the tenant")
        return out
    except ConfigError as exc:
        param = exc.path.lstrip(".") or None
        raise bad_request(f"{param}: {exc.problem}" if param else exc.problem, param) from None


async def _records(runtime: Runtime) -> dict[str, ApiKey]:
    _, records = await runtime.key_store.load()
    return {key.id: key for key in (from_record(record)[1] for record in records)}


def _key_id(request: Request) -> str:
    key_id: str = request.path_params["id"]
    return key_id[:MAX_ID_CHARS]


def _not_found(key_id: str) -> GatewayError:
    return GatewayError(404, f"no API key with id {key_id!r}", "not_found_error", "id", "key_not_found")


async def _find(runtime: Runtime, key_id: str) -> tuple[ApiKey, bytes | None]:
    """The key with ``key_id``: managed (with its stored digest) or from the config (digest None)."""
    for key in runtime.config.auth.keys:
        if key.id == key_id:
            return key, None
    _, records = await runtime.key_store.load()
    for record in records:
        if record.get("id") == key_id:
            digest, key = from_record(record)
            return key, digest
    raise _not_found(key_id)


def _json(payload: object, status: int = 200) -> JSONResponse:
    return JSONResponse(orjson.dumps(payload), status)


async def _audit(runtime: Runtime, admin: AdminKey, event: str, key: ApiKey, changes: list[str]) -> None:
    """Who changed which key, in the key's tenant's audit log (field names only: never values or secrets)."""
    await runtime.store.append_audit({"id": new_audit_id(), "tenant": key.tenant, "ts": time.time(), "event": event,
                                      "key_id": key.id, "key_name": key.name, "admin": admin.name,
                                      "changes": changes})


async def create_key(request: Request, runtime: Runtime, work: Work) -> JSONResponse:
    admin = work.authenticate_admin()
    fields = _fields(await read_json(work.incoming, MAX_ADMIN_BODY), _CREATE, runtime)
    if "tenant" not in fields:
        raise bad_request("tenant is required", "tenant")
    secret = new_secret()
    key_id = new_key_id()
    changes = sorted(fields)
    key = ApiKey(key="", id=key_id, name=fields.pop("name", key_id), managed=True, created_at=time.time(), **fields)
    try:
        await runtime.key_store.put(to_record(key, secret_digest(secret)), create=True)
    except KeyLimitReached:
        raise GatewayError(409, "the managed key limit is reached; revoke unused keys first",
                           code="key_limit_reached") from None
    await runtime.key_sync.reload()  # this replica at once; the others within a poll
    await _audit(runtime, admin, "key.created", key, changes)
    return _json({**view(key), "key": secret}, 201)


async def list_keys(request: Request, runtime: Runtime, work: Work) -> JSONResponse:
    work.authenticate_admin()
    tenant = request.query_params.get("tenant")
    keys = [*runtime.config.auth.keys, *sorted((await _records(runtime)).values(),
                                               key=lambda k: (k.created_at or 0, k.id))]
    data = [view(key) for key in keys if tenant is None or key.tenant == tenant]
    return _json({"object": "list", "data": data})


async def get_key(request: Request, runtime: Runtime, work: Work) -> JSONResponse:
    work.authenticate_admin()
    key, _ = await _find(runtime, _key_id(request))
    return _json(view(key))


def _managed(key: ApiKey, digest: bytes | None, change: str) -> bytes:
    if digest is None:
        raise GatewayError(409, f"key {key.id} comes from the config file: {change} it there", code="config_key")
    if key.revoked:
        raise GatewayError(409, f"key {key.id} is revoked", code="key_revoked")
    return digest


async def update_key(request: Request, runtime: Runtime, work: Work) -> JSONResponse:
    admin = work.authenticate_admin()
    body = await read_json(work.incoming, MAX_ADMIN_BODY)
    if isinstance(body, dict) and "tenant" in body:
        raise bad_request("tenant cannot be changed: create a key for the other tenant", "tenant")
    fields = _fields(body, _EDITABLE, runtime)
    key, digest = await _find(runtime, _key_id(request))
    digest = _managed(key, digest, "edit")
    # The fields are ApiKey's own (parsed like the config's): one encoding, to_record's.
    record = to_record(dataclasses.replace(key, **fields), digest)
    try:
        await runtime.key_store.put(record, create=False)
    except KeyError:
        raise _not_found(key.id) from None
    await runtime.key_sync.reload()
    edited = from_record(record)[1]
    await _audit(runtime, admin, "key.updated", edited, sorted(fields))
    return _json(view(edited))


async def revoke_key(request: Request, runtime: Runtime, work: Work) -> JSONResponse:
    admin = work.authenticate_admin()
    key, digest = await _find(runtime, _key_id(request))
    if digest is None:
        _managed(key, digest, "remove")
    if not key.revoked:
        record = to_record(key, digest or b"")
        record["revoked"] = True
        await runtime.key_store.put(record, create=False)
        await runtime.key_sync.reload()
        await _audit(runtime, admin, "key.revoked", key, [])
    return _json({"id": key.id, "object": "api_key.deleted", "deleted": True})


def admin_routes() -> list[Route]:
    """Every admin call is metered and recorded (access record, span), its changes audited."""
    keys, one = "/admin/keys", "/admin/keys/{id}"
    return [
        Route(keys, endpoint(keys, create_key, metered=True), methods=["POST"]),
        Route(keys, endpoint(keys, list_keys, metered=True), methods=["GET"]),
        Route(one, endpoint(one, get_key, metered=True), methods=["GET"]),
        Route(one, endpoint(one, update_key, metered=True), methods=["PATCH"]),
        Route(one, endpoint(one, revoke_key, metered=True), methods=["DELETE"]),
    ]
