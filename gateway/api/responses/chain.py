"""What a stored response costs: the tenant's stored-bytes quota, and the chain a follow-up shares.

A response continued with ``previous_response_id`` is stored as what it adds plus the ids of
the responses before it (``store/responses/base.py``), so a 50-step conversation is stored about
once, not 50 times over. ``parent_chain`` reads the conversation a follow-up continues and
remembers where the parent's part ends; ``Chain.segment`` cuts the follow-up's own part when it
is saved. The quota (``store.tenant_max_stored_bytes``) is checked before anything runs, so a
refused request costs no tokens.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from gateway.canonical import Message
from gateway.errors import GatewayError, quoted
from gateway.observability.metrics import STORE_QUOTA_REFUSALS
from gateway.store.responses.base import MAX_CHAIN_LINKS, ChainBroken, ResponseRecords


def previous_not_found(response_id: str, gone: str | None = None) -> GatewayError:
    """OpenAI's answer to a ``previous_response_id`` it no longer has (400, ``previous_response_not_found``).

    ``gone``: the earlier response of the chain that expired or was deleted, when it is not the named one.
    """
    message = f"Previous response with id {quoted(response_id)} not found."
    if gone is not None and gone != response_id:
        message = (f"Previous response with id {quoted(response_id)} cannot be continued: response {quoted(gone)} "
                   "earlier in its conversation expired or was deleted.")
    return GatewayError(400, message, "invalid_request_error", "previous_response_id", "previous_response_not_found")


def check_quota(records: ResponseRecords, quota: int, tenant: str) -> Awaitable[None] | None:
    """Refuse a ``store: true`` request when the tenant's stored responses reached their quota (429).

    Checked once, before the run: requests admitted while under the quota may each still store
    their own record, so the quota is passed by at most the records of the requests in flight.
    Decided here when the store knows the bytes in this process (``held_bytes``: then None); else
    the awaitable that asks the store and decides.
    """
    if not quota:
        return None
    stored = records.held_bytes(tenant)
    if stored is None:
        return _check_stored(records, quota, tenant)
    if stored >= quota:
        raise _over_quota(stored, quota)
    return None


async def _check_stored(records: ResponseRecords, quota: int, tenant: str) -> None:
    stored = await records.stored_bytes(tenant)
    if stored >= quota:
        raise _over_quota(stored, quota)


def _over_quota(stored: int, quota: int) -> GatewayError:
    STORE_QUOTA_REFUSALS.inc()
    return GatewayError(429, f"This tenant's stored responses use {stored} bytes, at or over its quota of {quota} "
                        "bytes (store.tenant_max_stored_bytes). Delete responses you no longer need, wait for "
                        "older ones to expire, or send 'store': false.", "insufficient_quota", "store",
                        "storage_quota_exceeded")


@dataclass(slots=True)
class Chain:
    """The conversation a follow-up continues: the ancestors it will name, and the messages they hold."""

    ancestors: list[str]
    prefix: list[Message]

    def segment(self, messages: list[Message]) -> list[Message] | None:
        """``messages`` past the parent's part, or None when the loop rewrote that part (then store them all)."""
        prefix = self.prefix
        if len(messages) < len(prefix):
            return None
        for kept, original in zip(messages, prefix, strict=False):
            if kept is not original:
                return None
        return messages[len(prefix):]


async def parent_chain(records: ResponseRecords, tenant: str, previous_id: str,
                       record: dict[str, Any]) -> tuple[list[Message], Chain]:
    """The whole transcript ``record`` (the response named by ``previous_id``) ends, and the follow-up's chain.

    Raises ``previous_response_not_found`` naming the ancestor that is gone. A chain at
    ``MAX_CHAIN_LINKS`` starts over: the follow-up then names no ancestors and stores everything.
    """
    try:
        messages = await records.full_transcript(tenant, record)
    except ChainBroken as broken:
        raise previous_not_found(previous_id, broken.response_id) from None
    ancestors = [*(record.get("ancestors") or ()), previous_id]
    if len(ancestors) >= MAX_CHAIN_LINKS:
        return messages, Chain([], [])
    return messages, Chain(ancestors, list(messages))
