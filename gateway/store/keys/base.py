"""Managed API keys in the store: records keyed by id, holding a digest of the secret, never the secret.

Replicas do not read a key per request. Each keeps a snapshot of every record and a
*generation* number that every change increments; a cheap poll of that number (one GET) tells a
replica to reload (``gateway.governance.key_sync``). A secret this replica has not seen yet is
looked up by its digest (``find``) before it is refused, so a key created on another replica
works at once.

Records change by compare-and-set: every record carries a ``version`` that each write
increments, and ``update`` writes only over the version it read (``StaleKey`` otherwise: the
admin API reads again and retries). ``revoked`` is sticky inside the store: no write turns a
revoked record live again (``KeyRevoked``).

The cap (``MAX_MANAGED_KEYS``) counts live keys only. A revoked or expired record is kept for
the store's retention (``auth.key_retention_days``, 7 days by default: ``GET /admin/keys/{id}``
can still say what happened to it) and purged after it, by the next create or the periodic
purge (``KeySync``). Each record's *end* (when it was revoked, or when it expires; +inf while it
can live) is indexed beside it for both.
"""

from __future__ import annotations

import math
import secrets
from abc import ABC, abstractmethod
from typing import Any, cast

from gateway.config.model import ApiKey, Budget, BudgetPeriod, BudgetUnit, KeyRole

#: more live managed keys than this is a runaway script, not a deployment (each replica holds them all)
MAX_MANAGED_KEYS = 10_000
#: a purge removes at most this many ended records per call (the next call takes the rest)
PURGE_BATCH = 1_000
#: how long a revoked or expired record is kept by default (``auth.key_retention_days``: 7)
DEFAULT_RETENTION_S = 7 * 86_400.0


class KeyLimitReached(Exception):
    """Creating one more key would pass ``MAX_MANAGED_KEYS`` live keys."""


class StaleKey(Exception):
    """The record changed since it was read (its version moved): read it again."""


class KeyRevoked(Exception):
    """The stored record is revoked, and a revoke is for good: the write would have made it live."""


class KeyUnreadable(Exception):
    """The stored record cannot be decoded (written by something else): only a revoke may replace it."""


def new_key_id() -> str:
    return "key_" + secrets.token_urlsafe(12)


SECRET_PREFIX = "lg-"
#: ``lg-`` and 32 random bytes in URL-safe base64 (43 characters)
SECRET_CHARS = len(SECRET_PREFIX) + 43


def new_secret() -> str:
    """A managed key's secret: 256 random bits, recognisably prefixed (``lg-``)."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def secret_looks_managed(token: str) -> bool:
    """``token`` has the shape of a managed key's secret (what is worth a store look-up at all)."""
    return len(token) == SECRET_CHARS and token.startswith(SECRET_PREFIX)


def budget_record(budget: Budget | None) -> dict[str, Any] | None:
    return None if budget is None else {"limit": budget.limit, "unit": budget.unit, "period": budget.period}


def key_fields(key: ApiKey) -> dict[str, Any]:
    """A key's fields as JSON values, never its secret: the one list the store's record and the admin
    API's view are both made from."""
    return {"id": key.id, "name": key.name, "tenant": key.tenant, "role": key.role,
            "models": None if key.models is None else list(key.models), "rpm": key.rpm, "tpm": key.tpm,
            "max_concurrent": key.max_concurrent, "budget": budget_record(key.budget), "headless": key.headless,
            "expires_at": key.expires_at, "created_at": key.created_at, "revoked": key.revoked,
            "tools": None if key.tools is None else sorted(key.tools)}


def to_record(key: ApiKey, digest: bytes) -> dict[str, Any]:
    record = key_fields(key)
    record["hash"] = digest.hex()
    return record


def unreadable(key_id: str) -> dict[str, Any]:
    """What ``load`` and ``get`` give for a stored value that is not a record (views show it degraded)."""
    return {"id": key_id, "unreadable": True}


def end_of(record: dict[str, Any]) -> float:
    """When the record stops being live: its revoke, else its expiry, else never (``math.inf``)."""
    if record.get("revoked"):
        at = record.get("revoked_at")
        return float(at) if isinstance(at, int | float) and math.isfinite(at) else 0.0
    expires = record.get("expires_at")
    if isinstance(expires, int | float) and not isinstance(expires, bool) and math.isfinite(expires):
        return float(expires)
    return math.inf


