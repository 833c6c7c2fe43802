"""The third renderer: loop events -> a Responses stream and the Response object it describes.

One class, :class:`ResponseBuilder`, consumes the engine's ``LoopEvent`` s and produces both the
stream events (dicts with ``type`` and ``sequence_number``) and the final Response object, so
a streamed and a non-streamed response can never disagree: the non-stream path runs the very
same builder and throws the events away.

Mapping: text -> ``message`` items with one ``output_text`` part (a new item after each tool
round); reasoning text -> ``reasoning`` items with a ``summary_text`` part; each server tool
execution -> an ``mcp_call`` item (``server_label`` = its MCP server's name or ``loopgate``);
a paused turn's client calls -> ``function_call`` items, its approval-required calls ->
``mcp_approval_request`` items (the response is ``completed`` there, as OpenAI's are). A
``max_output_tokens`` cut-off is ``incomplete``; a failure after the start is ``failed``
(the router's commit point guarantees nothing already sent is repeated).

Item ids carry the tool call id (``mcp_<call>``, ``mcpr_<call>``, ``fc_<call>``) so items coming
back as input map onto the transcript without any lookup (see ``responses_items``).
"""

# Long by design: the Responses API's stream events are rendered here, each pre-encoded hot-path
# template beside the general encoder it must match, so the two are read and changed together.

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from gateway.api.responses.request import ECHO_FIELDS
from gateway.api.responses.spliced import LARGE_CHARS, MARK, NUL, marked, spliced
from gateway.canonical import Answering, ReasoningDelta, TextDelta, Usage
from gateway.errors import GatewayError
from gateway.http.sse_response import event_frame
from gateway.loop.engine import ITERATION_SEPARATOR
from gateway.loop.events import Finished, LoopEvent, LoopResult, ToolFinished, ToolProgress, ToolStarted
from gateway.random_ids import random_hex

_SILENT: dict[str, Any] = {"type": "silent"}  # what ``_event`` returns when events are not kept
# A ``frames`` builder's terminal event before it is framed: the run frames it from the bytes the
# stored record was made of (``terminal_frame``), so the final Response is serialised once.
TERMINAL: dict[str, Any] = {"type": "terminal"}
# The events one step produces: dicts, or (a ``frames`` builder) their SSE frames, bytes (or, for a
# large text, a generator of their slices: responses/spliced.py).
Batch = list[Any]
Frame = bytes | Iterator[bytes]

# ``frames`` mode: the SSE frames of the events every text answer has, as byte templates. Each is
# the bytes ``orjson.dumps`` makes of the event dict (same keys, same order: a unit test compares
# them with the dict events encoded), without building that dict or calling ``_event``.
_DELTA_HEAD = b'event: response.output_text.delta\ndata: {"item_id":%b,"output_index":%d,"content_index":0,"delta":'
_DELTA_TAIL = b',"logprobs":[],"type":"response.output_text.delta","sequence_number":%d}\n\n'
_STARTED = (b'event: response.created\ndata: {"response":%b,"type":"response.created","sequence_number":%d}\n\n'
            b'event: response.in_progress\ndata: {"response":%b,"type":"response.in_progress","sequence_number":%d}'
            b'\n\n')
_MESSAGE_OPENED = (
    b'event: response.output_item.added\ndata: {"output_index":%d,"item":{"id":%b,"type":"message",'
    b'"role":"assistant","status":"in_progress","content":[]},"type":"response.output_item.added",'
    b'"sequence_number":%d}\n\n'
    b'event: response.content_part.added\ndata: {"item_id":%b,"output_index":%d,"content_index":0,'
    b'"part":{"type":"output_text","text":"","annotations":[],"logprobs":[]},"type":"response.content_part.added",'
    b'"sequence_number":%d}\n\n')
