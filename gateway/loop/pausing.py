"""A loop's pause: the calls it waits for, the ``gateway`` object that reports it, and storing it.

Every kind of pause goes through :func:`store_pause`: a client tool, an approval, and a running call
asking the user for input (an MCP elicitation, ``loop/asking.py``). The continuation is stored first;
only then are the calls waiting for an answer handed to the held-call registry, and the pause
reported. Split from ``engine.py`` (the loop itself); ``tool_round.py`` pauses through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.canonical import Message, ToolCall, strip_artifacts
from gateway.loop.asking import TurnAsks
from gateway.loop.events import LoopResult
from gateway.loop.pairing import ToolResult
from gateway.observability import metrics

if TYPE_CHECKING:
    from gateway.loop.state import LoopDeps, LoopRequest, LoopState


@dataclass(slots=True)
class PendingCall:
    call: ToolCall
    reason: str  # "client" | "approval" | "elicitation"
    approval_timeout_s: float | None = None
    # An elicitation: the question, its hold id, round and deadline (``Ask.pending_fields``).
    ask: dict[str, Any] | None = None


def gateway_extension(state: LoopState, status: str, continuation_id: str | None = None,
                      pending: list[PendingCall] | None = None) -> dict[str, Any]:
    extension: dict[str, Any] = {
        "status": status,
        "iterations": state.iterations,
        "answered_by": state.answered_by,
        "attempts": state.attempts,
        "tool_calls": state.tool_records,
        "headless_denials": state.headless_denials,
        "iteration_limit_reached": state.iteration_limit_reached,
    }
    if state.context:
        extension["context"] = state.context
    if state.sampling:
        extension["sampling"] = dict(state.sampling)
    if continuation_id is not None:
        extension["continuation_id"] = continuation_id
        extension["pending"] = [pending_entry(p) for p in pending or ()]
    return extension


def pending_entry(p: PendingCall) -> dict[str, Any]:
    entry: dict[str, Any] = {"tool_call_id": p.call["id"], "name": p.call["function"]["name"], "reason": p.reason}
    if p.ask is not None:
        entry["elicitation"] = p.ask["elicitation"]
    return entry


def waiting_calls(asks: TurnAsks | None) -> list[PendingCall]:
    """The turn's calls left waiting for a user's answer, as pending calls of the pause."""
    return [] if asks is None else [PendingCall(call, "elicitation", ask=fields) for call, fields in asks.pending()]


async def store_pause(request: LoopRequest, deps: LoopDeps, assistant: Message, results: dict[str, ToolResult],
                  pending: list[PendingCall], asks: TurnAsks | None) -> LoopResult:
    """Store the pause, then (only then) hand the calls waiting for answers to the held-call registry."""
    try:
        continuation_id = await deps.pause(request, assistant, results, pending)
    except BaseException:
        if asks is not None:
            asks.abandon()  # nothing was stored: the calls waiting for an answer end here
        raise
    if asks is not None:
        asks.adopt(request.tenant)
    state = request.state
    request.span.event("loopgate.pause", {"loopgate.continuation_id": continuation_id,
                                          "loopgate.pending": len(pending)})
    metrics.LOOP_ITERATIONS.observe(state.iterations)
    handed = [strip_artifacts({"tool_calls": [p.call]})["tool_calls"][0] for p in pending]
    result = LoopResult("paused", "tool_calls", state.usage,
                        gateway_extension(state, "paused", continuation_id, pending), handed, state.model)
    if request.on_finish is not None:
        request.on_finish(result)
    return result
