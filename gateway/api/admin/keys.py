"""``/admin/keys``: create, list, show, edit and revoke managed API keys (``auth.admin_keys`` only).

A created key's secret is in the ``POST`` response's ``key`` field and nowhere else: the store
keeps its SHA-256. Every change bumps the store's key generation, which every replica polls
(``key_sync``): a revoke or an edit is in force everywhere within a second, and a new key works
on every replica at once (an unknown secret is looked up in the store before a 401). Config keys
are listed too (``source: config``, read-only: they change with the config file).

A PATCH or DELETE reads the record, changes it and writes it over the version it read
(compare-and-set); a write that lost a race reads again, up to ``CAS_ATTEMPTS`` times, then
answers 409 ``key_conflict``. A revoke is for good: the store itself refuses any later write that
would make the key live again, so an edit racing a revoke can never undo it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import time
from typing import Any

import orjson
from starlette.requests import Request

from gateway.api.admin.endpoint import admin_operation
from gateway.api.driver import Operation
from gateway.api.request.lifecycle import Work
from gateway.api.services import AdminServices
from gateway.config.checks import ConfigError, mapping
from gateway.config.keys_section import check_models, key_options, label, plain_label, secret_digest
from gateway.config.model import AdminKey, ApiKey
from gateway.errors import GatewayError, bad_request
from gateway.http.body import read_json
from gateway.http.json_response import JSONResponse
from gateway.loop.approvals import new_audit_id
from gateway.store.errors import StoreUnavailable
from gateway.store.keys import base
from gateway.store.keys.base import (
    KeyLimitReached,
    KeyRevoked,
    KeyUnreadable,
    StaleKey,
    from_record,
    key_fields,
    new_key_id,
    new_secret,
    tenant_of,
    to_record,
    version_of,
)

log = logging.getLogger("loopgate.admin")

#: admin bodies are a handful of fields
MAX_ADMIN_BODY = 64 * 1024
MAX_ID_CHARS = 100
_EDITABLE = {"name", "role", "models", "rpm", "tpm", "max_concurrent", "budget", "headless", "expires_at", "tools"}
_CREATE = _EDITABLE | {"tenant"}
#: a PATCH or DELETE that loses a race with another write reads the key again, at most this many times
CAS_ATTEMPTS = 5


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


def stored_view(record: dict[str, Any]) -> dict[str, Any]:
    """A stored record as the admin API shows it; one that cannot be read or shown is shown degraded.

    The store may hold what this version never wrote (an older or newer gateway, a hand edit, a
    damaged value): one such record must not take the listing, or every replica's, down with it.
    """
    try:
        return view(from_record(record)[1])
    except (KeyError, TypeError, ValueError, OverflowError, OSError, AttributeError):
        key_id = record.get("id")
        name = record.get("name")
        return {"id": key_id if isinstance(key_id, str) else None, "object": "api_key", "source": "managed",
                "tenant": tenant_of(record), "name": name if isinstance(name, str) else None,
                "revoked": record.get("revoked") is True, "degraded": True,
                "problem": "the stored record cannot be read or shown (revoke it to retire it)"}


def _fields(body: Any, allowed: set[str], services: AdminServices) -> dict[str, Any]:
    """The body's key fields, validated by the config's own rules (a mistake is a 400 naming the field)."""
    try:
        item = mapping(body if body is not None else {}, "", allowed)
        options = key_options(item, "")
        check_models(options["models"], "models", set(services.routes.names()), set(services.providers))
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


def _key_id(request: Request) -> str:
    key_id: str = request.path_params["id"]
    return key_id[:MAX_ID_CHARS]


def _not_found(key_id: str) -> GatewayError:
    return GatewayError(404, f"no API key with id {key_id!r}", "not_found_error", "id", "key_not_found")


async def _stored(services: AdminServices, key_id: str) -> dict[str, Any]:
    """The stored record of a managed key (404 when there is none; 409 for a config key)."""
    if (config_key := services.tenants.config_key(key_id)) is not None:
        raise GatewayError(409, f"key {config_key.id} comes from the config file: change it there", code="config_key")
    record = await services.key_store.get(key_id)
    if record is None:
        raise _not_found(key_id)
    return record


def _json(payload: object, status: int = 200) -> JSONResponse:
    return JSONResponse(orjson.dumps(payload), status)


async def _audit(services: AdminServices, admin: AdminKey, event: str, key_id: str, tenant: str, name: str,
                 changes: list[str]) -> None:
    """Who changed which key, in the key's tenant's audit log (field names only: never values or secrets).

    A record too damaged to name its tenant has no audit log to go to: the change is logged instead.
    """
    if not tenant:
        log.warning("admin %r: %s of key %r, whose stored record names no tenant (not in any audit log)",
                    admin.name, event, key_id[:MAX_ID_CHARS])
        return
    try:
        await services.audit.append_audit({"id": new_audit_id(), "tenant": tenant, "ts": time.time(), "event": event,
                                          "key_id": key_id, "key_name": name, "admin": admin.name,
                                          "changes": changes})
    except StoreUnavailable as exc:
        # The change is made: answering 503 would hide a created key's secret (a live key nobody
        # holds) or invite a retry of a done change. The entry is lost; the log says so.
        log.error("admin %r: %s of key %s done, but its audit entry was lost: %s", admin.name, event, key_id, exc)


async def _after_change(services: AdminServices) -> None:
    """This replica's snapshot at once; if the store stops answering right after a change, the poll catches up."""
    try:
        await services.key_sync.reload()
    except StoreUnavailable:
        log.warning("managed keys: the snapshot reload after an admin change failed; the next poll retries")


