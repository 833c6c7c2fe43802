"""OpenAI Responses, the stream: ``response.*`` server-sent events -> canonical deltas, then the whole turn.

Text (``response.output_text.delta``, ``response.refusal.delta``) and reasoning
(``response.reasoning_summary_text.delta``, ``response.reasoning_text.delta``) are handed on as they
arrive; function-call arguments are collected (``response.function_call_arguments.delta`` /
``.done``). Every ``response.output_item.done`` carries its item whole (a reasoning item's final
``encrypted_content`` only there) and replaces what was collected for it; an item whose ``done``
never came is rebuilt from its deltas. ``response.completed`` / ``response.incomplete`` end the
answer (status, usage, incomplete details), and the rebuilt response goes through ``response_from``
as a JSON answer does. ``response.failed`` and ``error`` raise the error they carry (failover
decides on its class); any other event type (hosted tool progress, ``content_part``, the ``*.done``
texts) adds nothing, and those whose SSE ``event:`` name says so (``_NOTHING_NEW``) are not even parsed.

Bounded: more than ``MAX_OUTPUT_ITEMS`` output items, or more than ``MAX_PARTS`` streamed parts, is an
invalid response; one event is bounded by the SSE decoder, the stream by ``max_response_bytes``.
"""

from __future__ import annotations

from typing import Any

from gateway.canonical import (
    Answering,
    ModelResponse,
    ReasoningDelta,
    StreamDelta,
    TextDelta,
    Usage,
    load_json,
)
from gateway.providers.base import (
    MALFORMED,
    ErrorClass,
    MalformedEvents,
    ProviderError,
    SSEEvent,
    reported_model,
)
from gateway.providers.hosted import web_search_of
from gateway.providers.openai_responses_output import (
    MAX_OUTPUT_ITEMS,
    answer_text,
    failure,
    parse_usage,
    reasoning_texts,
    response_from,
)

#: the most streamed parts (texts, refusals, summaries, arguments) one answer may have
MAX_PARTS = 4 * MAX_OUTPUT_ITEMS
# A streamed part: (output index, what it is, its content / summary index).
Key = tuple[int, str, int]
_TEXT_EVENTS = {"response.output_text.delta": "text", "response.refusal.delta": "refusal"}
_REASONING_EVENTS = {"response.reasoning_summary_text.delta": "summary",
                     "response.reasoning_text.delta": "reasoning"}
_ENDED = ("response.completed", "response.incomplete")
#: events that add nothing to what the parser collects, known by their SSE ``event:`` name alone: not even read
_NOTHING_NEW = frozenset({
    "response.in_progress", "response.queued", "response.content_part.added", "response.content_part.done",
    "response.output_text.done", "response.output_text.annotation.added", "response.refusal.done",
    "response.reasoning_summary_part.added", "response.reasoning_summary_part.done",
    "response.reasoning_summary_text.done", "response.reasoning_text.done",
})
_STARTED = ("response.created", "response.in_progress")


