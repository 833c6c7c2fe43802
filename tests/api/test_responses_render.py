"""The Responses builder: one event sequence and one Response object from the same loop events."""

from __future__ import annotations

import re
from typing import Any

import pytest
from websockets.frames import Frame, Opcode
from websockets.streams import StreamReader

from gateway.api.responses.render import TERMINAL, ResponseBuilder
from gateway.api.responses.spliced import LARGE_CHARS, SLICE_CHARS, frames_body
from gateway.background.runner import sse_frame
from gateway.canonical import Answering, ReasoningDelta, TextDelta, Usage
from gateway.errors import GatewayError
from gateway.loop.engine import ITERATION_SEPARATOR
from gateway.loop.events import Finished, LoopResult, Notice, ToolFinished, ToolStarted


def builder() -> ResponseBuilder:
    return ResponseBuilder("resp_1", "agent", {"metadata": {}}, lambda name: "loopgate")


def run(events: list[Any]) -> tuple[ResponseBuilder, list[dict[str, Any]]]:
    b = builder()
    out = b.start()
    for event in events:
        out.extend(b.feed(event))
    return b, out


def paused(calls: list[tuple[str, str, str]]) -> Finished:
    tool_calls = [{"id": i, "type": "function", "function": {"name": n, "arguments": "{}"}} for i, n, _ in calls]
    gateway = {"status": "paused", "pending": [{"tool_call_id": i, "name": n, "reason": r} for i, n, r in calls]}
    return Finished(LoopResult("paused", "tool_calls", Usage(10, 2, 1, 1), gateway, tool_calls, "m"))


def test_events_and_response_agree() -> None:
    b, out = run([
        [Answering("up-1"), ReasoningDelta("hmm")], [TextDelta("Check"), TextDelta("ing.")],
        ToolStarted("c1", "get_weather", '{"city":"Paris"}'), Notice("context_compressed"),
        ToolFinished("c1", "get_weather", "ok", 1.0, "sunny"), TextDelta(ITERATION_SEPARATOR), TextDelta("Sunny."),
        paused([("c2", "lookup", "client"), ("c3", "delete", "approval")]),
    ])
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    done = [e["item"] for e in out if e["type"] == "response.output_item.done"]
    assert done == b.response["output"]
    assert [i["type"] for i in done] == ["reasoning", "message", "mcp_call", "message", "function_call",
                                         "mcp_approval_request"]
    assert done[1]["content"][0]["text"] == "Checking." and done[3]["content"][0]["text"] == "Sunny."
    assert done[2]["output"] == "sunny" and done[2]["arguments"] == '{"city":"Paris"}'
    assert done[4]["call_id"] == "c2" and done[5]["id"] == "mcpr_c3"
    added = [e["output_index"] for e in out if e["type"] == "response.output_item.added"]
    assert added == list(range(6))
    assert out[-1]["type"] == "response.completed" and out[-1]["response"]["status"] == "completed"
    assert b.response["usage"] == {"input_tokens": 10, "input_tokens_details": {"cache_write_tokens": 0,
                                                                                    "cached_tokens": 1},
                                   "output_tokens": 2, "output_tokens_details": {"reasoning_tokens": 1},
                                   "total_tokens": 12}
    assert b.response["model"] == "m" and b.response["gateway"]["route"] == "agent"
    assert "".join(b.final_text) == "Sunny."
    assert out[0]["response"]["output"] == []  # the created snapshot was not mutated afterwards


def test_length_is_incomplete() -> None:
    b, out = run([TextDelta("Cut"), Finished(LoopResult("completed", "length", Usage(), {}))])
    assert out[-1]["type"] == "response.incomplete"
    assert b.response["incomplete_details"] == {"reason": "max_output_tokens"}


def test_failure_closes_open_items() -> None:
    b, out = run([TextDelta("Part"), ToolStarted("c1", "slow", "{}")])
    out.extend(b.fail(GatewayError(502, "upstream broke")))
    assert out[-1]["type"] == "response.failed" and b.response["error"]["message"] == "upstream broke"
    assert [i["status"] for i in b.response["output"]] == ["completed", "incomplete"]  # the text ended at the tool
    assert [e["sequence_number"] for e in out] == list(range(len(out)))


