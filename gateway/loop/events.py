"""What the loop engine yields. Renderers turn these into a chat.completion or a chunk stream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.canonical import (
    Answering,
    HostedToolCall,
    Message,
    ReasoningDelta,
    ReasoningSignature,
    RedactedReasoning,
    StreamDelta,
    TextDelta,
    ToolCall,
    Usage,
)


@dataclass(slots=True)
class ToolStarted:
    tool_call_id: str
    name: str
    # The call's arguments (JSON text) and, on finish, the result the model sees: the Responses
    # renderer shows them on its mcp_call items; the chat renderer ignores them. References, no copies.
    arguments: str = ""


@dataclass(slots=True)
class ToolFinished:
    tool_call_id: str
    name: str
    status: str
    elapsed_ms: float
    content: str = ""


@dataclass(slots=True)
class ToolProgress:
    """A running server tool's progress (an MCP ``notifications/progress``), bounded per call by the loop."""

    tool_call_id: str
    name: str
    progress: float
    total: float | None = None
    message: str | None = None

    def detail(self) -> dict[str, Any]:
        """The progress as the wire shows it: ``progress``, and ``total`` / ``message`` when the server said them."""
        detail: dict[str, Any] = {"progress": self.progress}
        if self.total is not None:
            detail["total"] = self.total
        if self.message is not None:
            detail["message"] = self.message
        return detail


@dataclass(slots=True)
class Notice:
    """A progress event with no text (context_compressed, tools_skipped, ...)."""

    event: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class LoopResult:
    status: Literal["completed", "paused"]
    finish_reason: str
    usage: Usage
    gateway: dict[str, Any]
    # Calls handed to the client: the pending ones when paused.
    tool_calls: list[ToolCall] = field(default_factory=list)
    # The model that answered the final call (the one that produced the paused turn when paused).
    model: str = ""
    # The caller's stop sequence the final call ended on, when its provider said which (canonical.ModelResponse).
    stop_sequence: str | None = None


@dataclass(slots=True)
class Finished:
    result: LoopResult


@dataclass(slots=True)
class TurnArtifacts:
    """A model call's whole answer (its provider artifacts under the canonical keys) and the provider that gave it.

    Yielded only for a loop whose renderer hands artifacts to a stateless caller
    (``LoopRequest.carry_artifacts``: the Responses API's ``reasoning.encrypted_content``), after the
    call's reasoning and before its text in a whole answer, after the call's stream in a stream.
    ``sealed``: what the first renderer made of it, for a second one fed the same events.
    """

    message: Message
    provider: str
    sealed: str | None = None


# A list is a batch of deltas that arrived together (one upstream read): rendered as one write.
# ``Answering`` (alone, or first in a batch) names the model producing what follows, in streams.
LoopEvent = (TextDelta | ReasoningDelta | ReasoningSignature | RedactedReasoning | Answering | HostedToolCall
             | list[StreamDelta] | ToolStarted | ToolProgress | ToolFinished | Notice | Finished | TurnArtifacts)


def answering_model(event: LoopEvent) -> str | None:
    """The model an event names, if it names one (an announcement, a committed stream's first batch, the end)."""
    if isinstance(event, list):
        return event[0].model if event and isinstance(event[0], Answering) else None
    if isinstance(event, Answering):
        return event.model
    if isinstance(event, Finished):
        return event.result.model or None
    return None


async def until_answering(events: AsyncIterator[LoopEvent]) -> tuple[list[LoopEvent], str | None]:
    """The first events of a stream, pulled before its 200: up to the one naming the answering model.

    A request that fails before any output so gets a real status, and the first frame names the
    model; progress notices before the first call wait with it. The events are closed on a failure.
    """
    first: list[LoopEvent] = []
    model: str | None = None
    try:
        while model is None:
            try:
                event = await anext(events)
            except StopAsyncIteration:
                break
            first.append(event)
            model = answering_model(event)
            if not isinstance(event, Notice):
                break
    except BaseException:
        await events.aclose()  # type: ignore[attr-defined]
        raise
    return first, model
