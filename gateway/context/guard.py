"""The context guard: before each model call, make the transcript fit ``threshold * window``.

Levels, tried in order once the calibrated estimate (prompt + reserved output) passes the limit:

1. ``compressed``: the transcript is split into system messages (``system``/``developer``, never
   summarised: they are the operator's instructions), earlier summaries (kept as they are, never
   summarised again), the OLD part, and the RECENT part (the latest user message and everything
   after it: the current turn, whose tool-call pairs and artifacts an upstream needs verbatim).
   ``summarize(old)`` is called and the rebuild is ``systems + earlier summaries + new summary +
   recent``. A failing summariser or a rebuild that still does not fit falls through to pruning.
2. ``pruned``: from the ORIGINAL transcript, whole exchanges (a user message and everything up to
   the next user message) are dropped oldest first, then earlier summaries, until it fits. An
   exchange never splits an assistant ``tool_calls`` message from its results, because a user
   message can only come after the results, so no orphan is ever left.
3. ``skip``: even system messages plus the recent part do not fit. The outcome then carries that
   minimal transcript; the engine ends the loop with a finalize call.

If the minimal transcript cannot fit, the summariser is not called at all (it would be wasted).
Kept messages are the same dict objects, so their artifacts (``reasoning_content``,
``thinking_blocks``, ``extra_content``) are untouched. Sizes come from cached per-message counts,
so each check costs one cache lookup per message after the first; a large uncached remainder
(a new request with a long history) is encoded on a worker thread.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import tiktoken

from gateway.canonical import Message, ToolDef
from gateway.context.offload import encoding_off_loop, message_counts, tools_tokens
from gateway.context.summary import is_summary, summary_message, summary_prompt
from gateway.context.tokens import REPLY_PRIMING, TokenEstimator, count_message

__all__ = ["ContextGuard", "GuardAction", "GuardOutcome", "Summarize", "split_transcript", "summary_prompt"]

log = logging.getLogger(__name__)

GuardAction = Literal["none", "compressed", "pruned", "skip"]
Summarize = Callable[[list[Message]], Awaitable[str]]
_SYSTEM_ROLES = ("system", "developer")


@dataclass(slots=True)
class GuardOutcome:
    """What the guard did. ``transcript`` is the input list itself when ``action`` is ``none``."""

    transcript: list[Message]
    action: GuardAction
    estimated_tokens: int  # calibrated prompt estimate of ``transcript`` + reserve_output
    raw_tokens: int  # uncalibrated prompt estimate of ``transcript``: pass to TokenEstimator.observe
    limit: int  # int(threshold * window), what ``estimated_tokens`` was held against
    pruned_messages: int = 0  # messages removed (pruned or skip); 0 when compressed
    summarized_messages: int = 0  # messages replaced by the summary when compressed
    summary: str | None = None  # the new summary text, when the outcome uses one
    error: str | None = None  # why the summariser was not used, when it failed


@dataclass(slots=True)
class TranscriptSplit:
    """Indices into a transcript: what is protected, what was summarised before, and what is old."""

    systems: list[int] = field(default_factory=list)
    summaries: list[int] = field(default_factory=list)
    exchanges: list[list[int]] = field(default_factory=list)  # old part, grouped, oldest first
    recent_start: int = 0

    @property
    def old(self) -> list[int]:
        return [index for exchange in self.exchanges for index in exchange]


def split_transcript(transcript: Sequence[Message]) -> TranscriptSplit:
    """Split at the latest user message (not a summary); group everything before it into exchanges."""
    recent_start = None
    for index in range(len(transcript) - 1, -1, -1):
        message = transcript[index]
        if message.get("role") == "user" and not is_summary(message):
            recent_start = index
            break
    if recent_start is None:  # no user message at all: nothing is old
        recent_start = next((i for i, m in enumerate(transcript)
                             if m.get("role") not in _SYSTEM_ROLES and not is_summary(m)), len(transcript))
    split = TranscriptSplit(recent_start=recent_start)
    for index in range(recent_start):
        message = transcript[index]
        if message.get("role") in _SYSTEM_ROLES:
            split.systems.append(index)
        elif is_summary(message):
            split.summaries.append(index)
        elif message.get("role") == "user" or not split.exchanges:
            split.exchanges.append([index])
        else:
            split.exchanges[-1].append(index)
    return split


class _Sizer:
    """Prompt sizes of message subsets for one target, from per-message counts."""

    def __init__(self, estimator: TokenEstimator, target_label: str, encoding: tiktoken.Encoding,
                 counts: list[int], tools_tokens: int, reserve_output: int) -> None:
        self._estimator = estimator
        self._label = target_label
        self._reserve = max(0, reserve_output)
        self.encoding = encoding
        self.base = REPLY_PRIMING + tools_tokens
        self.counts = counts

    def message(self, message: Message) -> int:
        return count_message(message, self.encoding)

    def total(self, raw: int) -> int:
        return self._estimator.calibrated(self._label, raw) + self._reserve


class ContextGuard:
    """Keeps every model call of the loop inside the target's window (see the module docstring)."""

    def __init__(self, estimator: TokenEstimator | None = None) -> None:
        self.estimator = estimator or TokenEstimator()

    async def fit(self, transcript: list[Message], tools: Sequence[ToolDef], *, window: int, threshold: float,
                  reserve_output: int, target_label: str, summarize: Summarize | None = None,
                  model: str | None = None) -> GuardOutcome:
        """The transcript to send now. ``model`` picks the encoding (default: from ``provider:model`` label)."""
        limit = int(threshold * window)
        encoding = await encoding_off_loop(model or target_label.partition(":")[2] or target_label)
        counts = await message_counts(transcript, encoding)
        sizer = _Sizer(self.estimator, target_label, encoding, counts, await tools_tokens(tools, encoding),
                       reserve_output)
        raw = sizer.base + sum(sizer.counts)
        if sizer.total(raw) <= limit:
            return GuardOutcome(transcript, "none", sizer.total(raw), raw, limit)

        split = split_transcript(transcript)
        floor = sorted([*split.systems, *range(split.recent_start, len(transcript))])
        floor_raw = sizer.base + sum(sizer.counts[i] for i in floor)
        if sizer.total(floor_raw) > limit:
            minimal = [transcript[i] for i in floor]
            return GuardOutcome(minimal, "skip", sizer.total(floor_raw), floor_raw, limit,
                                pruned_messages=len(transcript) - len(minimal))

        error = None
        if summarize is not None and split.exchanges:
            outcome, error = await self._compress(transcript, split, sizer, summarize, limit)
            if outcome is not None:
                return outcome
        return self._prune(transcript, split, sizer, raw, limit, error)

    async def _compress(self, transcript: list[Message], split: TranscriptSplit, sizer: _Sizer,
                        summarize: Summarize, limit: int) -> tuple[GuardOutcome | None, str | None]:
        old = [transcript[i] for i in split.old]
        try:
            text = await summarize(old)
        except Exception as exc:  # any summariser failure degrades to pruning; cancellation still propagates
            log.warning("context summariser failed, pruning instead: %s", exc)
            return None, f"summariser failed: {exc}"
        if not isinstance(text, str) or not text.strip():
            return None, "summariser returned no text"
        summary = summary_message(text)
        rebuilt = [*(transcript[i] for i in split.systems), *(transcript[i] for i in split.summaries), summary,
                   *transcript[split.recent_start:]]
        raw = (sizer.base + sizer.message(summary) + sum(sizer.counts[i] for i in split.systems)
               + sum(sizer.counts[i] for i in split.summaries) + sum(sizer.counts[split.recent_start:]))
        if sizer.total(raw) > limit:
            return None, "the summary did not make the transcript fit"
        return GuardOutcome(rebuilt, "compressed", sizer.total(raw), raw, limit, summarized_messages=len(old),
                            summary=text.strip()), None

    @staticmethod
    def _prune(transcript: list[Message], split: TranscriptSplit, sizer: _Sizer, raw: int, limit: int,
               error: str | None) -> GuardOutcome:
        dropped: set[int] = set()
        # Oldest exchanges first; earlier summaries only after every exchange is gone.
        for group in [*split.exchanges, *([i] for i in split.summaries)]:
            if sizer.total(raw) <= limit:
                break
            dropped.update(group)
            raw -= sum(sizer.counts[i] for i in group)
        kept = [message for index, message in enumerate(transcript) if index not in dropped]
        # The floor fits (checked before), so dropping everything droppable always ends here fitting.
        return GuardOutcome(kept, "pruned", sizer.total(raw), raw, limit, pruned_messages=len(dropped), error=error)
