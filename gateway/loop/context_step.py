"""The context guard as the loop applies it: before every model call and before every tool batch.

Per request this resolves the window (the smallest of the route's targets, so a fallback
target fits too), the output reserve and the summariser route once; then each check is a
cached token count. A byte-size bound skips counting entirely while the transcript is far
from the limit (a token is at least one byte), so plain proxy traffic pays nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from gateway import metrics
from gateway.canonical import Message, ModelRequest, ToolDef, text_of
from gateway.config.model import ContextConfig
from gateway.context import ContextGuard, GuardOutcome, cap_tool_messages, effective_window, encoding_for_model
from gateway.context.summary import summary_prompt
from gateway.loop.events import Notice
from gateway.routing.router import Attempt, Router
from gateway.routing.routes import RoutePlan

# Room for the finalize instruction and per-message framing on top of the estimate.
_SLACK_TOKENS = 64
_SUMMARY_MAX_TOKENS = 2048


class ContextStep:
    def __init__(self, guard: ContextGuard, router: Router, plan: RoutePlan, params: dict[str, Any],
                 deadline: float, lookup: Callable[[str], RoutePlan | None] | None, usage_sink: Any) -> None:
        self._guard = guard
        self._router = router
        self._plan = plan
        self._deadline = deadline
        self._usage = usage_sink
        route = plan.route
        self.config = route.context if route else ContextConfig()
        route_window = route.context_window if route else None
        self.window = min(effective_window(route_window, t.provider.type, t.model) for t in plan.targets)
        primary = plan.targets[0]
        self._label, self._model = primary.label, primary.model
        requested = params.get("max_completion_tokens") or params.get("max_tokens")
        default = min(primary.provider.default_max_tokens, self.window // 4)
        self.reserve = (requested if isinstance(requested, int) else default) + _SLACK_TOKENS
        self._limit = int(self.config.threshold * self.window)
        self._summarizer = lookup(self.config.compress_with) if lookup and self.config.compress_with else None
        self.report = {"compressions": 0, "pruned_messages": 0, "skipped_tools": 0, "estimated_tokens": 0}
        self._encoding: Any = None

    def _far_below(self, messages: list[Message], tools: list[ToolDef]) -> bool:
        size = len(orjson.dumps(messages)) + (len(orjson.dumps(tools)) if tools else 0)
        ratio = max(1.0, self._guard.estimator.ratio(self._label))
        return size * ratio + self.reserve + 4 * len(messages) < self._limit

    async def _summarize(self, old: list[Message]) -> str:
        assert self._summarizer is not None
        attempts: list[Attempt] = []
        request = ModelRequest(messages=summary_prompt(old), params={"max_tokens": _SUMMARY_MAX_TOKENS})
        answer = await self._router.complete(self._summarizer.targets, request, attempts, self._summarizer.retries,
                                             self._deadline)
        self._usage.add(answer.response.usage)
        return text_of(answer.response.message.get("content"))

    async def _fit(self, messages: list[Message], tools: list[ToolDef]) -> GuardOutcome | None:
        if self._far_below(messages, tools):
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

    async def before_call(self, transcript: list[Message], tools: list[ToolDef]) -> tuple[bool, list[Notice]]:
        """Make the transcript fit; True when even the minimum does not fit and the call must finalize."""
        outcome = await self._fit(transcript, tools)
        if outcome is None or outcome.action == "none":
            return False, []
        if outcome.action == "skip":
            metrics.CONTEXT_ACTIONS.inc("finalize")
            transcript[:] = outcome.transcript
            self.report["pruned_messages"] += outcome.pruned_messages
            return True, []
        return False, self._apply(outcome, transcript, 0)

    async def before_tools(self, transcript: list[Message], assistant: Message,
                           tools: list[ToolDef]) -> tuple[bool, list[Notice]]:
        """Before a tool batch: True when its calls must be skipped (no room for their results)."""
        outcome = await self._fit([*transcript, assistant], tools)
        if outcome is None or outcome.action == "none":
            return False, []
        if outcome.action == "skip":
            return True, []
        return False, self._apply(outcome, transcript, 1)

    def skipped(self, count: int) -> Notice:
        self.report["skipped_tools"] += count
        metrics.CONTEXT_ACTIONS.inc("skip", amount=count)
        return Notice("tools_skipped", {"count": count})

    def cap(self, messages: list[Message]) -> list[Message]:
        """Cut tool results over ``max_tool_result_tokens`` in the middle before they enter the transcript."""
        limit = self.config.max_tool_result_tokens
        if not limit:
            return messages
        if self._encoding is None:
            self._encoding = encoding_for_model(self._model)
        return cap_tool_messages(messages, limit, self._encoding)

    def observe(self, label: str, model: str, messages: list[Message], tools: list[ToolDef],
                prompt_tokens: int) -> None:
        """Calibrate the estimate with what the provider counted (only once a real count was made)."""
        if prompt_tokens and self.report["estimated_tokens"]:
            estimator = self._guard.estimator
            estimator.observe(label, estimator.count(messages, tools, model=model), prompt_tokens)