def test_a_retracted_terminal_becomes_failed_without_gaps() -> None:
    b, out = run([TextDelta("Hi")])
    last = b.feed(Finished(LoopResult("completed", "stop", Usage(), {})))
    b.retract_terminal(last)
    last.extend(b.fail(GatewayError(503, "store down")))
    out.extend(last)
    assert [e["type"] for e in out][-1] == "response.failed" and "response.completed" not in [e["type"] for e in out]
    assert [e["sequence_number"] for e in out] == list(range(len(out)))


def test_failure_mid_text_marks_the_message_incomplete() -> None:
    b, out = run([TextDelta("Part")])
    out.extend(b.fail(GatewayError(502, "upstream broke")))
    assert b.response["output"][0]["status"] == "incomplete"
    assert b.response["output"][0]["content"][0]["text"] == "Part"


def test_without_emit_the_response_is_the_same() -> None:
    events: list[Any] = [[Answering("up-1"), ReasoningDelta("hmm")], TextDelta("Checking."),
                         ToolStarted("c1", "get_weather", "{}"), ToolFinished("c1", "get_weather", "ok", 1.0, "sunny"),
                         TextDelta("Sunny."), paused([("c2", "lookup", "client")])]
    loud, _ = run(events)
    quiet = ResponseBuilder("resp_1", "agent", {"metadata": {}}, lambda name: "loopgate", emit=False)
    quiet.start()
    for event in events:
        quiet.feed(event)
    for item in quiet.response["output"]:  # item ids come from a counter: compare everything else
        item.pop("id")
    for item in loud.response["output"]:
        item.pop("id")
    assert quiet.response | {"created_at": 0} == loud.response | {"created_at": 0}


_BIG = ('a "quoted" \\ line\n\x01\té\u2028😀 ' * 20_000)[:LARGE_CHARS + SLICE_CHARS + 7]
_FRAMED_RUNS: dict[str, list[Any]] = {
    "text and a tool": [
        [Answering("up-1"), TextDelta('Say "hi"\n')], [TextDelta("é\u2028"), TextDelta("b")],
        ToolStarted("c1", "get_weather", "{}"), ToolFinished("c1", "get_weather", "ok", 1.0, "x"),
        [TextDelta(ITERATION_SEPARATOR), TextDelta("Sunny.")], TextDelta(" Done."),
        Finished(LoopResult("completed", "stop", Usage(10, 2, 1, 1), {}, [], "m"))],
    "reasoning, a failed tool, a pause": [
        [Answering("up-1"), ReasoningDelta("hmm"), ReasoningDelta(" ok")], TextDelta("Looking."),
        ToolStarted("c1", "lookup", '{"q":1}'), ToolFinished("c1", "lookup", "error", 1.0, "boom"),
        paused([("c2", "lookup", "client"), ("c3", "delete", "approval")])],
    "cut off": [TextDelta("Cut"), Finished(LoopResult("completed", "length", Usage(), {}))],
    "failed mid text": [TextDelta("Part"), ToolStarted("c1", "slow", "{}"), "fail"],
    "failed in a message": [TextDelta("Part"), "fail"],
    # Past LARGE_CHARS the frames that carry a text are spliced slice by slice (responses/spliced.py):
    # escapes, multi-byte characters and a slice boundary inside them give the same bytes.
    "a large text": [TextDelta(_BIG[:200_000]), TextDelta(_BIG[200_000:]), TextDelta("end"),
                     Finished(LoopResult("completed", "stop", Usage(10, 2, 1, 1), {}, [], "m"))],
    "a large text, failed": [TextDelta("small first"), ToolStarted("c1", "slow", "{}"),
                             ToolFinished("c1", "slow", "ok", 1.0, "x"), TextDelta(_BIG), "fail"],
    "large reasoning and a large text": [ReasoningDelta(_BIG), TextDelta(_BIG[::-1]),
                                         Finished(LoopResult("completed", "length", Usage(), {}))],
}


