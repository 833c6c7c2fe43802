"""Compaction items: a conversation summarised into one opaque item that the caller carries back.

``POST /v1/responses/compact`` (``responses/compact.py``) and a ``compaction_trigger`` at the end of
a ``/v1/responses`` input (``responses/compaction_turn.py``) have the route's model summarise the
conversation; the summary goes back to the caller as a ``compaction`` item
(``{"id": "cmp_…", "type": "compaction", "encrypted_content": "lgs1.…"}``), sealed for the caller's
tenant (``canonical/sealing.py``): the caller can neither read nor change it, and no other tenant
can use it. When an input holds one later, on any path that reads Responses input items
(``items.to_messages``), it is opened and stands in the transcript for the conversation it
summarises: a ``user`` message starting with the context guard's summary prefix
(``context/summary.py``; every provider takes a user message anywhere, and the guard keeps such
a summary rather than summarising it again). A damaged, changed, foreign or other tenant's item is a
400 (``invalid_encrypted_content``) naming the item, never sent on to a model.

The items a caller sends around it stay as sent: ``/compact``'s output is the conversation's user
messages followed by the compaction item (OpenAI's shape), and the next request is that list
plus what is new. What the summary covers is everything the request stood for: its
``instructions``, the stored conversation of ``previous_response_id``, and its ``input`` (earlier
compaction items included, so compacting again folds them in).

Bounds: the request body (``server.max_body_bytes``) bounds what is summarised; the summary is at
most ``responses.compact_max_output_tokens`` tokens (the model call's ``max_tokens``) and
``MAX_SUMMARY_CHARS`` characters; an ``encrypted_content`` longer than ``MAX_ENCRYPTED_CHARS`` is
refused before it is decoded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gateway.api.responses.chain import parent_chain, previous_not_found
from gateway.api.responses.ids import new_id
from gateway.api.services import ResponsesServices
from gateway.canonical import Message
from gateway.canonical.sealing import SealBroken, Sealer
from gateway.context.summary import is_summary, summary_message
from gateway.errors import bad_request, quoted
from gateway.loop.pairing import result_of
from gateway.store.continuations.base import ContinuationNotFound
from gateway.store.responses.base import continuable

#: what a sealed compaction payload is bound to besides the tenant
KIND = "compaction"
#: the input item types a compaction item comes as (Codex also reads ``compaction_summary``)
ITEM_TYPES = frozenset({"compaction", "compaction_summary"})
#: the input item that asks ``/v1/responses`` for a compaction (Codex's remote compaction v2)
TRIGGER = "compaction_trigger"
MAX_SUMMARY_CHARS = 600_000
#: a sealed summary of ``MAX_SUMMARY_CHARS`` is about 800,000 characters
MAX_ENCRYPTED_CHARS = 1_048_576
_REFUSED = ("this compaction item cannot be read: it was made by another gateway deployment or for another "
            "tenant, sealed with a key this gateway no longer has, or changed. Compact the conversation again "
            "from its full history.")

#: opens one compaction item of the input into its transcript message: ``(item, param) -> message``
Expand = Callable[[dict[str, Any], str], Message]


def compaction_item(sealer: Sealer, tenant: str, summary: str, target: str) -> dict[str, Any]:
    """The item a caller carries: ``summary`` (and who wrote it, when) sealed for ``tenant``."""
    payload = {"summary": summary[:MAX_SUMMARY_CHARS], "target": target, "created_at": int(time.time())}
    return {"id": new_id("cmp"), "type": "compaction", "encrypted_content": sealer.seal(tenant, KIND, payload)}


def expand_compaction(sealer: Sealer, tenant: str, item: dict[str, Any], param: str) -> Message:
    """The transcript message a compaction item of ``tenant`` stands for; 400 for any other item."""
    content = item.get("encrypted_content")
    where = f"{param}.encrypted_content"
    if not isinstance(content, str) or not content:
        raise bad_request(f"'{where}' must be the non-empty string a compaction returned", where)
    if len(content) > MAX_ENCRYPTED_CHARS:
        raise bad_request(f"'{where}' has {len(content)} characters; a compaction item of this gateway has at most "
                          f"{MAX_ENCRYPTED_CHARS}", where, "invalid_encrypted_content")
    try:
        payload = sealer.unseal(tenant, KIND, content)
    except SealBroken:
        raise bad_request(_REFUSED, where, "invalid_encrypted_content") from None
    summary = payload.get("summary") if isinstance(payload, dict) else None
    if not isinstance(summary, str):  # sealed by this gateway, so only a future format could get here
        raise bad_request(_REFUSED, where, "invalid_encrypted_content")
    return summary_message(summary)


def expander(services: ResponsesServices, tenant: str) -> Expand:
    """``expand_compaction`` for one request's tenant (what ``items.to_messages`` is handed)."""
    sealer = services.sealer

    def expand(item: dict[str, Any], param: str) -> Message:
        return expand_compaction(sealer, tenant, item, param)

    return expand


