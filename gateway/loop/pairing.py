"""The one place where an assistant turn and its tool results are put into the transcript.

Every path (ok, error, invalid arguments, unknown tool, denied, skipped, client output on
resume) produces a ``ToolResult`` per call and goes through ``tool_turn``, so a call can never
lack its result and no result can lack its call. ``pairing_problem`` checks the same invariant
on any message list: on client input (a 400 naming the index) and, in tests, on every request
an upstream receives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gateway.canonical import Message
from gateway.canonical_tool_results import bounded_parts
from gateway.errors import quoted

ToolStatus = Literal["ok", "error", "denied", "skipped", "client"]


@dataclass(slots=True)
class ToolResult:
    status: ToolStatus
    content: str
    elapsed_ms: float = 0.0
    # The client's own tool message for this result (way A): kept whole, so what its format says beyond
    # the text (an error flag, images, its verbatim blocks) reaches the model.
    message: Message | None = None


def stored_result(result: ToolResult) -> list[object]:
    """A result as a continuation stores it: ``[status, content, elapsed_ms]``, and the tool message's
    content parts (bounded, ``bounded_parts``) as a fourth item when the message carries more than text."""
    record: list[object] = [result.status, result.content, result.elapsed_ms]
    parts = bounded_parts(result.message.get("content")) if result.message is not None else None
    if parts:
        record.append(parts)
    return record


def tool_message(call_id: str, parts: object) -> Message | None:
    """The tool message of stored ``parts`` (None for a record without them: it reads as text)."""
    bounded = bounded_parts(parts)
    return {"role": "tool", "tool_call_id": call_id, "content": bounded} if bounded else None


def result_of(call_id: str, record: list[object]) -> ToolResult:
    """A stored result back (a record of three items, written before parts were stored, reads as text)."""
    status, content, elapsed = record[0], record[1], record[2]
    message = tool_message(call_id, record[3]) if len(record) > 3 else None
    return ToolResult(status, str(content), float(elapsed), message)  # type: ignore[arg-type]


class PairingError(ValueError):
    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index


def _listed(ids: set[str], limit: int = 5) -> str:
    """Caller ids for a message: a few, each quoted and cut."""
    shown = ", ".join(quoted(i) for i in sorted(ids)[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def tool_turn(assistant: Message, results: dict[str, ToolResult]) -> list[Message]:
    """The assistant message with all its calls, then exactly one tool message per call, in call order."""
    messages: list[Message] = [assistant]
    for call in assistant.get("tool_calls") or ():
        result = results.get(call["id"])
        if result is None:
            raise PairingError(-1, f"tool call {call['id']} ({call['function']['name']}) has no result")
        if result.message is not None and result.message.get("tool_call_id") == call["id"]:
            messages.append(result.message)
        else:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result.content})
    return messages


def pairing_problem(messages: list[Message]) -> PairingError | None:
    """The first violation of OpenAI's pairing rule, or None.

    After an assistant message with ``tool_calls`` the next messages must be ``tool`` messages
    answering each of its ids (in any order) before anything else; a ``tool`` message may
    only answer an id of the closest preceding assistant ``tool_calls``.
    """
    open_ids: set[str] = set()
    open_at = -1
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            tool_call_id = message.get("tool_call_id")
            if not isinstance(tool_call_id, str) or not tool_call_id:
                return PairingError(index, f"messages[{index}]: a 'tool' message needs a 'tool_call_id'")
            if tool_call_id not in open_ids:
                return PairingError(index, f"messages[{index}]: 'tool' message answers {quoted(tool_call_id)}, which "
                                    "no preceding assistant 'tool_calls' left unanswered")
            open_ids.discard(tool_call_id)
            continue
        if open_ids:
            missing = _listed(open_ids)
            return PairingError(open_at, f"messages[{open_at}]: an assistant message with 'tool_calls' must be "
                                f"followed by tool messages answering each id; missing: {missing}")
        if role == "assistant" and message.get("tool_calls"):
            open_ids = set()
            for call in message["tool_calls"]:
                call_id = call.get("id") if isinstance(call, dict) else None
                if not isinstance(call_id, str) or not call_id:
                    return PairingError(index, f"messages[{index}]: every tool call needs an 'id'")
                if call_id in open_ids:
                    return PairingError(index, f"messages[{index}]: duplicate tool call id {quoted(call_id)}")
                open_ids.add(call_id)
            open_at = index
    if open_ids:
        missing = _listed(open_ids)
        return PairingError(open_at, f"messages[{open_at}]: an assistant message with 'tool_calls' must be "
                            f"followed by tool messages answering each id; missing: {missing}")
    return None