_MESSAGE_CLOSED = (
    b'event: response.output_text.done\ndata: {"item_id":%b,"output_index":%d,"content_index":0,"text":%b,'
    b'"logprobs":[],"type":"response.output_text.done","sequence_number":%d}\n\n'
    b'event: response.content_part.done\ndata: {"item_id":%b,"output_index":%d,"content_index":0,'
    b'"part":{"type":"output_text","text":%b,"annotations":[],"logprobs":[]},"type":"response.content_part.done",'
    b'"sequence_number":%d}\n\n'
    b'event: response.output_item.done\ndata: {"output_index":%d,"item":{"id":%b,"type":"message",'
    b'"role":"assistant","status":%b,"content":[{"type":"output_text","text":%b,"annotations":[],"logprobs":[]}]},'
    b'"type":"response.output_item.done","sequence_number":%d}\n\n')
_THRICE = (NUL, NUL, NUL)  # a large text's three places in ``_MESSAGE_CLOSED``, spliced (responses/spliced.py)
_TERMINAL = b'event: response.%b\ndata: {"response":%b,"type":"response.%b","sequence_number":%d}\n\n'
_STATUS = {"completed": b'"completed"', "incomplete": b'"incomplete"'}


def new_id(kind: str) -> str:
    """An item id: 96 random bits (batched CSPRNG, no system call per item)."""
    return kind + "_" + random_hex(12)


def item_ids() -> tuple[str, itertools.count[int]]:
    """One response's item ids: a random base (80 bits) and a counter, so a second builder fed the same
    events (a resume's stored result, ``ResponseRecorder``) names the items exactly as the first did."""
    return "_" + random_hex(10), itertools.count()


def response_id() -> str:
    """192 random bits: ids cannot be enumerated from one seen (a stored response is also bound to its tenant)."""
    return "resp_" + random_hex(24)


def usage_object(usage: Usage) -> dict[str, Any]:
    """OpenAI's ``ResponseUsage``; ``cache_write_tokens`` is required by its current schema (SDKs validating
    events refuse a usage without it): the prompt tokens written to the provider's cache (Anthropic's)."""
    return {"input_tokens": usage.prompt_tokens, "input_tokens_details": {
                "cache_write_tokens": usage.cache_creation_tokens, "cached_tokens": usage.cached_tokens},
            "output_tokens": usage.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
            "total_tokens": usage.prompt_tokens + usage.completion_tokens}


def server_label(source: str) -> str:
    """The ``server_label`` of a tool from its source name: the MCP server's name, or ``loopgate``."""
    return source[4:] if source.startswith("mcp:") else "loopgate"


# A new Response object's keys in order, the request's echo fields in the middle: copying a dict
# with the final key layout and overwriting its values costs half of building it key by key.
_TEMPLATE: dict[str, Any] = {"id": "", "object": "response", "created_at": 0, "status": "in_progress", "error": None,
                             "incomplete_details": None, "model": "", "output": None,
                             **dict.fromkeys(ECHO_FIELDS), "usage": None}