async def stated_conversation(services: ResponsesServices, tenant: str, instructions: str | None,
                              previous_id: str | None, given: list[Message]) -> list[Message]:
    """What a request stands for without running it (``/compact``, ``/input_tokens``): its instructions, the stored
    conversation of ``previous_id``, then ``given`` (its input's messages); 400 when that is nothing."""
    earlier: list[Message] = []
    if previous_id is not None:
        record = await services.records.get(tenant, previous_id)
        if record is None:
            raise previous_not_found(previous_id)
        if record.get("continuation_id"):
            earlier = await _paused_conversation(services, tenant, previous_id, record["continuation_id"])
        elif not continuable(record):
            raise bad_request(f"response {quoted(previous_id)} did not complete; it cannot be continued",
                              "previous_response_id")
        else:
            earlier, _ = await parent_chain(services.records, tenant, previous_id, record)
    if not (earlier or given):
        raise bad_request("'input' is required (a string or a non-empty array of items)", "input")
    messages: list[Message] = [{"role": "system", "content": instructions}] if instructions else []
    messages.extend(earlier)
    messages.extend(given)
    return messages


async def _paused_conversation(services: ResponsesServices, tenant: str, previous_id: str,
                              continuation_id: str) -> list[Message]:
    """A paused response's conversation up to its calls (Codex over a WebSocket compacts by continuing the paused
    turn: its input is the calls' outputs and the trigger), the server tools' results of that round included."""
    try:
        stored = await services.loop.continuations.get(continuation_id, tenant)
    except ContinuationNotFound:
        raise previous_not_found(previous_id) from None
    data = stored.data
    messages: list[Message] = [*data.get("transcript", ()), data.get("assistant") or {}]
    for call_id, record in (data.get("results") or {}).items():
        result = result_of(call_id, record)
        messages.append(result.message or {"role": "tool", "tool_call_id": call_id, "content": result.content})
    return [message for message in messages if message]


def user_items(messages: list[Message]) -> list[dict[str, Any]]:
    """The user messages of ``messages`` as Responses items (what ``/compact`` keeps beside its item), each with
    the ``id`` and ``status`` the Open Responses specification requires of an output message; the gateway's
    own summaries are left out: the new compaction covers them."""
    items = []
    for message in messages:
        if message.get("role") != "user" or is_summary(message):
            continue
        items.append({"id": new_id("msg"), "type": "message", "role": "user", "status": "completed",
                      "content": _input_parts(message.get("content"))})
    return items


def _input_parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "input_text", "text": content}]
    parts: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else ():
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            parts.append({"type": "input_text", "text": part.get("text") or ""})
        elif kind == "image_url" and isinstance(part.get("image_url"), dict):
            parts.append({"type": "input_image", "image_url": part["image_url"].get("url"),
                          "detail": part["image_url"].get("detail") or "auto"})
    return parts

