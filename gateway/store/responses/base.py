"""Stored Responses-API responses: one opaque JSON record per response id, bound to its tenant.

A record holds what ``GET /v1/responses/{id}`` shows and what ``previous_response_id`` continues
from: the Response object, its input items, and either the canonical transcript (a finished
response) or the id of the continuation its paused loop waits in. The record is opaque to the
store, like a continuation's ``data``; it lives for ``store.continuation_ttl_s`` like every
other piece of loop state.

Kept apart from the continuation store's contract (``base.Store``): the loop engine never
touches it, only the Responses endpoints do. ``response_records(store)`` picks the
implementation matching the configured store, so Redis deployments share records across
replicas and ``memory://`` keeps them in the process.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any


class ResponseRecords(ABC):
    """``put``/``get``/``delete`` of response records, keyed by (tenant, response id).

    Another tenant's id behaves exactly like an unknown one (None / False): ids never leak.
    """

    @abstractmethod
    async def put(self, tenant: str, response_id: str, record: dict[str, Any], ttl_s: float) -> None:
        """Write (or overwrite) the record for ``ttl_s`` seconds."""

    @abstractmethod
    async def get(self, tenant: str, response_id: str) -> dict[str, Any] | None:
        """The record, or None when unknown, expired, deleted or another tenant's."""

    @abstractmethod
    async def delete(self, tenant: str, response_id: str) -> bool:
        """Remove the record; False when there was none."""
