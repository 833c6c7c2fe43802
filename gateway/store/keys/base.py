"""Managed API keys in the store: records keyed by id, holding the SHA-256 of the secret, never the secret.

Replicas do not read a key per request. Each keeps a snapshot of every record and a
*generation* number that every change increments; a cheap poll of that number (one GET) tells a
replica to reload (``gateway.governance.key_sync``). So the store interface is: change a record (which
bumps the generation), read the generation, read everything.
"""

from __future__ import annotations

import secrets
from abc import ABC, abstractmethod
from typing import Any, cast

from gateway.config.model import ApiKey, Budget, BudgetPeriod, BudgetUnit, KeyRole

#: more managed keys than this is a runaway script, not a deployment (each replica holds them all)
MAX_MANAGED_KEYS = 10_000


class KeyLimitReached(Exception):
    """Creating one more key would pass ``MAX_MANAGED_KEYS``."""


def new_key_id() -> str:
    return "key_" + secrets.token_urlsafe(12)


def new_secret() -> str:
    """A managed key's secret: 256 random bits, recognisably prefixed (``lg-``)."""
    return "lg-" + secrets.token_urlsafe(32)


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


def from_record(record: dict[str, Any]) -> tuple[bytes, ApiKey]:
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
    """The managed keys of one deployment (memory: this process; Redis: every replica)."""

    @abstractmethod
    async def put(self, record: dict[str, Any], create: bool) -> int:
        """Write ``record`` (by its ``id``) and bump the generation, which is returned.

        ``create``: fails with ``KeyLimitReached`` at the cap; otherwise the id must exist
        (``KeyError`` when it does not).
        """

    @abstractmethod
    async def generation(self) -> int:
        """The current generation (0 before any change). One cheap read: polled by every replica."""

    @abstractmethod
    async def load(self) -> tuple[int, list[dict[str, Any]]]:
        """The generation and every record (revoked ones included), read together."""