def _conflict(key_id: str) -> GatewayError:
    return GatewayError(409, f"key {key_id} kept changing while this request edited it ({CAS_ATTEMPTS} attempts); "
                        "read it again and retry", code="key_conflict")


async def create_key(request: Request, services: AdminServices, work: Work) -> JSONResponse:
    admin = work.authenticate_admin()
    fields = _fields(await read_json(work.incoming, MAX_ADMIN_BODY), _CREATE, services)
    if "tenant" not in fields:
        raise bad_request("tenant is required", "tenant")
    secret = new_secret()
    key_id = new_key_id()
    changes = sorted(fields)
    now = time.time()
    key = ApiKey(key="", id=key_id, name=fields.pop("name", key_id), managed=True, created_at=now, **fields)
    shown = view(key)  # before it is stored: nothing stored that could not be shown
    try:
        await services.key_store.create(to_record(key, secret_digest(secret)), now)
    except KeyLimitReached:
        raise GatewayError(409, f"the managed key limit ({base.MAX_MANAGED_KEYS} live keys) is reached; revoke "
                           "unused keys first", code="key_limit_reached") from None
    await _after_change(services)  # this replica at once; the others look it up on first use
    await _audit(services, admin, "key.created", key.id, key.tenant, key.name, changes)
    return _json({**shown, "key": secret}, 201)


async def list_keys(request: Request, services: AdminServices, work: Work) -> JSONResponse:
    work.authenticate_admin()
    tenant = request.query_params.get("tenant")
    _, records = await services.key_store.load()

    def order(record: dict[str, Any]) -> tuple[float, str]:
        created, key_id = record.get("created_at"), record.get("id")
        return (created if isinstance(created, int | float) and not isinstance(created, bool) else 0.0,
                key_id if isinstance(key_id, str) else "")

    data = [view(key) for key in services.tenants.config_keys if tenant is None or key.tenant == tenant]
    data += [stored_view(record) for record in sorted(records, key=order)
             if tenant is None or tenant_of(record) == tenant]
    return _json({"object": "list", "data": data})


async def get_key(request: Request, services: AdminServices, work: Work) -> JSONResponse:
    work.authenticate_admin()
    key_id = _key_id(request)
    if (config_key := services.tenants.config_key(key_id)) is not None:
        return _json(view(config_key))
    record = await services.key_store.get(key_id)
    if record is None:
        raise _not_found(key_id)
    return _json(stored_view(record))