def _index(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise TypeError("output_index")
    return value


def _sub_index(data: dict[str, Any], name: str) -> int:
    value = data.get(name, 0)
    if type(value) is not int or value < 0:
        raise TypeError(name)
    return value


def _delta(data: dict[str, Any]) -> str:
    delta = data.get("delta")
    if not isinstance(delta, str):
        raise TypeError("delta")
    return delta


def _too_many(what: str, bound: int) -> ProviderError:
    return ProviderError(ErrorClass.INVALID_RESPONSE, f"upstream stream has more than {bound} {what}")


class OpenAIResponsesStreamParser:
    __slots__ = ("_announced", "_configured", "_done", "_finished", "_items", "_last_reasoning", "_malformed",
                 "_pieces", "_response", "_streamed")

    def __init__(self, target: str = "", model: str = "") -> None:
        self._items: dict[int, dict[str, Any]] = {}  # output index -> the item (as added, then as done)
        self._finished: set[int] = set()  # output indexes whose ``output_item.done`` came
        # Each streamed part's pieces, joined when read (adding each to a string would copy it all per delta).
        self._pieces: dict[Key, list[str]] = {}
        self._streamed: set[int] = set()  # output indexes that had a part streamed
        self._response: dict[str, Any] = {}  # the response object of the latest lifecycle event
        self._last_reasoning: Key | None = None
        self._done = False
        self._configured = model
        self._announced = False
        self._malformed = MalformedEvents(target)

    def feed(self, event: SSEEvent) -> list[StreamDelta]:
        try:
            deltas = self._event(event)
        except MALFORMED as exc:  # skipped, as lenient clients do; an in-band error is a ProviderError
            self._malformed.skip(event.data, exc)
            return []
        if deltas and not self._announced:
            self._announced = True
            deltas.insert(0, Answering(reported_model(self._response.get("model")) or self._configured))
        return deltas

    def _event(self, event: SSEEvent) -> list[StreamDelta]:
        # Each branch type-checks what it reads before it changes the answer being rebuilt.
        if event.event in _NOTHING_NEW:
            return []
        data = load_json(event.data)
        if not isinstance(data, dict):
            raise TypeError("event")
        kind = data.get("type") or event.event or ""
        if kind.__class__ is not str:
            raise TypeError("type")
        part = _TEXT_EVENTS.get(kind)
        if part is not None:  # the most frequent event: its checks and the common case inline
            text, index, sub = data.get("delta"), data.get("output_index"), data.get("content_index", 0)
            if (text.__class__ is not str or index.__class__ is not int or sub.__class__ is not int or index < 0
                    or sub < 0):
                raise TypeError("delta")
            pieces = self._pieces.get((index, part, sub))
            if pieces is None:
                self._add((index, part, sub), text, "message")
            else:
                pieces.append(text)
            return [TextDelta(text)] if text else []
        if kind == "response.function_call_arguments.delta":
            self._add((_index(data.get("output_index")), "arguments", 0), _delta(data), "function_call")
            return []
        part = _REASONING_EVENTS.get(kind)
        if part is not None:
            sub = "summary_index" if part == "summary" else "content_index"
            key = (_index(data.get("output_index")), part, _sub_index(data, sub))
            text = _delta(data)
            self._add(key, text, "reasoning")
            return [self._reasoning(key, text)] if text else []
        if kind == "response.output_item.added" or kind == "response.output_item.done":
            return self._item(_index(data.get("output_index")), data.get("item"), kind.endswith("done"))
        if kind == "response.function_call_arguments.done":
            arguments = data.get("arguments")
            if not isinstance(arguments, str):
                raise TypeError("arguments")
            self._add((_index(data.get("output_index")), "arguments", 0), arguments, "function_call", True)
        elif kind in _ENDED or kind in _STARTED:
            response = data.get("response")
            if not isinstance(response, dict):
                raise TypeError("response")
            self._response = response
            self._done = self._done or kind in _ENDED
        elif kind == "response.failed":
            response = data.get("response")
            raise failure(response.get("error") if isinstance(response, dict) else None)
        elif kind == "error":
            raise failure(data["error"] if isinstance(data.get("error"), dict) else data)
        return []

    def _add(self, key: Key, text: str, kind: str, whole: bool = False) -> None:
        """A part's piece (``whole``: its entire text, replacing the pieces); the item is opened if it was not."""
        index = key[0]
        if index not in self._items:
            self._open(index, {"type": kind})
        pieces = self._pieces.get(key)
        if pieces is None:
            if len(self._pieces) >= MAX_PARTS:
                raise _too_many("streamed parts", MAX_PARTS)
            pieces = self._pieces[key] = []
            self._streamed.add(index)
        if whole:
            pieces[:] = [text]
        else:
            pieces.append(text)

    def _open(self, index: int, item: dict[str, Any]) -> None:
        if index not in self._items and len(self._items) >= MAX_OUTPUT_ITEMS:
            raise _too_many("output items", MAX_OUTPUT_ITEMS)
        self._items[index] = item

    def _item(self, index: int, item: Any, done: bool) -> list[StreamDelta]:
        """``output_item.added`` / ``.done``: the item as it stands; a done item's text that never streamed is said."""
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            raise TypeError("item")
        if not done:
            if index not in self._finished:
                self._open(index, item)
            return []
        unsaid: list[StreamDelta] = []
        if item["type"] == "web_search_call" and index not in self._finished:  # a search the API ran: said once
            searched = web_search_of(item)
            unsaid = [searched] if searched is not None else []
        elif index not in self._streamed:  # a server that sent the item only whole
            if item["type"] == "message":
                text = answer_text([item])
                unsaid = [TextDelta(text)] if text else []
            elif item["type"] == "reasoning":
                unsaid = [self._reasoning((index, "summary", n), text) for n, text in enumerate(reasoning_texts(item))]
        self._open(index, item)
        self._finished.add(index)
        return unsaid

    def _reasoning(self, key: Key, text: str) -> ReasoningDelta:
        # Reasoning parts are joined with a blank line in the whole turn; the stream says the same.
        if self._last_reasoning is not None and self._last_reasoning != key:
            text = "\n\n" + text
        self._last_reasoning = key
        return ReasoningDelta(text)

    def _joined(self, key: Key) -> str:
        pieces = self._pieces[key]
        if len(pieces) > 1:
            pieces[:] = ["".join(pieces)]
        return pieces[0] if pieces else ""

    def _rebuilt(self, index: int, keys: list[Key]) -> dict[str, Any]:
        """An item whose ``done`` never came, from what was streamed for it (its parts' ``keys``)."""
        item = self._items[index]
        parts: dict[str, list[tuple[int, str]]] = {}
        for key in sorted(keys):
            parts.setdefault(key[1], []).append((key[2], self._joined(key)))
        kind = item.get("type")
        if kind == "message":
            content = [{"type": "output_text", "text": text, "annotations": []} for _, text in parts.get("text", ())]
            content += [{"type": "refusal", "refusal": text} for _, text in parts.get("refusal", ())]
            return {**item, "content": content}
        if kind == "function_call" and "arguments" in parts:
            return {**item, "arguments": parts["arguments"][0][1]}
        if kind == "reasoning":
            summary = [{"type": "summary_text", "text": text} for _, text in parts.get("summary", ())]
            rebuilt = {**item, "summary": summary or item.get("summary") or []}
            if "reasoning" in parts:
                rebuilt["content"] = [{"type": "reasoning_text", "text": text} for _, text in parts["reasoning"]]
            return rebuilt
        return item

    def usage_so_far(self) -> Usage:
        return parse_usage(self._response.get("usage"))

    def produced_so_far(self) -> str:
        return "".join(self._joined(key) for key in self._pieces)

    def finish(self) -> ModelResponse:
        if self._malformed.count and not self._items and not self._response:
            raise ProviderError(ErrorClass.INVALID_RESPONSE, "upstream stream had no readable event")
        if not self._done:
            raise ProviderError(ErrorClass.CONNECTION, "upstream stream ended before response.completed")
        keys: dict[int, list[Key]] = {}
        for key in self._pieces:
            keys.setdefault(key[0], []).append(key)
        items = [self._items[i] if i in self._finished else self._rebuilt(i, keys.get(i, []))
                 for i in sorted(self._items)]
        if not items and isinstance(self._response.get("output"), list):
            items = self._response["output"]  # a server that said the answer only in its last event
        return self._malformed.check(response_from({**self._response, "output": items}))
