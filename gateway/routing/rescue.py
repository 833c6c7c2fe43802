"""Continuing a stream that failed after part of its answer reached the caller (``stream_rescue``).

The router's walk keeps going after the commit point when a route allows it: the next attempt
is asked for the *same* answer, and what it streams passes through a ``Rescue`` before it
reaches the caller:

* **prefill** (the target can continue an assistant message): the request carries the sent text
  as the final assistant turn, and what comes back is the rest of the answer, forwarded as is
  (trailing whitespace is not sent as prefill, Anthropic rejects it; a continuation that repeats
  it has it swallowed). A target may ignore the prefill and answer from the start (DeepSeek's
  ``prefix`` outside its beta URL): the first characters of a continuation are held (never more
  than the prefill's length, leading whitespace aside) until they tell. One that starts with the
  whole prefill is a restart, its repeat dropped as a restart's is; one that starts like the
  prefill and then leaves it, or ends inside it, raises ``Diverged``; one whose first character
  already differs is the continuation, forwarded from its start;
* **restart** (it cannot, or it answered a prefill with a 400 and was marked as never again):
  the target answers afresh; while its text (and reasoning text) reproduces what the caller
  already has, it is swallowed, and past it the rest is forwarded. A new answer that diverges,
  or ends inside what was sent, raises ``Diverged``: the router then ends the stream with the
  original failure, never with a spliced answer.

Tool calls are not streamed to callers as deltas, so a call cut mid-arguments is simply asked for
again by the continuation. Per-target prefill capability: ``prefill_kind``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from gateway.canonical import (
    Answering,
    Message,
    ModelRequest,
    ModelResponse,
    ReasoningDelta,
    StreamDelta,
    TextDelta,
    rewritten,
)
from gateway.upstream.errors import ProviderError, ResponseTooLarge

#: how a target continues an assistant message: the final assistant (Anthropic) or model (Gemini) turn
#: as is (``native``), DeepSeek/Mistral ``prefix: true`` on that message, or vLLM/SGLang
#: ``continue_final_message``; None: it cannot (a continuation is a restart)
PrefillKind = Literal["native", "prefix", "continue_final_message"]
PREFILL_SETTINGS = ("auto", "off", "native", "prefix", "continue_final_message")

# Claude models from 4.6 on answer a prefilled assistant turn with a 400 (as the adaptive-thinking rule).
_CLAUDE_VERSION = re.compile(r"claude-(?:opus|sonnet|haiku)-(\d+)(?:-(\d{1,2})(?!\d))?")
_PREFIX_HOSTS = ("api.deepseek.com", "api.mistral.ai")


def prefill_kind(setting: str, provider_type: str, base_url: str, model: str) -> PrefillKind | None:
    """A target's prefill capability: the configured ``prefill`` or, for ``auto``, the default of its family."""
    if setting == "off":
        return None
    if setting != "auto":
        return setting  # type: ignore[return-value]  # checked against PREFILL_SETTINGS by the config
    if provider_type == "gemini":
        return "native"
    if provider_type == "anthropic":
        match = _CLAUDE_VERSION.search(model)
        if match and (int(match.group(1)), int(match.group(2) or 0)) >= (4, 6):
            return None
        return "native" if match or "claude" in model else None
    if provider_type == "openai" and any(host in base_url for host in _PREFIX_HOSTS):
        return "prefix"
    return None


@dataclass(frozen=True, slots=True)
class StreamPolicy:
    """A route's stream policy (``stream_rescue``, ``stream_idle_timeout_s``), copied once per route."""

    rescue: bool = True
    #: the longest silence inside a stream after its first content; None: the provider's read timeout
    idle_s: float | None = None


DEFAULT_STREAM_POLICY = StreamPolicy()
NO_RESCUE = StreamPolicy(rescue=False)


class Diverged(Exception):
    """A restart's text left what the caller already has: nothing more may be forwarded."""


