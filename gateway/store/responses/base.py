"""Stored Responses-API responses: one JSON record per response id, bound to its tenant.

A record holds what ``GET /v1/responses/{id}`` shows and what ``previous_response_id`` continues
from: the Response object, its input items, and either the canonical transcript (a finished
response) or the id of the continuation its paused loop waits in. It lives for
``store.continuation_ttl_s`` like every other piece of loop state.

**Chains share their transcript.** A response continued from another (``previous_response_id``)
stores only the messages it adds (``transcript``) and the ids of the responses it continues, root
first (``ancestors``): a follow-up costs what it adds, not a copy of everything before it. Reading
the whole conversation (:meth:`ResponseRecords.full_transcript`) fetches the ancestors in one
call (one ``MGET`` on Redis: a tenant's keys share one Cluster slot) and joins their segments.
Writing a child keeps its ancestors alive at least as long as itself, so a chain never expires
from the middle; deleting a response ends the chains through it (a follow-up to a descendant is
then ``previous_response_not_found`` naming the deleted one). A chain is at most
``MAX_CHAIN_LINKS`` records: the response past it stores its whole transcript and starts a new
chain, which bounds every read.

**The answer is stored once.** A completed response's transcript ends with the assistant's answer,
whose text the Response object holds too: its message items after its last tool item (the
Responses builder closes exactly those since the last tool started, gateway/api/responses/render.py).
So a record stores its ``transcript_head``, the transcript without that last message, and reading
the conversation puts the message back from the Response object (``answer_text``): a long
answer's text is not stored twice. A record an older release wrote holds its whole ``transcript``
and is read as it is; a replica of that release finds no ``transcript`` in a new record and
refuses to continue it, rather than continuing without its answer.

**Stored bytes per tenant** are counted in the store (the sum of the serialised records a tenant
has), so ``store.tenant_max_stored_bytes`` holds across replicas; see ``stored_bytes``.

Kept apart from the continuation store's contract (``base.Store``): the loop engine never
touches it, only the Responses endpoints do.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from gateway.store.errors import StoreError

#: the longest chain of records one read joins (the root plus its descendants)
MAX_CHAIN_LINKS = 64
#: a record's transcript without its final answer (the text of its Response's last message items)
TRANSCRIPT_HEAD = "transcript_head"


def answer_text(output: list[Any]) -> str:
    """The text of a Response's last message items (those after its last tool item): its transcript's final answer."""
    texts: list[str] = []
    for item in reversed(output):
        kind = item["type"]
        if kind == "message":
            texts.extend(part.get("text", "") for part in reversed(item["content"]))
        elif kind != "reasoning":
            break
    texts.reverse()
    return "".join(texts)


def continuable(record: dict[str, Any]) -> bool:
    """Whether the response completed (a follow-up may continue from it)."""
    return record.get("transcript") is not None or record.get(TRANSCRIPT_HEAD) is not None


def conversation_part(record: dict[str, Any]) -> list[Any] | None:
    """The messages ``record`` adds to its conversation (its answer included); None for a response
    that did not complete (nothing to continue from)."""
    transcript: list[Any] | None = record.get("transcript")
    if transcript is not None:
        return transcript
    head: list[Any] | None = record.get(TRANSCRIPT_HEAD)
    if head is None:
        return None
    return [*head, {"role": "assistant", "content": answer_text(record["response"]["output"])}]


class ChainBroken(StoreError):
    """A response the chain continues is gone (expired, deleted, or evicted from memory)."""

    def __init__(self, response_id: str) -> None:
        super().__init__(f"response {response_id!r} of this conversation is gone")
        self.response_id = response_id


class ResponseRecords(ABC):
    """``put``/``get``/``delete`` of response records, keyed by (tenant, response id).

    Another tenant's id behaves exactly like an unknown one (None / False): ids never leak.
    """

    #: a view of the store that also keeps the responses it must not store (``store: false``) where only
    #: it reads them (``keep``): a WebSocket connection's memory (gateway/api/responses/ws_records.py)
    keeps_unstored = False

    async def keep(self, tenant: str, response_id: str, record: dict[str, Any], answer: str | None) -> None:
        """A ``store: false`` response's record (its whole conversation, no ``ancestors``) and its answer's text
        (None: it generated none), for a view that ``keeps_unstored``; a store keeps nothing."""
        return None

    @abstractmethod
    async def put(self, tenant: str, response_id: str, record: dict[str, Any], ttl_s: float) -> None:
        """Write (or overwrite) the record for ``ttl_s`` seconds.

        A record with ``ancestors`` also keeps each of them alive for at least ``ttl_s`` more
        seconds (one that is already gone stays gone: the next read reports it).
        """

    @abstractmethod
    async def get(self, tenant: str, response_id: str) -> dict[str, Any] | None:
        """The record, or None when unknown, expired, deleted or another tenant's."""

    @abstractmethod
    async def get_many(self, tenant: str, response_ids: list[str]) -> list[dict[str, Any] | None]:
        """``get`` of each id, in order, in one round trip."""

    @abstractmethod
    async def delete(self, tenant: str, response_id: str) -> bool:
        """Remove the record; False when there was none."""

    @abstractmethod
    async def stored_bytes(self, tenant: str) -> int:
        """The bytes of the tenant's live records, as the store counts them (see each backend for its slack)."""

    def held_bytes(self, tenant: str) -> int | None:
        """``stored_bytes`` when this process knows it without a round trip (the embedded store), else None:
        the quota check every ``store: true`` request makes then costs no coroutine."""
        return None

    async def full_transcript(self, tenant: str, record: dict[str, Any]) -> list[Any]:
        """The whole conversation ``record`` continues from: its ancestors' segments, then its own.

        ``ChainBroken`` names the first ancestor that is gone.
        """
        own = conversation_part(record) or []
        ancestors: list[str] = record.get("ancestors") or []
        if not ancestors:
            return list(own)
        messages: list[Any] = []
        for response_id, found in zip(ancestors, await self.get_many(tenant, ancestors), strict=True):
            part = None if found is None else conversation_part(found)
            if part is None:
                raise ChainBroken(response_id)
            messages.extend(part)
        messages.extend(own)
        return messages