def version_of(record: dict[str, Any]) -> int:
    """The record's version (0: written before versions existed)."""
    version = record.get("version")
    return version if isinstance(version, int) and not isinstance(version, bool) else 0


def tenant_of(record: dict[str, Any]) -> str | None:
    """A record's tenant, or None when the record has none that could be one (a bad stored value)."""
    tenant = record.get("tenant")
    return tenant if isinstance(tenant, str) and tenant else None


def from_record(record: dict[str, Any]) -> tuple[bytes, ApiKey]:
    """The digest and key of a stored record; ``KeyError``/``TypeError``/``ValueError`` for a bad one."""
    if record.get("unreadable"):
        raise ValueError("unreadable record")
    # What the request path compares and counts must have its type: a string where a time belongs
    # would fail every request of the key, not only its view.
    for name in ("expires_at", "created_at"):
        value = record.get(name)
        if value is not None and (not isinstance(value, int | float) or isinstance(value, bool)
                                  or not math.isfinite(value)):
            raise ValueError(f"{name} is not a time")
    for name in ("rpm", "tpm", "max_concurrent"):
        value = record.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ValueError(f"{name} is not a limit")
    for name in ("models", "tools"):
        value = record.get(name)
        if value is not None and not (isinstance(value, list) and all(isinstance(item, str) for item in value)):
            raise ValueError(f"{name} is not a list of names")
    raw_budget = record.get("budget")
    budget = None if not raw_budget else Budget(limit=float(raw_budget["limit"]),
                                                unit=cast(BudgetUnit, raw_budget["unit"]),
                                                period=cast(BudgetPeriod, raw_budget["period"]))
    models = record.get("models")
    tools = record.get("tools")
    key = ApiKey(key="", tenant=str(record["tenant"]), headless=bool(record.get("headless")), id=str(record["id"]),
                 name=str(record.get("name") or record["id"]), role=cast(KeyRole, record.get("role") or "caller"),
                 models=None if models is None else tuple(models), rpm=record.get("rpm"), tpm=record.get("tpm"),
                 max_concurrent=record.get("max_concurrent"), budget=budget, expires_at=record.get("expires_at"),
                 managed=True, created_at=record.get("created_at"), revoked=bool(record.get("revoked")),
                 tools=None if tools is None else frozenset(tools))
    return bytes.fromhex(str(record["hash"])), key


class KeyStore(ABC):
    """The managed keys of one deployment (memory: this process; Redis: every replica).

    ``retention_s``: how long a revoked or expired record is kept before it is purged.
    """

    def __init__(self, retention_s: float = DEFAULT_RETENTION_S) -> None:
        self.retention_s = retention_s

    @abstractmethod
    async def create(self, record: dict[str, Any], now: float) -> int:
        """Store a new record (as version 1) and bump the generation, which is returned.

        Ended records past the retention are purged first; ``KeyLimitReached`` when the live
        keys (neither revoked nor expired at ``now``) are at the cap.
        """

    @abstractmethod
    async def update(self, record: dict[str, Any], version: int) -> int:
        """Replace the record with ``record``'s id, only if its stored version is still ``version``.

        Written as version ``version + 1``; returns the new generation. ``KeyError``: no such id;
        ``StaleKey``: the version moved; ``KeyRevoked``: the stored record is revoked and
        ``record`` is not; ``KeyUnreadable``: the stored value is no record (``version`` -1 with a
        revoked ``record`` replaces it).
        """

    @abstractmethod
    async def get(self, key_id: str) -> dict[str, Any] | None:
        """One record by id (``unreadable(id)`` for a value that is no record), None when absent."""

    @abstractmethod
    async def find(self, digest: bytes) -> tuple[int, dict[str, Any] | None]:
        """The generation and the record whose secret has ``digest`` (None: no such record), read together."""

    @abstractmethod
    async def purge(self, now: float) -> int:
        """Remove up to ``PURGE_BATCH`` records that ended more than the retention before ``now``; how many."""

    @abstractmethod
    async def generation(self) -> int:
        """The current generation (0 before any change). One cheap read: polled by every replica."""

    @abstractmethod
    async def load(self) -> tuple[int, list[dict[str, Any]]]:
        """The generation and every record (revoked ones included, ``unreadable(id)`` for bad values)."""

    @abstractmethod
    async def salt(self, fresh: bytes) -> bytes | None:
        """The deployment's key-id salt: ``fresh`` stored unless one is there, then the stored one (the
        same on every replica and after restarts). None where nothing outlives the process (memory)."""