def sent_so_far(batches: list[list[StreamDelta]]) -> tuple[str, str]:
    """The text and reasoning text a stream's yielded batches carried."""
    text: list[str] = []
    reasoning: list[str] = []
    for batch in batches:
        for delta in batch:
            if type(delta) is TextDelta:
                text.append(delta.text)
            elif type(delta) is ReasoningDelta:
                reasoning.append(delta.text)
    return "".join(text), "".join(reasoning)


def kept_chars(deltas: list[StreamDelta], kept: int, bound: int) -> int:
    """``kept`` plus the text and reasoning characters of ``deltas``; past ``bound`` the stream is too large."""
    for delta in deltas:
        if type(delta) is TextDelta or type(delta) is ReasoningDelta:
            kept += len(delta.text)
    if kept > bound:
        raise ResponseTooLarge(f"upstream stream is larger than max_response_bytes ({bound})")
    return kept


class Rescue:
    """One rescue in progress: what the caller has, what failed first, and how the current attempt continues."""

    __slots__ = ("_at", "_lead", "_matched", "_pending_ws", "_prefix", "_probe", "_reasoning_at", "_tail", "_waiting",
                 "after_chars", "how", "original", "original_metric", "original_target", "reasoning", "text")

    def __init__(self, original: ProviderError, original_target: str, original_metric: str, text: str,
                 reasoning: str) -> None:
        self.original = original
        self.original_target = original_target
        self.original_metric = original_metric  # its metric label (bounded for direct routes)
        self.text = text
        self.reasoning = reasoning
        self.after_chars = len(text) + len(reasoning)
        self.how = "restart"
        self._at = self._reasoning_at = 0
        self._pending_ws = ""
        self._waiting: Answering | None = None
        self._tail: list[str] = []
        # A prefill continuation's first pieces, held until they tell whether it repeats the prefill (None: told).
        self._probe: list[str] | None = None
        self._prefix = ""
        self._matched = 0  # characters of the prefill the held pieces reproduced
        self._lead = -1  # leading whitespace of the held pieces; -1 until their first other character

    def request_for(self, request: ModelRequest, kind: PrefillKind | None) -> ModelRequest:
        """The request this attempt sends, and how it continues (``how``).

        Prefill only for text alone: reasoning already shown cannot be handed back as a prefix.
        """
        self._at = self._reasoning_at = 0
        self._waiting = None
        self._tail = []
        self._probe = None
        if kind is None or not self.text or self.reasoning:
            self.how = "restart"
            self._pending_ws = ""
            return request
        self.how = "prefill"
        prefix = self.text.rstrip()
        self._pending_ws = self.text[len(prefix):]
        if not prefix:
            self.how = "restart"
            return request
        self._prefix, self._probe, self._matched, self._lead = prefix, [], 0, 0
        turn: Message = {"role": "assistant", "content": prefix}
        params = request.params
        if kind == "prefix":
            turn["prefix"] = True
        elif kind == "continue_final_message":
            params = {**params, "continue_final_message": True, "add_generation_prompt": False}
        return ModelRequest(messages=[*request.messages, turn], tools=request.tools, tool_choice=request.tool_choice,
                            params=params, native=request.native, hosted=request.hosted)

    def pass_on(self, deltas: list[StreamDelta]) -> list[StreamDelta]:
        """What of an attempt's batch the caller gets; raises ``Diverged``."""
        out: list[StreamDelta] = []
        prefill = self.how == "prefill"
        for delta in deltas:
            if isinstance(delta, Answering):
                self._waiting = delta  # named before the first forwarded delta
                continue
            if isinstance(delta, TextDelta):
                piece = self._continue(delta.text) if prefill else self._reproduce(delta.text)
                if not piece:
                    continue
                if piece is not delta.text:
                    delta = TextDelta(piece)
            elif prefill:  # the caller's answer is past its reasoning: a continuation's own is not shown
                continue
            elif isinstance(delta, ReasoningDelta):
                piece = self._reproduce_reasoning(delta.text)
                if not piece:
                    continue
                if piece is not delta.text:
                    delta = ReasoningDelta(piece)
            elif self._reasoning_at < len(self.reasoning):  # a signature of reasoning not yet reproduced
                continue
            if self._waiting is not None:
                out.append(self._waiting)
                self._waiting = None
            out.append(delta)
        return out

    def _continue(self, text: str) -> str:
        if self._probe is not None:
            told = self._told(text)
            if told is None:
                return ""
            text = told
        pending = self._pending_ws
        if pending and text:
            self._pending_ws = ""
            same = 0
            while same < len(pending) and same < len(text) and text[same] == pending[same]:
                same += 1
            text = text[same:]
        self._tail.append(text)
        return text

    def _told(self, text: str) -> str | None:
        """Hold a prefill continuation's piece while it may be a repeat of the prefill; once it tells, the text
        to forward (a repeat dropped). None: still undecided. Raises ``Diverged`` for a restart that left it."""
        probe = self._probe
        assert probe is not None
        probe.append(text)
        prefix, at = self._prefix, self._matched
        if self._lead >= 0 and at == 0:  # leading whitespace is not compared
            body = text.lstrip()
            self._lead += len(text) - len(body)
            if not body:
                # Whitespace only so far; more of it than the prefill is no restart of it.
                return self._release() if self._lead > len(prefix) else None
            text, self._lead = body, -1
        left = len(prefix) - at
        if prefix.startswith(text[:left], at):
            if len(text) < left:
                self._matched = at + len(text)
                return None
            self._probe = None  # the whole prefill again: a restart, its repeat dropped
            return text[left:]
        if at or text[0] == prefix[at]:
            raise Diverged  # it began as the sent text and left it: a restart that diverged
        return self._release()

    def _release(self) -> str:
        """The held pieces are the continuation itself: all of them are forwarded."""
        probe, self._probe = self._probe or [], None
        return "".join(probe)

    def flush(self) -> list[StreamDelta]:
        """At the attempt's end: what is still held. Whitespace only is the continuation; anything else ended
        inside the prefill it repeated (``Diverged``)."""
        if self._probe is None or not self._probe:
            self._probe = None
            return []
        if self._lead < 0:
            raise Diverged
        piece = self._continue(self._release())
        if not piece:
            return []
        out: list[StreamDelta] = [TextDelta(piece)]
        if self._waiting is not None:
            out.insert(0, self._waiting)
            self._waiting = None
        return out

    def _reproduce(self, text: str) -> str:
        sent, at = self.text, self._at
        if at >= len(sent):
            return text
        if self.reasoning and self._reasoning_at < len(self.reasoning):
            raise Diverged  # answer text before the reasoning the caller saw was reproduced
        left = len(sent) - at
        if len(text) <= left:
            if not sent.startswith(text, at):
                raise Diverged
            self._at = at + len(text)
            return ""
        if not text.startswith(sent[at:]):
            raise Diverged
        self._at = len(sent)
        return text[left:]

    def _reproduce_reasoning(self, text: str) -> str:
        sent, at = self.reasoning, self._reasoning_at
        if at >= len(sent):
            if self.text:
                raise Diverged  # more reasoning where the caller already has answer text
            return text
        left = len(sent) - at
        if len(text) <= left:
            if not sent.startswith(text, at):
                raise Diverged
            self._reasoning_at = at + len(text)
            return ""
        if not text.startswith(sent[at:]):
            raise Diverged
        self._reasoning_at = len(sent)
        return text[left:]

    def complete(self, response: ModelResponse) -> ModelResponse:
        """The whole answer as the caller received it; raises ``Diverged`` when a restart ended inside it."""
        if self.how == "prefill":
            message = rewritten(response.message, content=self.text + "".join(self._tail) or None)
            for key in ("reasoning_content", "thinking_blocks"):
                message.pop(key, None)
            response.message = message
            return response
        if self._at < len(self.text) or self._reasoning_at < len(self.reasoning):
            raise Diverged
        return response

    def report(self, by: str) -> dict[str, object]:
        return {"after_chars": self.after_chars, "how": self.how, "by": by}