@pytest.mark.parametrize("name", list(_FRAMED_RUNS))
def test_frames_are_the_bytes_of_the_events(name: str) -> None:
    """An SSE body from a ``frames`` builder is byte for byte the dict events, encoded."""
    bodies = []
    for frames in (False, True):
        b = ResponseBuilder("resp_1", "agent", {"metadata": {}}, lambda name: "loopgate", created_at=1,
                            frames=frames)
        batches = [b.start()]
        for event in _FRAMED_RUNS[name]:
            batches.append(b.fail(GatewayError(502, "upstream broke")) if event == "fail" else b.feed(event))
        if frames:  # every event is its frame, but for the terminal one the run frames after the save
            if batches[-1][-1] is TERMINAL:
                batches[-1][-1] = b.terminal_frame(None)
            written = [frames_body(batch) for batch in batches]
            assert ("large" in name) == any(not isinstance(body, bytes) for body in written)
            writes = [[body] if isinstance(body, bytes) else list(body) for body in written]
            assert max(len(piece) for pieces in writes for piece in pieces) < 2 * 1024 * 1024, "written in slices"
            batches = [[b"".join(pieces)] for pieces in writes]
        body = b"".join(event if event.__class__ is bytes else sse_frame(event) for batch in batches for event in batch)
        # Ids are random and ``completed_at`` is the clock when each run completed: neither is about the frames.
        body = re.sub(rb'"completed_at":\d+', b'"completed_at":0', body)
        bodies.append(re.sub(rb"(msg|rs)_[0-9a-f]+", b"id_X", body))
    assert b"event: response." in bodies[1]
    assert bodies[0] == bodies[1]


def _messages(data: bytes) -> tuple[list[bytes], int]:
    """The text messages in ``data`` (server frames), read by the ``websockets`` library's own parser, fragments
    joined as a client joins them; and how many frames there were."""
    reader = StreamReader()
    reader.feed_data(data)
    messages: list[bytes] = []
    pieces: list[bytes] = []
    frames = 0
    while reader.buffer:
        frames += 1
        try:
            next(Frame.parse(reader.read_exact, mask=False))
        except StopIteration as done:
            frame = done.value
            assert frame.opcode is (Opcode.CONT if pieces else Opcode.TEXT)
            pieces.append(frame.data)
            if frame.fin:
                messages.append(b"".join(pieces))
                pieces = []
    assert not pieces, "a message left unfinished"
    return messages, frames


@pytest.mark.parametrize("name", list(_FRAMED_RUNS))
def test_socket_frames_hold_the_events_data(name: str) -> None:
    """A ``socket`` builder writes the events of the SSE body, each as one WebSocket message holding its data (a
    large text's as fragments, a slice each), in the same writes."""
    bodies = []
    for socket in (False, True):
        b = ResponseBuilder("resp_1", "agent", {"metadata": {}}, lambda name: "loopgate", created_at=1, frames=True)
        if socket:
            b.to_socket()
        batches = [b.start()]
        for event in _FRAMED_RUNS[name]:
            batches.append(b.fail(GatewayError(502, "upstream broke")) if event == "fail" else b.feed(event))
        if batches[-1][-1] is TERMINAL:
            batches[-1][-1] = b.terminal_frame(None)
        written = [frames_body(batch) for batch in batches]
        assert ("large" in name) == any(not isinstance(body, bytes) for body in written)
        pieces = [piece for body in written for piece in ([body] if isinstance(body, bytes) else list(body))]
        assert max(len(piece) for piece in pieces) < 2 * 1024 * 1024, "written in slices"
        body = b"".join(pieces)
        if socket:
            messages, frames = _messages(body)
            assert ("large" in name) == (frames > len(messages)), "a large text's events are fragmented"
        else:
            messages = [event.partition(b"\ndata: ")[2] for event in body.split(b"\n\n") if event]
        # Ids are random and ``completed_at`` is the clock when each run completed: neither is about the frames.
        bodies.append([re.sub(rb"(msg|rs)_[0-9a-f]+", b"id_X", re.sub(rb'"completed_at":\d+', b'"completed_at":0', m))
                       for m in messages])
    assert len(bodies[1]) > 3
    assert bodies[1] == bodies[0]
