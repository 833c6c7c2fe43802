"""The context guard as the loop applies it: before every model call and before every tool batch.

Per request this resolves the window (the smallest of the route's targets, so a fallback
target fits too), the output reserve and the summariser route once; then each check is a
cached token count. A byte-size bound skips counting entirely while the transcript is far
from the limit (a token is at least one byte), so plain proxy traffic pays nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson

from gateway.canonical import Message, ModelRequest, ToolDef, text_of
from gateway.context import (
    ContextGuard,
    GuardOutcome,
    cap_tool_messages,
    count_text,
    effective_window,
    encoding_for_model,
    known_window,
)
from gateway.context.summary import is_summary, summary_message, summary_prompt
from gateway.loop.events import Notice
from gateway.observability import metrics
from gateway.observability.tracing import NOOP, Span
from gateway.routing.router import Attempt, Router
from gateway.routing.routes import RoutePlan

# Room for the finalize instruction and per-message framing on top of the estimate.
_SLACK_TOKENS = 64
_SUMMARY_MAX_TOKENS = 2048
# Tool results larger than this many bytes (about 8K tokens) take long enough to encode that they are capped on
# a worker thread, off the event loop (bench/README.md).
_OFFLOAD_BYTES = 32_768


_WINDOWS: dict[str, tuple[int, bool]] = {}


def _window(plan: RoutePlan) -> tuple[int, bool]:
    """The smallest window among the route's targets (a fallback must fit too), and whether it is known
    (configured, or every target in the model table) rather than the conservative default."""
    cached = _WINDOWS.get(plan.name)
    if cached is None:
        route_window = plan.route.context_window
        window = min(effective_window(route_window, t.provider.type, t.model) for t in plan.targets)
        known = route_window is not None or all(known_window(t.provider.type, t.model) for t in plan.targets)
        cached = (window, known)
        if len(_WINDOWS) < 4096:  # direct "provider/model" names come from clients: stay bounded
            _WINDOWS[plan.name] = cached
    return cached


class ContextStep:
    def __init__(self, guard: ContextGuard, router: Router, plan: RoutePlan, params: dict[str, Any],
                 deadline: float, lookup: Callable[[str], RoutePlan | None] | None, usage_sink: Any,
                 span: Span = NOOP) -> None:
        self._guard = guard
        self._span = span  # the request's span: a summary is a model call, with its own ``chat`` span
        self._router = router
        self._plan = plan
        self._deadline = deadline
        self._usage = usage_sink
        self.config = plan.route.context
        self.window, self.window_known = _window(plan)
        primary = plan.targets[0]
        self._label, self._model = primary.label, primary.model
        requested = params.get("max_completion_tokens") or params.get("max_tokens")
        default = min(primary.provider.default_max_tokens, self.window // 4)
        self.reserve = (requested if isinstance(requested, int) else default) + _SLACK_TOKENS
        self._limit = int(self.config.threshold * self.window)
        self._summarizer = lookup(self.config.compress_with) if lookup and self.config.compress_with else None
        self.report = {"compressions": 0, "pruned_messages": 0, "skipped_tools": 0, "estimated_tokens": 0}
        self._encoding: Any = None

    def _bound(self, messages: list[Message], tools: list[ToolDef]) -> float:
        """An upper bound of the estimate without tokenizing: a token is at least one byte."""
        size = len(orjson.dumps(messages)) + (len(orjson.dumps(tools)) if tools else 0)
        ratio = max(1.0, self._guard.estimator.ratio(self._label))
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
        if self._bound(messages, tools) + headroom < self._limit:
            return None
        outcome = await self._guard.fit(messages, tools, window=self.window, threshold=self.config.threshold,
                                        reserve_output=self.reserve, target_label=self._label,
                                        summarize=self._summarize if self._summarizer else None, model=self._model)
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
        if first and not self.window_known:
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
        transcript[:] = self._squeeze(outcome)
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

    def _squeeze(self, outcome: GuardOutcome) -> list[Message]:
        """Last resort for the finalize call: the current turn alone is too large, so its tool
        results share what room is left (each cut in the middle), rather than overflowing."""
        minimal = outcome.transcript
        over = outcome.estimated_tokens - self._limit
        tool_messages = [m for m in minimal if m.get("role") == "tool" and isinstance(m.get("content"), str)]
        if over <= 0 or not tool_messages:
            return minimal
        if self._encoding is None:
            self._encoding = encoding_for_model(self._model)
        sizes = [count_text(m["content"], self._encoding) for m in tool_messages]
        ratio = max(1.0, self._guard.estimator.ratio(self._label))
        budget = max(32, int((sum(sizes) - over / ratio) // len(tool_messages)))
        return cap_tool_messages(minimal, budget, self._encoding)

    async def before_tools(self, transcript: list[Message], assistant: Message, tools: list[ToolDef],
                           calls: int) -> tuple[int, list[Notice]]:
        """Before a tool batch: how many of its calls have room for their results (the rest are skipped).

        Each result is assumed to take up to ``max_tool_result_tokens`` (when configured), so the
        batch is cut before running rather than overflowing the next call.
        """
        per_result = self.config.max_tool_result_tokens or 0
        headroom = calls * per_result
        outcome = await self._fit([*transcript, assistant], tools, headroom)
        if outcome is None:
            return calls, []
        notices: list[Notice] = []
        if outcome.action == "skip" or self._limit - outcome.estimated_tokens < max(headroom, 1):
            notices = await self._compact_turn(transcript)
            if notices:
                outcome = await self._fit([*transcript, assistant], tools, headroom)
                if outcome is None:
                    return calls, notices
        if outcome.action == "skip":
            return 0, notices
        if outcome.action != "none":
            notices += self._apply(outcome, transcript, 1)
        room = self._limit - outcome.estimated_tokens
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
        limit = self.config.max_tool_result_tokens
        if not limit:
            return messages
        size = sum(len(m["content"].encode()) for m in messages
                   if m.get("role") == "tool" and isinstance(m.get("content"), str))
        if size <= limit:
            return messages  # a token is at least one byte: nothing can be over the cap
        if self._encoding is None:
            self._encoding = await asyncio.to_thread(encoding_for_model, self._model)
        if size > _OFFLOAD_BYTES:
            return await asyncio.to_thread(cap_tool_messages, messages, limit, self._encoding)
        return cap_tool_messages(messages, limit, self._encoding)

    def observe(self, label: str, model: str, messages: list[Message], tools: list[ToolDef],
                prompt_tokens: int) -> None:
        """Calibrate the estimate with what the provider counted (only once a real count was made)."""
        if prompt_tokens and self.report["estimated_tokens"]:
            estimator = self._guard.estimator
            estimator.observe(label, estimator.count(messages, tools, model=model), prompt_tokens)
