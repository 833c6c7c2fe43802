"""The canonical transcript every layer speaks: its types, the stream deltas, the message helpers.

Messages stay in the OpenAI chat shape (plain dicts) because that is what clients send
and what the store keeps: no conversion on the way in, JSON-serialisable as is. Provider
artifacts ride on the same dicts under well-known keys, the conventions Google's
OpenAI-compatible endpoint and LiteLLM-style gateways already use:

* ``message["reasoning_content"]``: DeepSeek-style reasoning text (OpenAI-format upstreams).
* ``message["thinking_blocks"]``: Anthropic ``thinking`` / ``redacted_thinking`` blocks,
  verbatim with their signatures.
* ``tool_call["extra_content"]["google"]["thought_signature"]``: a Gemini thought signature
  bound to the call that carried it.
* ``message["reasoning_origin"]``: the provider whose answer carried the ``reasoning_content``
  (set by the loop; ``""`` when the server sent it as ``reasoning``, a field no server takes
  back), so ``reasoning_passback: auto`` returns reasoning only to where it came from.
* ``message["anthropic_content"]``: the message's content as Anthropic blocks, verbatim (from a
  ``/v1/messages`` caller or an Anthropic answer), so an Anthropic target gets them byte for byte
  (thinking signatures, ``cache_control``, citations: the prompt cache keeps hitting). It is valid
  exactly as long as the message is unchanged: whoever rewrites a message's content builds the new
  dict with ``rewritten`` (which drops it).
* ``message["openai_output"]``: an OpenAI Responses answer's ``output`` items, verbatim and in order
  (``{"provider": NAME, "items": [...]}``), kept when they hold what the other keys cannot say:
  reasoning items (their summary and ``encrypted_content``) and the calls of OpenAI's hosted tools.
  ``provider`` is the configured provider that issued them (set by the loop with ``mark_origin``, as
  ``reasoning_origin``): encrypted reasoning is bound to the account that produced it, so only that
  provider is sent the items back, and only while the message still says what they say (the same
  text, the same tool-call ids; ``providers/openai_responses_input.py``). Every other target drops them.
* ``message["openai_hosted"]``: the hosted tools' items a Responses caller sent back in this assistant turn
  (``web_search_call``, ``local_shell_call`` and its output, ...), verbatim and in order, and the ``note`` that
  opens the message's content (what those items did, as text: ``api/responses/hosted_items.py``):
  ``{"items": [...], "note": str}``. An OpenAI Responses target is sent the items (before the turn's message
  and calls) and the content without the note; every other target drops the items and reads the note.

A call of a caller's custom (freeform) tool is a function call with ``{"input": text}`` arguments and,
once the loop knows it is one, ``type: "custom"`` (``canonical/tools.py``).

Each key is produced by exactly one wire format, so its origin is implied by its name and
an adapter that does not own a key strips it before sending.

``reasoning_origin``, ``openai_output``, ``openai_hosted`` and ``anthropic_content`` are the gateway's to set: a
chat-completions caller's are dropped at the parse (``api/chat/request.py``), the other surfaces
build their messages from scratch. A stateless Responses caller carries a turn's artifacts sealed
(``api/responses/reasoning.py``) and gets them back on its turn only when they open for its tenant.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.canonical.tools import HostedToolCall, HostedTools

Message = dict[str, Any]
ToolCall = dict[str, Any]
ToolDef = dict[str, Any]

FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]

ARTIFACT_MESSAGE_KEYS = ("reasoning_content", "reasoning_origin", "thinking_blocks", "extra_content",
                         "anthropic_content", "openai_output", "openai_hosted")


# The largest token count believed from an upstream; anything else reported is treated as absent.
MAX_TOKEN_COUNT = 2**31


def token_count(value: Any) -> int:
    """A usage number as an upstream reported it, or 0 when it is not a plausible count.

    Usage is summed over a loop and reported to callers (and billing), so nonsense (negative,
    fractional, 1e300, a string, a bool) counts as "not reported" instead of propagating.
    """
    kind = type(value)
    if kind is int:
        return value if 0 <= value <= MAX_TOKEN_COUNT else 0
    if kind is float and value.is_integer() and 0 <= value <= MAX_TOKEN_COUNT:
        return int(value)
    return 0


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    #: prompt tokens written to the provider's cache (Anthropic reports them; in ``prompt_tokens`` too)
    cache_creation_tokens: int = 0

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cached_tokens += other.cached_tokens
        self.reasoning_tokens += other.reasoning_tokens
        self.cache_creation_tokens += other.cache_creation_tokens

    def to_openai(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
            "completion_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
        }


@dataclass(slots=True)
class NativeRequest:
    """The caller's request as its own wire format said it, for targets of that format.

    A ``/v1/messages`` caller speaks Anthropic's format: the canonical fields say what every
    target can be told (mapped where a counterpart exists), and this says it the caller's way, so
    an Anthropic target gets the request as written: ``fields`` (top-level body fields such as
    ``thinking``, ``output_config``, ``context_management``, ``metadata``, ``top_k``, beta fields)
    and ``tools`` (the caller's tool definitions, typed and unknown keys included) verbatim, and
    ``headers`` (``anthropic-beta``). Adapters of other formats read only what has a counterpart there
    the canonical params cannot carry (Gemini: ``top_k`` as ``topK``). Stored with a pause
    (``to_dict``), so a resumed loop keeps it.
    """

    wire_format: str
    fields: dict[str, Any] = field(default_factory=dict)
    tools: list[dict[str, Any]] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"wire_format": self.wire_format, "fields": self.fields, "tools": self.tools,
                "headers": self.headers}

    @classmethod
    def from_dict(cls, data: Any) -> NativeRequest | None:
        if not isinstance(data, dict) or not isinstance(data.get("wire_format"), str):
            return None
        return cls(data["wire_format"], dict(data.get("fields") or {}), list(data.get("tools") or ()),
                   dict(data.get("headers") or {}))


@dataclass(slots=True)
class ModelRequest:
    """One model call, independent of wire format.

    ``params`` holds every other OpenAI body field (temperature, max_tokens, stop, seed,
    response_format, parallel_tool_calls, user, and unknown fields an OpenAI-compatible
    upstream may understand); adapters translate what their format knows. ``native``: the
    caller's own request, for a target of its wire format (``NativeRequest``). ``hosted``: the
    hosted tools the caller asked for (``canonical.tools.HostedTools``), for a target that runs or
    maps them.
    """

    messages: list[Message]
    tools: list[ToolDef] = field(default_factory=list)
    tool_choice: Any = None
    params: dict[str, Any] = field(default_factory=dict)
    native: NativeRequest | None = None
    hosted: HostedTools | None = None


@dataclass(slots=True)
class ModelResponse:
    """A complete assistant turn from one upstream call, already in canonical form."""

    message: Message
    finish_reason: FinishReason
    usage: Usage
    model: str = ""
    id: str = ""
    #: the provider paused its own turn and asks to be called again with it as it stands (Anthropic's
    #: ``pause_turn``, a long server-side tool of its own): the loop calls again, within its cap
    unfinished: bool = False
    #: the caller's stop sequence the answer ended on, when the provider says which (Anthropic's
    #: ``stop_sequence``); None when it did not, or cannot say (OpenAI and Gemini only say "stop")
    stop_sequence: str | None = None
    #: hosted tools the target ran within this answer (a mapped web search), for renderers that show them
    hosted_calls: Sequence[HostedToolCall] = ()

    @property
    def tool_calls(self) -> list[ToolCall]:
        return self.message.get("tool_calls") or []


# --- stream deltas an adapter's stream parser emits ---------------------------------


@dataclass(slots=True)
class TextDelta:
    text: str


@dataclass(slots=True)
class ReasoningDelta:
    text: str


@dataclass(slots=True)
class ReasoningSignature:
    """The end of one reasoning block, with the signature its provider gave it (Anthropic's thinking).

    Text renderers ignore it; the Messages renderer closes the thinking block with it, so a
    caller can send the block back and the provider accepts it.
    """

    signature: str


@dataclass(slots=True)
class RedactedReasoning:
    """A whole reasoning block the provider sent encrypted (Anthropic's ``redacted_thinking``)."""

    data: str


@dataclass(slots=True)
class Answering:
    """Not text: the model producing the deltas that follow (a stream parser's first batch starts with it).

    It lets the renderer name the answering model on every chunk from the commit point on.
    """

    model: str


StreamDelta = TextDelta | ReasoningDelta | ReasoningSignature | RedactedReasoning | Answering | HostedToolCall


# --- helpers every adapter shares -----------------------------------------------------


def normalize_finish_reason(native: FinishReason | None, has_tool_calls: bool) -> FinishReason:
    """Derive the finish reason from what was produced, not from what the provider claims.

    Providers say ``stop`` with tool calls present (forced tool_choice, some streams); the
    calls are the truth. ``length`` survives so a client knows arguments may be truncated.
    """
    if has_tool_calls and native != "length":
        return "tool_calls"
    if native == "tool_calls" and not has_tool_calls:
        return "stop"
    return native or "stop"


# --- message helpers -----------------------------------------------------------------


def rewritten(message: Message, **changes: Any) -> Message:
    """A copy of ``message`` with ``changes``, without the verbatim ``anthropic_content`` it no longer matches."""
    copy = {k: v for k, v in message.items() if k != "anthropic_content"}
    copy.update(changes)
    return copy


def mark_origin(message: Message, provider: str) -> None:
    """Name ``provider`` (the configured provider that answered) as the origin of the turn's artifacts, in place.

    The adapters parse bytes without knowing which provider sent them; the loop knows, and says it
    here once per answer: ``reasoning_origin`` for ``reasoning_content`` (``reasoning_passback: auto``)
    and the ``provider`` of ``openai_output``. An origin already set (a parser's own marker) stays.
    """
    if "reasoning_content" in message:
        message.setdefault("reasoning_origin", provider)
    output = message.get("openai_output")
    if output.__class__ is dict:
        output.setdefault("provider", provider)


def strip_artifacts(message: Message) -> Message:
    """A copy of ``message`` without provider artifacts, for strict upstreams and clients."""
    # Plain membership tests, no generators: this runs for every message of every upstream request.
    if ("reasoning_content" not in message and "thinking_blocks" not in message and "extra_content" not in message
            and "reasoning_origin" not in message and "anthropic_content" not in message
            and "openai_output" not in message and "openai_hosted" not in message):
        calls = message.get("tool_calls")
        if not calls:
            return message
        for call in calls:
            if "extra_content" in call:
                break
        else:
            return message
    clean = {k: v for k, v in message.items() if k not in ARTIFACT_MESSAGE_KEYS}
    if "tool_calls" in clean:
        clean["tool_calls"] = [
            {k: v for k, v in call.items() if k != "extra_content"} for call in clean["tool_calls"]
        ]
    return clean


def reasoning_deltas(message: Message) -> list[StreamDelta]:
    """A whole turn's reasoning as the stream parsers say it: per thinking block its text and signature.

    The non-stream loop yields these so that every renderer sees the same events in both modes; the
    texts joined are ``reasoning_content`` (blocks with text joined by a blank line).
    """
    blocks = message.get("thinking_blocks")
    if not blocks:
        reasoning = message.get("reasoning_content")
        return [ReasoningDelta(reasoning)] if reasoning else []
    deltas: list[StreamDelta] = []
    said = False
    for block in blocks:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "redacted_thinking":
            deltas.append(RedactedReasoning(str(block.get("data") or "")))
            continue
        text = block.get("thinking")
        if isinstance(text, str) and text:
            deltas.append(ReasoningDelta("\n\n" + text if said else text))
            said = True
        deltas.append(ReasoningSignature(str(block.get("signature") or "")))
    return deltas


def text_of(content: Any) -> str:
    """Flatten OpenAI message content (string or parts) to text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if isinstance(part, dict) and part.get("type") in ("text", "input_text", "output_text"):
            parts.append(part.get("text") or "")
        elif isinstance(part, str):
            parts.append(part)
    return "".join(parts)
