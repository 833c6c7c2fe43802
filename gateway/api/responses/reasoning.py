"""Stateless reasoning: a turn's provider artifacts sealed into its ``reasoning`` item, and opened again.

A caller that keeps its own state (``store: false``, Codex) asks for ``include:
["reasoning.encrypted_content"]`` and sends every item back. What a provider needs back to go on
reasoning does not fit a Responses item: OpenAI's encrypted reasoning (``openai_output``),
Anthropic's signed thinking blocks (``thinking_blocks``, ``anthropic_content``), Gemini's thought
signatures (``extra_content`` on the message and on each call), DeepSeek-style
``reasoning_content`` with its ``reasoning_origin`` (``canonical/types.py``). So each model call's
artifacts, with the name of the provider that answered, are sealed for the caller's tenant
(``canonical/sealing.py``, kind ``reasoning``: a compaction token does not open as one, nor one of
another tenant) into the ``encrypted_content`` of that call's ``reasoning`` item: the one still open
when the call's answer is complete, else (a stream whose text followed the reasoning, or a call
that gave no reasoning text) a ``reasoning`` item of its own with an empty summary, after the call's
text and before its calls.

Coming back, an item that opens puts its artifacts back on the assistant turn it sits in, under the
canonical keys, and each adapter sends them as it sends its own within a loop: only to a target of
the format that made them, ``openai_output`` and ``reasoning_content`` only to the provider named on
them, ``anthropic_content`` only while its text is the turn's text. An item that does not open
(forged, changed, truncated, another tenant's or kind's, OpenAI's own ciphertext, sealed with a key
the gateway no longer has, over ``MAX_ENCRYPTED_CHARS``) is dropped: nothing of it is sent, its
summary text stays, and the response counts the drops in one ``gateway.warnings`` entry. Never a
4xx: a client replays its history verbatim and must keep working.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.canonical import Message, text_of
from gateway.canonical.sealing import SealBroken, Sealer
from gateway.loop.events import TurnArtifacts

#: what a sealed reasoning payload is bound to besides the tenant (compaction's is ``compaction``)
KIND = "reasoning"
#: the ``include`` value that asks for it
INCLUDE = "reasoning.encrypted_content"
#: a longer ``encrypted_content`` is dropped before it is decoded; a turn whose sealed artifacts would be longer
#: goes out without them (warned): the same bound as a compaction item's
MAX_ENCRYPTED_CHARS = 1_048_576
#: the message keys a payload may carry (the canonical artifact keys)
_MESSAGE_KEYS = ("reasoning_content", "reasoning_origin", "thinking_blocks", "extra_content", "anthropic_content",
                 "openai_output")


def payload_of(message: Message, provider: str) -> dict[str, Any] | None:
    """What a model call's answer gives its caller to carry: its artifacts and their provider; None: none.

    ``reasoning_content`` goes only where a provider takes it back (it has a named origin) and its
    text is not in thinking blocks already (Anthropic's: the blocks are what goes back).
    """
    kept = {key: message[key] for key in _MESSAGE_KEYS if key in message}
    if "thinking_blocks" in kept or not kept.get("reasoning_origin"):
        kept.pop("reasoning_content", None)
        kept.pop("reasoning_origin", None)
    calls = {call["id"]: call["extra_content"] for call in message.get("tool_calls") or ()
             if isinstance(call, dict) and "extra_content" in call and isinstance(call.get("id"), str)}
    if not kept and not calls:
        return None
    return {"provider": provider, "message": kept, "calls": calls}


class Carrier:
    """Seals one response's turns for its tenant; counts the turns too large to carry (a warning)."""

    __slots__ = ("sealer", "tenant", "too_large")

    def __init__(self, sealer: Sealer, tenant: str) -> None:
        self.sealer = sealer
        self.tenant = tenant
        self.too_large = 0

    def token(self, turn: TurnArtifacts) -> str:
        """The turn's ``encrypted_content``, ``""`` when it has nothing to carry (sealed once per turn: a second
        builder fed the same events, a resume's recorder, reuses it)."""
        if turn.sealed is None:
            payload = payload_of(turn.message, turn.provider)
            token = "" if payload is None else self.sealer.seal(self.tenant, KIND, payload)
            if len(token) > MAX_ENCRYPTED_CHARS:
                self.too_large += 1
                token = ""
            turn.sealed = token
        return turn.sealed

    def warnings(self) -> list[dict[str, Any]]:
        if not self.too_large:
            return []
        return [{"type": "reasoning_not_sealed", "count": self.too_large,
                 "message": f"{self.too_large} model turn(s) had provider reasoning over {MAX_ENCRYPTED_CHARS} "
                            "characters sealed: their reasoning items carry no encrypted_content, and the provider "
                            "will not see that reasoning again"}]


def dropped_warning(count: int) -> dict[str, Any]:
    """The one ``gateway.warnings`` entry for the input's reasoning items that did not open."""
    return {"type": "reasoning_items_dropped", "count": count,
            "message": f"{count} reasoning item(s) of the input had an encrypted_content this gateway cannot open for "
                       "this tenant (changed, another tenant's, another provider's or deployment's, or over "
                       f"{MAX_ENCRYPTED_CHARS} characters): their provider reasoning was dropped, their summary kept"}


#: sealed tokens of one request longer than this in all are opened off the event loop (decoding, decrypting and
#: parsing megabytes of a caller's body must not stall every other request)
OFF_LOOP_SEALED_CHARS = 256 * 1024


async def restored(sealer: Sealer, tenant: str, sealed: list[tuple[Message, list[str]]]) -> int:
    """``restore``, in a worker thread when the tokens are large (nothing else holds these messages yet)."""
    if sum(len(token) for _, tokens in sealed for token in tokens) > OFF_LOOP_SEALED_CHARS:
        return await asyncio.to_thread(restore, sealer, tenant, sealed)
    return restore(sealer, tenant, sealed)


def restore(sealer: Sealer, tenant: str, sealed: list[tuple[Message, list[str]]]) -> int:
    """Put each turn's sealed artifacts back on it, in place; how many tokens did not open (dropped)."""
    dropped = 0
    for message, tokens in sealed:
        opened = 0
        for token in tokens:
            payload = _opened(sealer, tenant, token)
            if payload is None:
                dropped += 1
                continue
            _apply(message, payload, first=opened == 0)
            opened += 1
        if opened and "anthropic_content" in message and not _same_text(message):
            del message["anthropic_content"]  # the turn was edited: its blocks would say something else
    return dropped


def _opened(sealer: Sealer, tenant: str, token: str) -> dict[str, Any] | None:
    if len(token) > MAX_ENCRYPTED_CHARS:
        return None
    try:
        payload = sealer.unseal(tenant, KIND, token)
    except SealBroken:
        return None
    # Sealed by this gateway: only a payload of another version could be another shape.
    if not (isinstance(payload, dict) and isinstance(payload.get("message"), dict)
            and isinstance(payload.get("calls"), dict)):
        return None
    return payload


def _apply(message: Message, payload: dict[str, Any], first: bool) -> None:
    """A payload's keys on the turn: the first payload's replace what the items said (a summary's
    ``reasoning_content``); a later one's (two model calls read as one turn) add thinking blocks only."""
    for key, value in payload["message"].items():
        if key not in _MESSAGE_KEYS:
            continue
        if first:
            message[key] = value
        elif key == "thinking_blocks" and isinstance(value, list) and isinstance(message.get(key), list):
            message[key] = [*message[key], *value]
        else:
            message.setdefault(key, value)
    calls = payload["calls"]
    if calls:
        for call in message.get("tool_calls") or ():
            extra = calls.get(call["id"])
            if isinstance(extra, dict):
                call["extra_content"] = extra


def _same_text(message: Message) -> bool:
    content = message["anthropic_content"]
    if isinstance(content, str):
        return content == text_of(message.get("content"))
    if not isinstance(content, list):
        return False
    said = "".join(block.get("text") or "" for block in content
                   if isinstance(block, dict) and block.get("type") == "text")
    return said == text_of(message.get("content"))
