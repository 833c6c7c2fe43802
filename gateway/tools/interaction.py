"""What a running tool may ask of the loop that called it: a human's input, or a model's answer.

An MCP server can, in the middle of ``tools/call``, send the client an ``elicitation/create``
(ask the user for input) or a ``sampling/createMessage`` (ask the client's model to generate).
The MCP source speaks the protocol; the loop owns pauses and the request lifecycle. This module
is the seam between them, so neither learns the other's internals:

* the executor sets :data:`CALL_INTERACTIONS` around each ``source.call`` with the handlers of
  the request that asked for the call (its key, route, continuation store);
* a source that receives such a request during a call captures the handlers *when the call
  starts* (the protocol's callbacks run on the session's reader task, where the context var is
  not set) and awaits them; when there are none (a refresh, a headless key), it declines.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

ElicitationMode = Literal["form", "url"]
ElicitationAction = Literal["accept", "decline", "cancel"]


@dataclass(frozen=True, slots=True)
class ElicitationRequest:
    """One ``elicitation/create`` as the server sent it (bounded by the source before it gets here)."""

    server: str
    mode: ElicitationMode
    message: str
    #: form mode: the flat JSON Schema the answer's ``content`` must satisfy
    requested_schema: dict[str, Any] | None = None
    #: url mode: the page the user must open (shown, never fetched by the gateway)
    url: str | None = None
    #: url mode: the server's id for the elicitation (sent back in its completion notification)
    elicitation_id: str | None = None
    #: a stateless server's question: what any replica needs to retry the call with the answer
    #: (:class:`InputRetry` fields but the answer), stored with the pause; None when only the
    #: replica running the call can answer (a session-holding server)
    retry: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class InputRetry:
    """A stateless MCP server's call, retried with the user's answer by whichever replica took the decision.

    ``request_state`` is the server's opaque state from its ``input_required`` result (echoed byte-exact),
    ``input_key`` the key of the question among its input requests. Put in :data:`CALL_RETRY` around the
    call; the source sends ``tools/call`` with ``inputResponses`` and ``requestState`` instead of a new call.
    """

    request_state: str | None
    input_key: str
    action: ElicitationAction
    content: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ElicitationAnswer:
    """The user's (or a policy's) answer, sent back to the server as the ``ElicitResult``."""

    action: ElicitationAction
    content: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class SamplingRequest:
    """One ``sampling/createMessage``: messages in MCP's shape, plus the server's preferences."""

    server: str
    messages: list[dict[str, Any]]
    max_tokens: int
    system_prompt: str | None = None
    temperature: float | None = None
    stop_sequences: list[str] | None = None
    model_preferences: dict[str, Any] | None = None
    #: tools the server offers the model during sampling (2025-11-25), in MCP's tool shape
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class SamplingAnswer:
    """The model's answer as MCP's ``CreateMessageResult`` fields."""

    role: Literal["assistant"]
    content: list[dict[str, Any]] | dict[str, Any]
    model: str
    stop_reason: str | None = None


class SamplingRefused(Exception):
    """A sampling handler's refusal (no route, the asking key gone, its budget spent, every target failed):
    its message is safe to send to the server, which gets it as the protocol's error."""


ElicitationHandler = Callable[[ElicitationRequest], Awaitable[ElicitationAnswer]]
SamplingHandler = Callable[[SamplingRequest], Awaitable[SamplingAnswer]]
#: (progress, total, message) -> None: a running call's progress notification, never blocking
ProgressHandler = Callable[[float, float | None, str | None], None]


@dataclass(frozen=True, slots=True)
class CallInteractions:
    """The handlers of the request a tool call belongs to; None means "not offered here"."""

    elicit: ElicitationHandler | None = None
    sample: SamplingHandler | None = None
    #: progress notifications of the call: (progress, total, message) -> None, never blocking
    progress: ProgressHandler | None = field(default=None)


#: set by the executor around ``source.call``; read once by a source when a call starts
CALL_INTERACTIONS: ContextVar[CallInteractions | None] = ContextVar("loopgate_call_interactions", default=None)

#: set by the loop in the task that runs one call: where that call's progress goes (the executor
#: puts it into the call's :class:`CallInteractions`)
CALL_PROGRESS: ContextVar[ProgressHandler | None] = ContextVar("loopgate_call_progress", default=None)

#: set by the loop around a stateless server's call that is retried with a user's answer (see :class:`InputRetry`)
CALL_RETRY: ContextVar[InputRetry | None] = ContextVar("loopgate_call_retry", default=None)
