"""A stored response keeps its answer's text once: the Response object's, which must be the transcript's answer.

The record stores the transcript without its final assistant message and reads it back from the
Response object (gateway/store/responses/base.py, ``answer_text``). That is right only while the
Responses builder's message items after its last tool item are exactly the text it closed since
the last tool started (``final_text``, what the transcript used to store): checked here over the
loop's event shapes, as events and as SSE frames, a large (spliced) text included.
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.api.responses.render import ResponseBuilder
from gateway.api.responses.spliced import LARGE_CHARS
from gateway.canonical import Answering, ReasoningDelta, TextDelta, Usage
from gateway.loop.engine import ITERATION_SEPARATOR
from gateway.loop.events import Finished, LoopResult, Notice, ToolFinished, ToolStarted
from gateway.store.responses.base import answer_text


def _tool(call_id: str) -> list[Any]:
    return [ToolStarted(call_id, "get_weather", "{}"), ToolFinished(call_id, "get_weather", "ok", 1.0, "sunny")]


def _end(reason: str = "stop") -> Finished:
    return Finished(LoopResult("completed", reason, Usage(), {}))


SHAPES: dict[str, list[Any]] = {
    "text only": [TextDelta("Hello"), TextDelta(", world.")],
    "no text": [*_tool("c1")],
    "text, tool, text": [TextDelta("Checking."), *_tool("c1"), TextDelta(ITERATION_SEPARATOR), TextDelta("Sunny.")],
    "reasoning between texts": [Answering("m"), ReasoningDelta("hmm"), TextDelta("A"), ReasoningDelta("more"),
                                TextDelta("B"), Notice("context_compressed"), TextDelta("C")],
    "two tools, a separator in the text": [*_tool("c1"), TextDelta("x"), *_tool("c2"), TextDelta("one"),
                                           TextDelta(ITERATION_SEPARATOR), TextDelta("two")],
    "large": [*_tool("c1"), TextDelta("L" * (LARGE_CHARS + 10))],
}


@pytest.mark.parametrize("frames", [False, True], ids=["events", "frames"])
@pytest.mark.parametrize("reason", ["stop", "length"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_response_s_last_messages_are_the_transcript_s_answer(shape: str, reason: str, frames: bool) -> None:
    builder = ResponseBuilder("resp_1", "agent", {"metadata": {}}, lambda name: "loopgate", frames=frames)
    builder.start()
    for event in [*SHAPES[shape], _end(reason)]:
        builder.feed(event)
    assert builder.done
    assert answer_text(builder.response["output"]) == "".join(builder.final_text)