class ResponseBuilder:
    """Builds one Response from loop events; see the module docstring.

    ``start()`` gives ``response.created`` / ``response.in_progress``; ``feed(event)`` the events
    one loop event produces (the terminal one included, for ``Finished``); ``fail(error)`` closes
    open items and gives ``response.failed``. ``response`` is the Response object at any time
    (final once ``done``). ``label_of(name)`` is the server label of a server tool;
    ``approved`` the call ids a human approved (their ``mcp_call`` items name the request).
    """

    __slots__ = ("_delta_head", "_items", "_open", "_open_id", "_open_json", "_open_type", "_parts", "_seq",
                 "_texted", "_tools", "approved", "done", "emit", "final_text", "frames", "label_of", "large",
                 "response", "result", "route")

    def __init__(self, rid: str, route: str, echo: dict[str, Any], label_of: Callable[[str], str],
                 approved: frozenset[str] = frozenset(), created_at: int | None = None, emit: bool = True,
                 frames: bool = False) -> None:
        self.route = route
        # Without ``emit`` (a non-stream response) every step runs the same, only the events are
        # not built: the returned lists hold only the marker of the terminal event (how the run sees the end).
        self.emit = emit or frames
        # With ``frames`` (an SSE body, nobody reads the events) every event is its SSE frame
        # (bytes), the frequent ones filled into byte templates; the terminal one is ``TERMINAL``
        # until the run frames it with ``terminal_frame`` (from the stored record's bytes).
        self.frames = frames
        # A ``frames`` builder that closed a large text: its frames that carry the text are spliced.
        self.large = False
        self._delta_head = b""
        self.label_of = label_of
        self.approved = approved
        if len(echo) == len(ECHO_FIELDS):  # a parsed request's echo (all of them): copy the key layout, then fill
            response = _TEMPLATE.copy()
            response["id"] = rid
            response["created_at"] = created_at or int(time.time())
            response["model"] = route
            response["output"] = []
            response.update(echo)
        else:
            response = {"id": rid, "object": "response", "created_at": created_at or int(time.time()),
                        "status": "in_progress", "error": None, "incomplete_details": None, "model": route,
                        "output": [], **echo, "usage": None}
        self.response: dict[str, Any] = response
        self.done = False
        self.result: LoopResult | None = None
        # The closed messages' text since the last tool started: the transcript's final assistant message.
        self.final_text: list[str] = []
        self._seq = 0
        self._open: int | None = None  # output index of the open message or reasoning item
        self._open_type: str | None = None  # its type and id (read on every delta)
        self._open_id = ""
        self._open_json = b""  # ``frames``: the open item's id as JSON
        self._parts: list[str] = []
        self._tools: dict[str, int] = {}  # running mcp_call items by tool call id
        self._texted = False
        self._items = item_ids()

    @property
    def id(self) -> str:
        return str(self.response["id"])

    def _item_id(self, kind: str) -> str:
        base, counter = self._items
        return kind + base + format(next(counter), "04x")

    def _event(self, kind: str, fields: dict[str, Any]) -> Any:
        """The event dict, or (``frames``) its SSE frame; numbered either way."""
        number = self._seq
        self._seq += 1
        if not self.emit:
            return _SILENT
        fields["type"] = kind
        fields["sequence_number"] = number
        if self.frames:
            return event_frame(kind, orjson.dumps(fields))
        return fields

    def _snapshot(self) -> dict[str, Any]:
        return {**self.response, "output": list(self.response["output"])}

    def start(self) -> Batch:
        if not self.emit:
            self._seq += 2
            return []
        if self.frames:  # the same object twice: serialised once
            snapshot = orjson.dumps(self.response)
            seq = self._seq
            self._seq += 2
            return [_STARTED % (snapshot, seq, snapshot, seq + 1)]
        return [self._event("response.created", {"response": self._snapshot()}),
                self._event("response.in_progress", {"response": self._snapshot()})]

    # -- items -----------------------------------------------------------------------------
    def _add(self, item: dict[str, Any], out: Batch) -> int:
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

    def _close(self, out: Batch, status: str = "completed") -> None:
        if self._open is None:
            return
        index, self._open, self._open_type = self._open, None, None
        item = self.response["output"][index]
        text = "".join(self._parts)
        self._parts = []
        emit = self.emit
        if item["type"] == "message":
            self.final_text.append(text)  # a message's text is the last model call's (until a tool starts)
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            if self.frames:
                item["content"] = [part]
                item["status"] = status
                item_id = self._open_json
                large = len(text) > LARGE_CHARS
                self.large = self.large or large
                encoded = NUL if large else orjson.dumps(text)
                seq = self._seq
                self._seq += 3
                frame = _MESSAGE_CLOSED % (item_id, index, encoded, seq, item_id, index, encoded, seq + 1, index,
                                           item_id, _STATUS.get(status) or orjson.dumps(status), encoded, seq + 2)
                out.append(spliced(frame, [text] * 3) if large else frame)
                return
            if emit:
                out.append(self._event("response.output_text.done", {"item_id": item["id"], "output_index": index,
                                                                     "content_index": 0, "text": text, "logprobs": []}))
                out.append(self._event("response.content_part.done", {"item_id": item["id"], "output_index": index,
                                                                      "content_index": 0, "part": part}))
            item["content"] = [part]
            item["status"] = status
        elif self.frames and len(text) > LARGE_CHARS:
            self._close_large_reasoning(item, index, text, status, out)
            return
        else:
            summary = {"type": "summary_text", "text": text}
            if emit:
                out.append(self._event("response.reasoning_summary_text.done", {"item_id": item["id"],
                                                                                "output_index": index,
                                                                                "summary_index": 0, "text": text}))
                out.append(self._event("response.reasoning_summary_part.done", {"item_id": item["id"],
                                                                                "output_index": index,
                                                                                "summary_index": 0, "part": summary}))
            item["summary"] = [summary]
            item["status"] = status
        if emit:
            self._done(index, out)

    def _close_large_reasoning(self, item: dict[str, Any], index: int, text: str, status: str, out: Batch) -> None:
        """``_close`` of a ``frames`` builder's reasoning item whose summary is large: its three frames, spliced."""
        self.large = True
        mark = {"type": "summary_text", "text": MARK}
        done = {**item, "summary": [mark], "status": status}
        frames = [self._event("response.reasoning_summary_text.done", {"item_id": item["id"], "output_index": index,
                                                                        "summary_index": 0, "text": MARK}),
                  self._event("response.reasoning_summary_part.done", {"item_id": item["id"], "output_index": index,
                                                                        "summary_index": 0, "part": mark}),
                  self._event("response.output_item.done", {"output_index": index, "item": done})]
        out.append(spliced(b"".join(frames), [text] * 3))
        item["summary"] = [{"type": "summary_text", "text": text}]
        item["status"] = status

    def _text(self, text: str, out: Batch) -> None:
        if self._open_type != "message":
            if text == ITERATION_SEPARATOR and self._texted:
                return  # the engine's separator between iterations: here each iteration is its own item
            if self._open is not None:
                self._close(out)
            item_id = self._open_id = self._item_id("msg")
            self._open_type = "message"
            self._texted = True
            item = {"id": item_id, "type": "message", "role": "assistant", "status": "in_progress", "content": []}
            if self.frames:
                output = self.response["output"]
                index = self._open = len(output)
                output.append(item)
                encoded = self._open_json = orjson.dumps(item_id)
                self._delta_head = _DELTA_HEAD % (encoded, index)
                seq = self._seq
                self._seq += 2
                out.append(_MESSAGE_OPENED % (index, encoded, seq, encoded, index, seq + 1))
            else:
                self._open = self._add(item, out)
                if self.emit:
                    out.append(self._event("response.content_part.added", {
                        "item_id": item_id, "output_index": self._open, "content_index": 0,
                        "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}))
        self._parts.append(text)
        if self.frames:
            out.append(self._delta_head + orjson.dumps(text) + _DELTA_TAIL % self._seq)
        elif self.emit:  # the one event per upstream chunk: built directly (same keys, same order as ``_event``)
            out.append({"item_id": self._open_id, "output_index": self._open, "content_index": 0, "delta": text,
                        "logprobs": [], "type": "response.output_text.delta", "sequence_number": self._seq})
        self._seq += 1

    def _reasoning(self, text: str, out: Batch) -> None:
        if self._open_type != "reasoning":
            self._close(out)
            item_id = self._open_id = self._item_id("rs")
            self._open = self._add({"id": item_id, "type": "reasoning", "summary": [], "status": "in_progress"}, out)
            self._open_type = "reasoning"
            out.append(self._event("response.reasoning_summary_part.added", {
                "item_id": item_id, "output_index": self._open, "summary_index": 0,
                "part": {"type": "summary_text", "text": ""}}))
        self._parts.append(text)
        out.append(self._event("response.reasoning_summary_text.delta", {
            "item_id": self.response["output"][self._open]["id"], "output_index": self._open, "summary_index": 0,
            "delta": text}))

    # -- events ----------------------------------------------------------------------------
    def feed(self, event: LoopEvent) -> Batch:
        out: Batch = []
        # Exact classes (none of them is subclassed): ``is`` costs less than an ``isinstance`` call.
        items: Any = event if event.__class__ is list else (event,)
        for item in items:
            cls = item.__class__
            if cls is TextDelta:
                self._text(item.text, out)
            elif cls is Finished:
                self._finish(item.result, out)
            elif cls is Answering:
                self.response["model"] = item.model
            elif cls is ReasoningDelta:
                self._reasoning(item.text, out)
            elif cls is ToolStarted:
                self._close(out)
                self.final_text = []
                call = {"id": f"mcp_{item.tool_call_id}", "type": "mcp_call", "server_label": self.label_of(item.name),
                        "name": item.name, "arguments": item.arguments, "status": "in_progress"}
                if item.tool_call_id in self.approved:
                    call["approval_request_id"] = f"mcpr_{item.tool_call_id}"
                index = self._add(call, out)
                self._tools[item.tool_call_id] = index
                if self.emit:
                    out.append(self._event("response.mcp_call_arguments.done", {"item_id": call["id"],
                                                                                "output_index": index,
                                                                                "arguments": item.arguments}))
                    out.append(self._event("response.mcp_call.in_progress", {"item_id": call["id"],
                                                                             "output_index": index}))
            elif cls is ToolProgress:
                index = self._tools.get(item.tool_call_id, -1)
                if self.emit and index >= 0:  # the call's item again in progress, with what the server said
                    out.append(self._event("response.mcp_call.in_progress", {
                        "item_id": self.response["output"][index]["id"], "output_index": index,
                        "progress": item.detail()}))
            elif cls is ToolFinished:
                index = self._tools.pop(item.tool_call_id)
                call = self.response["output"][index]
                if item.status == "ok":
                    call.update(output=item.content, status="completed")
                    if self.emit:
                        out.append(self._event("response.mcp_call.completed", {"item_id": call["id"],
                                                                               "output_index": index}))
                else:
                    call.update(error={"type": "mcp_tool_execution_error", "content": item.content}, status="failed")
                    if self.emit:
                        out.append(self._event("response.mcp_call.failed", {"item_id": call["id"],
                                                                            "output_index": index}))
                self._done(index, out)
        return out

    def _finish(self, result: LoopResult, out: Batch) -> None:
        self._close(out)
        self.result = result
        response = self.response
        if result.status == "paused":
            reasons = {p["tool_call_id"]: p["reason"] for p in result.gateway.get("pending", ())}
            for call in result.tool_calls:
                function = call["function"]
                if reasons.get(call["id"]) == "elicitation":
                    continue  # a server call asking the user: answered in the inbox or by a decision, not an item
                if reasons.get(call["id"]) == "approval":
                    index = self._add({"id": f"mcpr_{call['id']}", "type": "mcp_approval_request",
                                       "server_label": self.label_of(function["name"]), "name": function["name"],
                                       "arguments": function["arguments"]}, out)
                else:
                    item = {"id": f"fc_{call['id']}", "type": "function_call", "call_id": call["id"],
                            "name": function["name"], "arguments": "", "status": "in_progress"}
                    index = self._add(item, out)
                    if self.emit:
                        out.append(self._event("response.function_call_arguments.delta", {
                            "item_id": item["id"], "output_index": index, "delta": function["arguments"]}))
                        out.append(self._event("response.function_call_arguments.done", {
                            "item_id": item["id"], "output_index": index, "name": function["name"],
                            "arguments": function["arguments"]}))
                    item.update(arguments=function["arguments"], status="completed")
                self._done(index, out)
        if result.model:
            response["model"] = result.model
        if result.finish_reason == "length" and result.status == "completed":
            response["status"] = "incomplete"
            response["incomplete_details"] = {"reason": "max_output_tokens"}
        else:
            response["status"] = "completed"
        response["usage"] = usage_object(result.usage)
        response["gateway"] = {"route": self.route, **result.gateway}
        self.done = True
        if self.frames:  # framed by the run once the record is written (``terminal_frame``)
            self._seq += 1
            out.append(TERMINAL)
        elif self.emit:
            out.append(self._event(f"response.{response['status']}", {"response": response}))
        else:
            self._seq += 1
            out.append(_SILENT)  # what ``retract_terminal`` takes back

    def terminal_frame(self, final: bytes | None) -> Frame:
        """A ``frames`` builder's terminal event (``TERMINAL`` in its batch); ``final``: the Response's JSON.

        With a large text in the output (``large``) the frame is spliced and ``final`` is not used.
        """
        status = self.response["status"].encode()
        if not self.large:
            return _TERMINAL % (status, final or orjson.dumps(self.response), status, self._seq - 1)
        texts: list[str] = []
        response = {**self.response, "output": [marked(item, texts) for item in self.response["output"]]}
        return spliced(_TERMINAL % (status, orjson.dumps(response), status, self._seq - 1), texts)

    def retract_terminal(self, events: Batch) -> None:
        """Take back the terminal event just built (not sent): recording the response failed, ``fail`` follows."""
        if self.done and events and self.response["status"] in ("completed", "incomplete"):
            events.pop()
            self._seq -= 1
            self.done = False
            self.response["incomplete_details"] = None

    def fail(self, error: GatewayError) -> Batch:
        """After a failure once the response started: close what is open, end with ``response.failed``."""
        out: Batch = []
        self._close(out, "incomplete")
        for index in self._tools.values():
            self.response["output"][index]["status"] = "incomplete"
            self._done(index, out)
        self._tools = {}
        response = self.response
        response["status"] = "failed"
        response["error"] = {"code": "server_error", "message": error.message}
        response["gateway"] = {"route": self.route, "status": "failed", "error": error.payload()["error"]}
        self.done = True
        if self.frames:
            self._seq += 1
            out.append(self.terminal_frame(None))
        else:
            out.append(self._event("response.failed", {"response": response}))
        return out


def usage_of(response: dict[str, Any]) -> Usage | None:
    """The usage a Responses object reports, for settling the rate limits' token estimate."""
    usage = response.get("usage")
    if not isinstance(usage, dict):
        return None
    return Usage(prompt_tokens=int(usage.get("input_tokens") or 0),
                 completion_tokens=int(usage.get("output_tokens") or 0))


class ResponseRecorder:
    """A resume's stored result on the Responses surface: the final Response object of the same events.

    A builder of its own (no events built), with the answering builder's id and ``created_at``, so
    the stored body is the Response the decider received (``GET /v1/responses/{id}`` returns it too).
    """

    __slots__ = ("builder",)

    def __init__(self, answering: ResponseBuilder, echo: dict[str, Any]) -> None:
        response = answering.response
        self.builder = ResponseBuilder(answering.id, answering.route, echo, answering.label_of, answering.approved,
                                       created_at=response["created_at"], emit=False)
        # The answering builder's item-id base, counted from 0 again: the same events name the same items.
        self.builder._items = (answering._items[0], itertools.count())
        self.builder.start()

    def feed(self, event: LoopEvent) -> None:
        self.builder.feed(event)

    def result(self) -> tuple[str, str, bytes]:
        return self.builder.id, "response", orjson.dumps(self.builder.response)