async def update_key(request: Request, services: AdminServices, work: Work) -> JSONResponse:
    """Read, change, write over the version read; a write that lost a race reads again (``CAS_ATTEMPTS``)."""
    admin = work.authenticate_admin()
    body = await read_json(work.incoming, MAX_ADMIN_BODY)
    if isinstance(body, dict) and "tenant" in body:
        raise bad_request("tenant cannot be changed: create a key for the other tenant", "tenant")
    fields = _fields(body, _EDITABLE, services)
    key_id = _key_id(request)
    for _ in range(CAS_ATTEMPTS):
        record = await _stored(services, key_id)
        try:
            digest, key = from_record(record)
            view(key)  # a stored value no view can show is edited no further
        except (KeyError, TypeError, ValueError, OverflowError, OSError):
            raise _unreadable(key_id) from None
        if key.revoked:
            raise _revoked(key_id)
        edited = dataclasses.replace(key, **fields)
        shown = view(edited)  # before it is stored: nothing stored that could not be shown
        # The fields are ApiKey's own (parsed like the config's): one encoding, to_record's.
        try:
            await services.key_store.update(to_record(edited, digest), version_of(record))
        except StaleKey:
            continue  # changed since it was read: read it again
        except KeyRevoked:
            raise _revoked(key_id) from None
        except KeyUnreadable:
            raise _unreadable(key_id) from None
        except KeyError:
            raise _not_found(key_id) from None
        await _after_change(services)
        await _audit(services, admin, "key.updated", key_id, edited.tenant, edited.name, sorted(fields))
        return _json(shown)
    raise _conflict(key_id)


def _revoked(key_id: str) -> GatewayError:
    return GatewayError(409, f"key {key_id} is revoked", code="key_revoked")


def _unreadable(key_id: str) -> GatewayError:
    return GatewayError(409, f"the stored record of key {key_id} cannot be read, so it cannot be edited; revoke it",
                        code="key_unreadable")


async def revoke_key(request: Request, services: AdminServices, work: Work) -> JSONResponse:
    """Revoke for good (the store refuses any later write that would make it live again), over the version read."""
    admin = work.authenticate_admin()
    key_id = _key_id(request)
    for _ in range(CAS_ATTEMPTS):
        record = await _stored(services, key_id)
        if record.get("revoked") is True:
            return _json({"id": key_id, "object": "api_key.deleted", "deleted": True})
        now = time.time()
        try:
            digest, key = from_record(record)
            revoked: dict[str, Any] = {**to_record(key, digest), "revoked": True, "revoked_at": now}
        except (KeyError, TypeError, ValueError):
            # A value that is no usable record: replaced by a revoked one, purged after the retention.
            revoked = {"id": key_id, "tenant": tenant_of(record) or "", "hash": "", "revoked": True,
                       "revoked_at": now, "created_at": now}
        version = -1 if record.get("unreadable") else version_of(record)
        try:
            await services.key_store.update(revoked, version)
        except StaleKey:
            continue
        except KeyRevoked:
            return _json({"id": key_id, "object": "api_key.deleted", "deleted": True})
        except KeyUnreadable:
            continue  # it became unreadable since it was read: read it again
        except KeyError:
            raise _not_found(key_id) from None
        await _after_change(services)
        await _audit(services, admin, "key.revoked", key_id, str(revoked.get("tenant") or ""),
                     str(revoked.get("name") or key_id), [])
        return _json({"id": key_id, "object": "api_key.deleted", "deleted": True})
    raise _conflict(key_id)


_KEYS, _ONE = "/admin/keys", "/admin/keys/{id}"
#: every admin call is metered and recorded (access record, span), its changes audited
KEYS: tuple[Operation[AdminServices], ...] = (
    admin_operation("POST", _KEYS, create_key),
    admin_operation("GET", _KEYS, list_keys),
    admin_operation("GET", _ONE, get_key),
    admin_operation("PATCH", _ONE, update_key),
    admin_operation("DELETE", _ONE, revoke_key),
)
