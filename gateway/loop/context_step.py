"""The context guard as the loop applies it: before every model call and before every tool batch.

Per request this resolves the window (the smallest of the route's targets, so a fallback
target fits too), the output reserve and the summariser route once; then each check is a
cached token count. A byte-size bound skips counting entirely while the transcript is far
from the limit (a token is at least one byte), so plain proxy traffic pays nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.canonical import Message, ModelRequest, ToolDef, text_of
from gateway.config.models_section import ContextConfig
from gateway.context import (
    ContextGuard,
    GuardOutcome,
    cap_tool_messages,
    count_text,
    effective_window,
    known_window,
)
from gateway.context.offload import encoding_off_loop, off_loop_above, raw_prompt_tokens
from gateway.context.summary import is_summary, summary_message, summary_prompt
from gateway.loop.events import Notice
from gateway.observability import metrics
from gateway.observability.tracing import NOOP, Span
from gateway.routing.router import Attempt, Router
from gateway.routing.routes import RoutePlan

# Room for the finalize instruction and per-message framing on top of the estimate.
_SLACK_TOKENS = 64
_SUMMARY_MAX_TOKENS = 2048


@dataclass(frozen=True, slots=True)
class RouteWindow:
    """What the guard needs of a route, resolved once per route plan rather than once per request."""

    plan: RoutePlan
    config: ContextConfig
    # The smallest window among the route's targets (a fallback must fit too), and whether it is known
    # (configured, or every target in the model table) rather than the conservative default.
    window: int
    known: bool
    #: the estimate past which the guard acts: ``threshold`` of the window
    limit: int
    # The primary target: whose tokenizer counts, whose ratio calibrates the estimate.
    label: str
    model: str
    #: the answer's room when the request names no output cap
    default_output: int


_WINDOWS: dict[str, RouteWindow] = {}


def route_window(plan: RoutePlan) -> RouteWindow:
    cached = _WINDOWS.get(plan.name)
    if cached is not None and cached.plan is plan:
        return cached
    route_window = plan.route.context_window
    window = min(effective_window(route_window, t.provider.type, t.model) for t in plan.targets)
    known = route_window is not None or all(known_window(t.provider.type, t.model) for t in plan.targets)
    config = plan.route.context
    primary = plan.targets[0]
    cached = RouteWindow(plan, config, window, known, int(config.threshold * window), primary.label, primary.model,
                         min(primary.provider.default_max_tokens, window // 4))
    if len(_WINDOWS) < 4096 or plan.name in _WINDOWS:  # direct "provider/model" names come from clients: bounded
        _WINDOWS[plan.name] = cached
    return cached


class ContextStep:
    __slots__ = ("_deadline", "_encoding", "_guard", "_router", "_span", "_summarizer", "_usage", "report", "reserve",
                 "route")

    def __init__(self, guard: ContextGuard, router: Router, plan: RoutePlan, params: dict[str, Any],
                 deadline: float, lookup: Callable[[str], RoutePlan | None] | None, usage_sink: Any,
                 span: Span = NOOP) -> None:
        self._guard = guard
        self._span = span  # the request's span: a summary is a model call, with its own ``chat`` span
        self._router = router
        self._deadline = deadline
        self._usage = usage_sink
        self.route = route = route_window(plan)
        requested = params.get("max_completion_tokens") or params.get("max_tokens")
        self.reserve = (requested if isinstance(requested, int) else route.default_output) + _SLACK_TOKENS
        compress_with = route.config.compress_with
        self._summarizer = lookup(compress_with) if lookup and compress_with else None
        self.report = {"compressions": 0, "pruned_messages": 0, "skipped_tools": 0, "estimated_tokens": 0}
        self._encoding: Any = None

    def _bound(self, messages: list[Message], tools: list[ToolDef]) -> float:
        """An upper bound of the estimate without tokenizing: a token is at least one byte."""
        size = len(orjson.dumps(messages)) + (len(orjson.dumps(tools)) if tools else 0)
        ratio = max(1.0, self._guard.estimator.ratio(self.route.label))
        return size * ratio + self.reserve + 4 * len(messages)

    async def _summarize(self, old: list[Message]) -> str:
        assert self._summarizer is not None
        attempts: list[Attempt] = []
        request = ModelRequest(messages=summary_prompt(old), params={"max_tokens": _SUMMARY_MAX_TOKENS})
        targets = self._summarizer.targets
        call_span = self._span.model_call(targets, request) if self._span.recording else None
        try:
            answer = await self._router.complete(targets, request, attempts, self._summarizer.retries, self._deadline)
        except BaseException as exc:
            if call_span is not None:
                call_span.failed(exc, attempts)
            raise
        if call_span is not None:
            call_span.answered(answer.target, answer.response, attempts)
        self._usage(answer.target.label, answer.response.usage)
        return text_of(answer.response.message.get("content"))

    async def _fit(self, messages: list[Message], tools: list[ToolDef], headroom: int = 0) -> GuardOutcome | None:
        if self._bound(messages, tools) + headroom < self.route.limit:
            return None
        route = self.route
        outcome = await self._guard.fit(messages, tools, window=route.window, threshold=route.config.threshold,
                                        reserve_output=self.reserve, target_label=route.label,
                                        summarize=self._summarize if self._summarizer else None, model=route.model)
        self.report["estimated_tokens"] = outcome.estimated_tokens
        return outcome

    def _apply(self, outcome: GuardOutcome, transcript: list[Message], keep_tail: int) -> list[Notice]:
        """Record a compression or pruning and rebuild ``transcript`` in place (the store keeps this list)."""
        metrics.CONTEXT_ACTIONS.inc(outcome.action)
        rebuilt = outcome.transcript[: len(outcome.transcript) - keep_tail] if keep_tail else outcome.transcript
        transcript[:] = rebuilt
        if outcome.action == "compressed":
            self.report["compressions"] += 1
            return [Notice("context_compressed", {"summarized_messages": outcome.summarized_messages,
                                                  "estimated_tokens": outcome.estimated_tokens})]
        self.report["pruned_messages"] += outcome.pruned_messages
        return [Notice("context_pruned", {"pruned_messages": outcome.pruned_messages,
                                          "estimated_tokens": outcome.estimated_tokens})]

    async def before_call(self, transcript: list[Message], tools: list[ToolDef],
                          first: bool = False) -> tuple[bool, list[Notice]]:
        """Make the transcript fit; True when even the minimum does not fit and the call must finalize.

        The first call of a request carries only what the client sent. With an unknown window (a
        self-hosted model the table does not know) that is not second-guessed, and a client request
        that alone cannot fit is sent as it is: the upstream's own limit, and failover to a larger
        target on ``context_length_exceeded``, decide. Only what the loop adds is guarded there.
        """
        if first and not self.route.known:
            return False, []
        outcome = await self._fit(transcript, tools)
        if outcome is None or outcome.action == "none":
            return False, []
        if first and outcome.action == "skip":
            return False, []
        if outcome.action != "skip":
            return False, self._apply(outcome, transcript, 0)
        # The current request's own tool rounds are too large: fold the older rounds, then fit again.
        notices = await self._compact_turn(transcript)
        if notices:
            outcome = await self._fit(transcript, tools)
            if outcome is None or outcome.action == "none":
                return False, notices
            if outcome.action != "skip":
                return False, notices + self._apply(outcome, transcript, 0)
        metrics.CONTEXT_ACTIONS.inc("finalize")
        self.report["pruned_messages"] += outcome.pruned_messages
        transcript[:] = await self._squeeze(outcome)
        return True, notices

    async def _compact_turn(self, transcript: list[Message]) -> list[Notice]:
        """Replace all but the last tool round of the current request with a summary (or a note).

        The guard keeps the current turn whole, which is right for a turn that fits; a long agent
        loop outgrows it. Whole rounds (an assistant message with its calls and all their results)
        go, so pairing holds, and the kept last round keeps its artifacts. A round summary sits
        after the user's message, where Gemini counts it as the start of the current turn.
        """
        user = max((i for i, m in enumerate(transcript) if m.get("role") == "user" and not is_summary(m)),
                   default=-1)
        rounds = [i for i in range(user + 1, len(transcript))
                  if transcript[i].get("role") == "assistant" and transcript[i].get("tool_calls")]
        if len(rounds) < 2:
            return []
        old = transcript[rounds[0]:rounds[-1]]
        text = ""
        if self._summarizer is not None:
            try:
                text = await self._summarize(old)
            except Exception:  # a failed summary falls back to a plain note
                text = ""
        compressed = bool(text.strip())
        if not compressed:
            text = (f"{len(rounds) - 1} earlier tool round(s) of this request were removed to fit the context "
                    "window; repeat a tool call if its result is needed again.")
        transcript[rounds[0]:rounds[-1]] = [summary_message(text)]
        metrics.CONTEXT_ACTIONS.inc("compressed" if compressed else "pruned")
        if compressed:
            self.report["compressions"] += 1
            return [Notice("context_compressed", {"summarized_messages": len(old)})]
        self.report["pruned_messages"] += len(old)
        return [Notice("context_pruned", {"pruned_messages": len(old)})]

    async def _squeeze(self, outcome: GuardOutcome) -> list[Message]:
        """Last resort for the finalize call: the current turn alone is too large, so its tool
        results share what room is left (each cut in the middle), rather than overflowing.

        The results are what made the turn too large (megabytes, from a tool or a client), so
        encoding and cutting them runs on a worker thread past ``OFFLOAD_BYTES``.
        """
        minimal = outcome.transcript
        over = outcome.estimated_tokens - self.route.limit
        tool_messages = [m for m in minimal if m.get("role") == "tool" and isinstance(m.get("content"), str)]
        if over <= 0 or not tool_messages:
            return minimal
        encoding = await self._encoding_now()
        ratio = max(1.0, self._guard.estimator.ratio(self.route.label))

        def cut() -> list[Message]:
            sizes = [count_text(m["content"], encoding) for m in tool_messages]
            budget = max(32, int((sum(sizes) - over / ratio) // len(tool_messages)))
            return cap_tool_messages(minimal, budget, encoding)

        return await off_loop_above(sum(len(m["content"]) for m in tool_messages), cut)

    async def _encoding_now(self) -> Any:
        """The primary target's encoding (its first load on a worker thread), kept for the request."""
        if self._encoding is None:
            self._encoding = await encoding_off_loop(self.route.model)
        return self._encoding

    async def before_tools(self, transcript: list[Message], assistant: Message, tools: list[ToolDef],
                           calls: int) -> tuple[int, list[Notice]]:
        """Before a tool batch: how many of its calls have room for their results (the rest are skipped).

        Each result is assumed to take up to ``max_tool_result_tokens`` (when configured), so the
        batch is cut before running rather than overflowing the next call.
        """
        per_result = self.route.config.max_tool_result_tokens or 0
        headroom = calls * per_result
        outcome = await self._fit([*transcript, assistant], tools, headroom)
        if outcome is None:
            return calls, []
        notices: list[Notice] = []
        if outcome.action == "skip" or self.route.limit - outcome.estimated_tokens < max(headroom, 1):
            notices = await self._compact_turn(transcript)
            if notices:
                outcome = await self._fit([*transcript, assistant], tools, headroom)
                if outcome is None:
                    return calls, notices
        if outcome.action == "skip":
            return 0, notices
        if outcome.action != "none":
            notices += self._apply(outcome, transcript, 1)
        room = self.route.limit - outcome.estimated_tokens
        if room <= 0:
            return 0, notices
        return (min(calls, room // per_result) if per_result else calls), notices

    def skipped(self, count: int) -> Notice:
        self.report["skipped_tools"] += count
        metrics.CONTEXT_ACTIONS.inc("skip", amount=count)
        return Notice("tools_skipped", {"count": count})

    async def cap(self, messages: list[Message]) -> list[Message]:
        """Cut tool results over ``max_tool_result_tokens`` in the middle before they enter the transcript.

        Results that cannot be over the cap (fewer bytes than tokens allowed) are not encoded
        at all; large ones are encoded on a worker thread (tiktoken releases the GIL), so a tool that
        returns megabytes does not stall every other request on this worker.
        """
        limit = self.route.config.max_tool_result_tokens
        if not limit:
            return messages
        size = sum(len(m["content"].encode()) for m in messages
                   if m.get("role") == "tool" and isinstance(m.get("content"), str))
        if size <= limit:
            return messages  # a token is at least one byte: nothing can be over the cap
        encoding = await self._encoding_now()
        return await off_loop_above(size, lambda: cap_tool_messages(messages, limit, encoding))

    async def observe(self, label: str, model: str, messages: list[Message], tools: list[ToolDef],
                      prompt_tokens: int) -> None:
        """Calibrate the estimate with what the provider counted (only once a real count was made).

        The messages sent are mostly counted already (the guard's cache); a squeezed or summarised
        transcript is not, and its count runs off the loop when large.
        """
        if prompt_tokens and self.report["estimated_tokens"]:
            raw = await raw_prompt_tokens(messages, tools, await encoding_off_loop(model))
            self._guard.estimator.observe(label, raw, prompt_tokens)
