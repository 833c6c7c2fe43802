"""One Response object and its stream events: numbered, and written as dicts, SSE or WebSocket frames, or not at all.

:class:`ResponseEvents` is what ``render.ResponseBuilder`` writes with: the Response object
(laid out once from a template), the events' sequence numbers, and how an event is written in
each of the four modes a response runs in:

* **dicts** (``emit``; a background run, whose consumers read the events);
* **SSE frames** (``frames``; a stream nobody reads but the client): every event is its frame
  (bytes). The frames every text answer has are the byte templates below, filled in without
  building the event's dict; ``tests/test_responses_render.py`` checks them byte for byte
  against the dict events encoded. A frame that would carry a large text is a generator of
  its slices (``responses/spliced.py``);
* **socket** (``socket``, set by ``to_socket``; a turn of the WebSocket mode whose connection is
  written to directly): every event is the WebSocket text frame holding its JSON, framed once here
  rather than written as SSE text and cut back into messages (http/websocket_frames.py: that cut
  and re-framing cost more than the frames themselves, bench/README.md). The frequent events are
  byte templates too (the ``_WS`` ones: the SSE templates' data), the others the events as dicts,
  encoded; the tests compare each message with the SSE event's data. A large text's events are
  written as fragmented messages, a slice per frame;
* **none** (a JSON answer): the same steps run and only the Response object is kept.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import orjson

from gateway.api.responses.echo import ECHO_DEFAULTS, ECHO_FIELDS, PLAIN_ECHOES
from gateway.api.responses.spliced import LARGE_CHARS, MARK, marked, spliced
from gateway.canonical import Usage
from gateway.http.sse_response import event_frame
from gateway.http.websocket_frames import fragments, text_frame
from gateway.random_ids import random_hex

SILENT: dict[str, Any] = {"type": "silent"}  # what ``_event`` returns when events are not kept
# A ``frames`` builder's terminal event before it is framed: the run frames it from the bytes the
# stored record was made of (``terminal_frame``), so the final Response is serialised once.
TERMINAL: dict[str, Any] = {"type": "terminal"}
# The events one step produces: dicts, or (a ``frames`` builder) their SSE frames, bytes (or, for a
# large text, a generator of their slices: responses/spliced.py).
Batch = list[Any]
Frame = bytes | Iterator[bytes]

# The data of the events every text answer has, as byte templates: each is the bytes ``orjson.dumps`` makes of
# the event dict (same keys, same order: unit tests compare them with the dict events encoded), without
# building that dict or calling ``_event``. ``socket`` mode frames each on its own (``text_frame``); ``frames``
# mode writes the SSE frames below, made of the same templates.
CREATED_WS = b'{"response":%b,"type":"response.created","sequence_number":%d}'
IN_PROGRESS_WS = b'{"response":%b,"type":"response.in_progress","sequence_number":%d}'
DELTA_HEAD_WS = b'{"item_id":%b,"output_index":%d,"content_index":0,"delta":'
DELTA_TAIL_WS = b',"logprobs":[],"type":"response.output_text.delta","sequence_number":%d}'
ADDED_WS = (b'{"output_index":%d,"item":{"id":%b,"type":"message","role":"assistant","status":"in_progress",'
            b'"content":[]},"type":"response.output_item.added","sequence_number":%d}')
PART_ADDED_WS = (b'{"item_id":%b,"output_index":%d,"content_index":0,"part":{"type":"output_text","text":"",'
                 b'"annotations":[],"logprobs":[]},"type":"response.content_part.added","sequence_number":%d}')
TEXT_DONE_WS = (b'{"item_id":%b,"output_index":%d,"content_index":0,"text":%b,"logprobs":[],'
                b'"type":"response.output_text.done","sequence_number":%d}')
PART_DONE_WS = (b'{"item_id":%b,"output_index":%d,"content_index":0,"part":{"type":"output_text","text":%b,'
                b'"annotations":[],"logprobs":[]},"type":"response.content_part.done","sequence_number":%d}')
ITEM_DONE_WS = (b'{"output_index":%d,"item":{"id":%b,"type":"message","role":"assistant","status":%b,'
                b'"content":[{"type":"output_text","text":%b,"annotations":[],"logprobs":[]}]},'
                b'"type":"response.output_item.done","sequence_number":%d}')
_TERMINAL_WS = b'{"response":%b,"type":"response.%b","sequence_number":%d}'


def _sse(kind: bytes, data: bytes) -> bytes:
    """The SSE frame of a data template (``http/sse_response.event_frame``'s layout)."""
    return b"event: " + kind + b"\ndata: " + data + b"\n\n"


DELTA_HEAD = b"event: response.output_text.delta\ndata: " + DELTA_HEAD_WS
DELTA_TAIL = DELTA_TAIL_WS + b"\n\n"
STARTED = _sse(b"response.created", CREATED_WS) + _sse(b"response.in_progress", IN_PROGRESS_WS)
MESSAGE_OPENED = _sse(b"response.output_item.added", ADDED_WS) + _sse(b"response.content_part.added", PART_ADDED_WS)
MESSAGE_CLOSED = (_sse(b"response.output_text.done", TEXT_DONE_WS) + _sse(b"response.content_part.done", PART_DONE_WS)
                  + _sse(b"response.output_item.done", ITEM_DONE_WS))
_TERMINAL_FRAME = _sse(b"response.%b", _TERMINAL_WS)
#: an item status as JSON (the frequent ones made once)
STATUS = {"completed": b'"completed"', "incomplete": b'"incomplete"'}

# A new Response object's keys in order, the request's echo fields in the middle: copying a dict
# with the final key layout and overwriting its values costs half of building it key by key.
# ``completed_at`` is set when the response completes (``render.py``); an echo that lacks fields (a record stored by
# an earlier version) shows the defaults of those it lacks.
_TEMPLATE: dict[str, Any] = {"id": "", "object": "response", "created_at": 0, "status": "in_progress",
                             "completed_at": None, "error": None, "incomplete_details": None, "model": "",
                             "output": None, **dict.fromkeys(ECHO_FIELDS), **ECHO_DEFAULTS, "usage": None}
# The template with each shared echo (``echo.PLAIN_ECHOES``) already in it, by the echo's identity (they live as long
# as the process): a plain request's Response object is one copy, with no echo to write over it.
_WITH_ECHO: dict[int, dict[str, Any]] = {id(echo): {**_TEMPLATE, **echo} for echo in PLAIN_ECHOES.values()}


def response_ids() -> tuple[str, str]:
    """A new response's id (``render.response_id``: 192 random bits) and its items' random base (``render.item_ids``:
    80), from one draw: what two draws would give (the batch hands out consecutive digits either way), for one call
    to the CSPRNG batch instead of two."""
    digits = random_hex(34)
    return "resp_" + digits[:48], "_" + digits[48:]


class ResponseEvents:
    """The Response object and the writing of its events; see the module docstring."""

    __slots__ = ("_seq", "emit", "frames", "large", "response", "socket")

    def __init__(self, rid: str, route: str, echo: dict[str, Any], created_at: int | None, emit: bool,
                 frames: bool) -> None:
        # Without ``emit`` (a non-stream response) every step runs the same, only the events are
        # not built: the returned lists hold only the marker of the terminal event (how the run sees the end).
        self.emit = emit or frames
        # With ``frames`` (an SSE body, nobody reads the events) every event is its SSE frame
        # (bytes), the frequent ones filled into byte templates; the terminal one is ``TERMINAL``
        # until the run frames it with ``terminal_frame`` (from the stored record's bytes).
        self.frames = frames
        # A ``frames`` (or ``socket``) builder that closed a large text: its frames that carry the text are spliced.
        self.large = False
        self.socket = False  # ``to_socket``
        self._seq = 0
        template = _WITH_ECHO.get(id(echo))
        response = _TEMPLATE.copy() if template is None else template.copy()  # the key layout, then the values
        response["id"] = rid
        response["created_at"] = created_at or int(time.time())
        response["model"] = route
        response["output"] = []
        if template is None:
            response.update(echo)
        self.response: dict[str, Any] = response

    def to_socket(self) -> None:
        """Write every event as its WebSocket text frame (``socket`` mode; see the module docstring), from the start."""
        self.frames = False
        self.emit = self.socket = True

    def _event(self, kind: str, fields: dict[str, Any]) -> Any:
        """The event dict, or (``frames``) its SSE frame, or (``socket``) its WebSocket frame; numbered either way."""
        number = self._seq
        self._seq += 1
        if not self.emit:
            return SILENT
        fields["type"] = kind
        fields["sequence_number"] = number
        if self.frames:
            return event_frame(kind, orjson.dumps(fields))
        if self.socket:
            return text_frame(orjson.dumps(fields))
        return fields

    def _large_frames(self, events: list[tuple[str, dict[str, Any]]], text: str) -> list[Frame]:
        """Events each carrying the large ``text`` where ``MARK`` stands, numbered: one spliced frame of them all
        (``frames``), or a fragmented message each (``socket``)."""
        encoded = []
        for kind, fields in events:
            fields["type"] = kind
            fields["sequence_number"] = self._seq
            self._seq += 1
            encoded.append(orjson.dumps(fields))
        if self.socket:
            return [fragments(spliced(data, [text])) for data in encoded]
        return [spliced(b"".join(event_frame(kind, data) for (kind, _), data in zip(events, encoded, strict=True)),
                        [text] * len(events))]

    def _snapshot(self) -> dict[str, Any]:
        return {**self.response, "output": list(self.response["output"])}

    def start(self) -> Batch:
        """``response.created`` and ``response.in_progress``."""
        if not self.emit:
            self._seq += 2
            return []
        if self.frames:  # the same object twice: serialised once
            snapshot = orjson.dumps(self.response)
            seq = self._seq
            self._seq += 2
            return [STARTED % (snapshot, seq, snapshot, seq + 1)]
        if self.socket:
            snapshot = orjson.dumps(self.response)
            seq = self._seq
            self._seq += 2
            return [text_frame(CREATED_WS % (snapshot, seq)), text_frame(IN_PROGRESS_WS % (snapshot, seq + 1))]
        return [self._event("response.created", {"response": self._snapshot()}),
                self._event("response.in_progress", {"response": self._snapshot()})]

    def _add(self, item: dict[str, Any], out: Batch) -> int:
        """Append ``item`` to the output (``response.output_item.added``); its output index."""
        index = len(self.response["output"])
        self.response["output"].append(item)
        if self.emit:  # a copy: the item changes before the event is encoded (not so for frames)
            out.append(self._event("response.output_item.added",
                                   {"output_index": index, "item": item if self.frames else dict(item)}))
        return index

    def _done(self, index: int, out: Batch) -> None:
        if self.emit:
            out.append(self._event("response.output_item.done", {"output_index": index,
                                                                 "item": self.response["output"][index]}))

    def _close_large_reasoning(self, item: dict[str, Any], index: int, text: str, status: str, out: Batch) -> None:
        """Close a ``frames`` builder's reasoning item whose summary is large: its three frames, spliced."""
        self.large = True
        mark = {"type": "summary_text", "text": MARK}
        done = {**item, "summary": [mark], "status": status}
        out.extend(self._large_frames([
            ("response.reasoning_summary_text.done", {"item_id": item["id"], "output_index": index, "summary_index": 0,
                                                      "text": MARK}),
            ("response.reasoning_summary_part.done", {"item_id": item["id"], "output_index": index, "summary_index": 0,
                                                      "part": mark}),
            ("response.output_item.done", {"output_index": index, "item": done})], text))
        item["summary"] = [{"type": "summary_text", "text": text}]
        item["status"] = status

    def _socket_closed(self, item: dict[str, Any], index: int, item_id: bytes, text: str, status: str) -> list[Frame]:
        """A ``socket`` builder's three closing events of a message (``item``, its content and status set; ``item_id``
        as JSON); a large text's as fragmented messages."""
        if len(text) > LARGE_CHARS:
            self.large = True
            mark = {"type": "output_text", "text": MARK, "annotations": [], "logprobs": []}
            return self._large_frames([
                ("response.output_text.done", {"item_id": item["id"], "output_index": index, "content_index": 0,
                                               "text": MARK, "logprobs": []}),
                ("response.content_part.done", {"item_id": item["id"], "output_index": index, "content_index": 0,
                                                "part": mark}),
                ("response.output_item.done", {"output_index": index, "item": {**item, "content": [mark]}})], text)
        encoded = orjson.dumps(text)
        seq = self._seq
        self._seq += 3
        return [text_frame(TEXT_DONE_WS % (item_id, index, encoded, seq)),
                text_frame(PART_DONE_WS % (item_id, index, encoded, seq + 1)),
                text_frame(ITEM_DONE_WS % (index, item_id, STATUS.get(status) or orjson.dumps(status), encoded,
                                           seq + 2))]

    def terminal_frame(self, final: bytes | None) -> Frame:
        """A ``frames`` builder's terminal event (``TERMINAL`` in its batch); ``final``: the Response's JSON.

        With a large text in the output (``large``) the frame is spliced and ``final`` is not used.
        """
        status = self.response["status"].encode()
        if not self.large:
            if self.socket:
                return text_frame(_TERMINAL_WS % (final or orjson.dumps(self.response), status, self._seq - 1))
            return _TERMINAL_FRAME % (status, final or orjson.dumps(self.response), status, self._seq - 1)
        texts: list[str] = []
        response = {**self.response, "output": [marked(item, texts) for item in self.response["output"]]}
        if self.socket:
            return fragments(spliced(_TERMINAL_WS % (orjson.dumps(response), status, self._seq - 1), texts))
        return spliced(_TERMINAL_FRAME % (status, orjson.dumps(response), status, self._seq - 1), texts)


def usage_object(usage: Usage) -> dict[str, Any]:
    """OpenAI's ``ResponseUsage``; ``cache_write_tokens`` is required by its current schema (SDKs validating
    events refuse a usage without it): the prompt tokens written to the provider's cache (Anthropic's)."""
    return {"input_tokens": usage.prompt_tokens, "input_tokens_details": {
                "cache_write_tokens": usage.cache_creation_tokens, "cached_tokens": usage.cached_tokens},
            "output_tokens": usage.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
            "total_tokens": usage.prompt_tokens + usage.completion_tokens}


def usage_of(response: dict[str, Any]) -> Usage | None:
    """The usage a Responses object reports, for settling the rate limits' token estimate."""
    usage = response.get("usage")
    if not isinstance(usage, dict):
        return None
    return Usage(prompt_tokens=int(usage.get("input_tokens") or 0),
                 completion_tokens=int(usage.get("output_tokens") or 0))
