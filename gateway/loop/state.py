"""What one loop run is given and what it carries across a pause: the request, the dependencies, the state.

Apart from ``engine.py`` (which drives the loop) so the modules that only build a request, meter a
state or store a pause (usage, the API's surfaces, continuations) import the data, not the engine.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.canonical import HostedTools, Message, NativeRequest, ToolCall, ToolDef, Usage
from gateway.context import ContextGuard
from gateway.loop.asking import TurnAsks
from gateway.loop.events import LoopResult
from gateway.loop.pairing import ToolResult
from gateway.loop.pausing import PendingCall
from gateway.loop.tool_runs import ExecuteHook
from gateway.observability.tracing import NOOP, Span
from gateway.routing.router import Router
from gateway.routing.routes import RoutePlan
from gateway.tools.interaction import InputRetry


class ToolRunner(Protocol):
    """What the engine needs from the tool registry: the lookup and one execution."""

    def get(self, name: str) -> Any: ...

    def definitions(self, names: Any) -> list[ToolDef]: ...

    def source_tools(self, source: str) -> tuple[str, ...]: ...


@dataclass(slots=True)
class LoopState:
    """Everything a paused loop needs to carry on exactly where it stopped."""

    iterations: int = 0
    tool_rounds: int = 0
    answered_by: list[str] = field(default_factory=list)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    tool_records: list[dict[str, Any]] = field(default_factory=list)
    headless_denials: list[dict[str, Any]] = field(default_factory=list)
    text_emitted: bool = False
    iteration_limit_reached: bool = False
    context: dict[str, int] = field(default_factory=dict)
    # The model that answered the last call: the response's ``model`` (kept across a pause).
    model: str = ""
    # One entry per model call that answered (summaries included): [target label, prompt, completion,
    # cached, reasoning tokens]. Billing prices each by its own target (gateway/usage/pricing.py).
    calls: list[list[Any]] = field(default_factory=list)
    # Seconds this HTTP request waited on model calls (each from its first attempt to its answer, a
    # stream to its end) and tool rounds: the gateway overhead is the rest (not kept across a pause).
    waited_s: float = 0.0
    # What MCP servers sampled during this request's tool calls (each its own model call, billed to the
    # key on its own usage row): {calls, prompt_tokens, completion_tokens, refused}; empty when none asked.
    sampling: dict[str, int] = field(default_factory=dict)
    # Server tool calls admitted under the request's ``max_tool_calls`` (counted only when it sets one; a pause
    # carries the count, so a resume spends what is left: ``continuations.paused_data``).
    tool_calls_run: int = 0

    def add_sampling(self, prompt_tokens: int, completion_tokens: int, refused: bool = False) -> None:
        totals = self.sampling or {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "refused": 0}
        if refused:
            totals["refused"] += 1
        else:
            totals["calls"] += 1
            totals["prompt_tokens"] += prompt_tokens
            totals["completion_tokens"] += completion_tokens
        self.sampling = totals

    def add_wait(self, seconds: float) -> None:
        self.waited_s += seconds

    def add_call(self, label: str, usage: Usage) -> None:
        self.usage.add(usage)
        self.calls.append([label, usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens,
                           usage.reasoning_tokens])

    def to_dict(self) -> dict[str, Any]:
        return {
            "iterations": self.iterations, "tool_rounds": self.tool_rounds, "answered_by": self.answered_by,
            "attempts": self.attempts, "usage": [self.usage.prompt_tokens, self.usage.completion_tokens,
                                                 self.usage.cached_tokens, self.usage.reasoning_tokens,
                                                 self.usage.cache_creation_tokens],
            "tool_records": self.tool_records, "headless_denials": self.headless_denials,
            "text_emitted": self.text_emitted, "iteration_limit_reached": self.iteration_limit_reached,
            "context": self.context, "model": self.model, "sampling": self.sampling,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoopState:
        state = cls(**{k: v for k, v in data.items() if k != "usage"})
        state.usage = Usage(*data.get("usage", (0, 0, 0, 0)))
        return state


@dataclass(slots=True)
class ResumeTurn:
    """The paused turn, completed by the resume: results so far plus the approved calls to run now."""

    assistant: Message
    results: dict[str, ToolResult]
    approved: list[ToolCall] = field(default_factory=list)
    continuation_id: str = ""
    # Approval calls whose approval_timeout_s passed: denied, and audited by the resume that applies it.
    timed_out: list[str] = field(default_factory=list)
    # What the client said after its tool results (a Messages caller's text beside them): after the turn.
    follow_up: list[Message] = field(default_factory=list)
    # Held calls that asked their next question once answered (``loop/held.py``): the turn pauses again.
    asked: list[PendingCall] = field(default_factory=list)
    # The decisions' answers to held calls' questions (call id -> {"action", "content"}; None: timed out).
    answers: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    # Stateless servers' calls this replica retries with their answers (no replica holds them any more).
    retries: dict[str, InputRetry] = field(default_factory=dict)


@dataclass(slots=True, kw_only=True)
class LoopRequest:
    plan: RoutePlan
    messages: list[Message]
    client_tools: list[ToolDef]
    tool_choice: Any
    params: dict[str, Any]
    max_iterations: int
    headless: bool
    tenant: str
    stream: bool
    deadline: float
    state: LoopState = field(default_factory=LoopState)
    resume: ResumeTurn | None = None
    # The asking key, kept with a pause so approvers see who asked (never the secret).
    key_id: str = ""
    key_name: str = ""
    # Server tools the asking key may use (None: all of the route's); the rest are never offered.
    allowed_tools: frozenset[str] | None = None
    # Called with the result just before it is yielded (paused or completed): usage metering
    # adds its fields to ``result.gateway`` there (gateway/usage/meter.py).
    on_finish: Callable[[LoopResult], None] | None = None
    # The request's span (tracing.NOOP when tracing is off): model calls and tools become its children.
    span: Span = NOOP
    # The caller's request in its own wire format, for targets of that format (canonical.NativeRequest).
    native: NativeRequest | None = None
    # The surface that renders this loop, as it needs to answer a decision on a pause in its own shape
    # (``POST /v1/continuations/{id}``): opaque here, stored with a pause as ``data["origin"]``; None: chat.
    origin: dict[str, Any] | None = None
    # ``gateway.stream_rescue`` of the request: True / False override the route's ``stream_rescue``.
    stream_rescue: bool | None = None
    # The hosted tools the caller asked for (a Responses caller's ``web_search``, ...), for every model call.
    hosted: HostedTools | None = None
    # A Responses caller's ``max_tool_calls``: the server tool calls the whole response may run (a pause and its
    # resumes included), each call past it answered with a "limit reached" result (``tool_round.triage``).
    max_tool_calls: int | None = None
    # Yield each model call's answer as ``TurnArtifacts`` (a stateless Responses caller carries them back).
    carry_artifacts: bool = False


PauseHook = Callable[[LoopRequest, Message, dict[str, ToolResult], list[PendingCall]], Awaitable[str]]
# (tenant, call, reason, key id, key name, route) -> None: a headless denial, audited and notified
AuditHook = Callable[[str, ToolCall, str, str, str, str], Awaitable[None]]


@dataclass(slots=True)
class LoopDeps:
    router: Router
    tools: ToolRunner
    run_tool: ExecuteHook
    pause: PauseHook
    audit: AuditHook
    # Executes calls a human approved on resume; records each in the ledger so a retried resume never re-runs one.
    run_approved: Callable[[str, str], ExecuteHook] | None = None
    # The context guard: no request goes without it (a plain proxy request pays a cached size check).
    context: ContextGuard = field(default_factory=ContextGuard)
    route_lookup: Callable[[str], RoutePlan | None] | None = None
    # A turn's elicitation handlers (``loop/asking.py``); None: tools that ask for input are declined.
    asking: Callable[[LoopRequest], TurnAsks] | None = None
