"""What a pause keeps of its loop (``Continuation.data``), that both releases of a rolling deploy resume each
other's pauses (this one what the previous release wrote, the previous one what this one writes), and what a
resumed continuation keeps until its TTL."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any, cast

import orjson

from gateway.canonical import NativeRequest
from gateway.loop.approvals import arguments_digest, continuation_view, decision_context
from gateway.loop.continuations import Continuations, kept_once_resumed, paused_data
from gateway.loop.engine import LoopRequest, LoopState
from gateway.loop.pairing import ToolResult
from gateway.loop.pausing import PendingCall
from gateway.routing.routes import RoutePlan
from gateway.store.continuations.base import Continuation
from gateway.store.memory import MemoryStore

PLAN = cast(RoutePlan, SimpleNamespace(name="smart"))
CALL = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "Zürich"}'}}
ASSISTANT = {"role": "assistant", "content": "Looking it up.", "tool_calls": [CALL]}
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
#: what the previous release's resume reads with ``data[...]`` (a KeyError there would be a 500)
INDEXED = ("transcript", "assistant", "results", "client_tools", "tool_choice", "params", "max_iterations", "state")

#: a pause as the previous release wrote it (format 1: every field, the whole loop state, the derived ones)
PREVIOUS = {
    "v": 1, "id": "cont_previous", "tenant": "acme", "model": "smart", "status": "pending",
    "created_at": 1_700_000_000.5, "expires_at": 1_700_086_400.5, "claimed_until": None,
    "pending": [{"tool_call_id": "call_1", "name": "lookup", "reason": "client", "arguments": '{"q": "Zürich"}',
                 "arguments_sha256": arguments_digest('{"q": "Zürich"}')}],
    "data": {
        "transcript": [{"role": "user", "content": "Where?"}], "assistant": ASSISTANT,
        "results": {"call_0": ["ok", "done", 1.5]}, "client_tools": TOOLS, "tool_choice": "auto",
        "params": {"max_tokens": 300}, "native": None, "max_iterations": 7,
        "state": {"iterations": 2, "tool_rounds": 1, "answered_by": ["p:m", "p:m"], "attempts": [],
                  "usage": [10, 5, 0, 0, 0], "tool_records": [], "headless_denials": [], "text_emitted": True,
                  "iteration_limit_reached": False, "context": {}, "model": "m-2024", "sampling": {}},
        "asker": {"id": "key_1", "name": "alice"}, "allowed_tools": ["lookup"],
        "context": {"user": "Where?", "assistant": "Looking it up."}, "origin": None, "stream_rescue": False,
    },
}


def request(**changes: Any) -> LoopRequest:
    fields: dict[str, Any] = {
        "plan": PLAN, "messages": [{"role": "user", "content": "Where?"}], "client_tools": TOOLS,
        "tool_choice": "auto", "params": {"max_tokens": 300}, "max_iterations": 7, "headless": False,
        "tenant": "acme", "stream": False, "deadline": time.monotonic() + 60, "key_id": "key_1", "key_name": "alice",
        "state": LoopState(iterations=2, tool_rounds=1, answered_by=["p:m", "p:m"], model="m-2024"),
    }
    return LoopRequest(**{**fields, **changes})


def test_a_pause_keeps_what_a_resume_reads_and_not_what_is_derived() -> None:
    data = paused_data(request(), ASSISTANT, {"call_0": ToolResult("ok", "done", 1.5)})
    assert set(INDEXED) <= set(data)
    assert data["state"] == {"tool_rounds": 1, "model": "m-2024"}
    assert LoopState.from_dict(data["state"]).tool_rounds == 1  # how the previous release reads it
    assert data["asker"] == {"id": "key_1", "name": "alice"} and data["results"] == {"call_0": ["ok", "done", 1.5]}
    assert not {"context", "native", "allowed_tools", "origin", "stream_rescue"} & set(data)
    native = NativeRequest("anthropic", {"system": "x"}, [], {})
    data = paused_data(request(native=native, allowed_tools=frozenset({"b", "a"}), origin={"surface": "responses"},
                               stream_rescue=False), ASSISTANT, {})
    assert data["native"] == native.to_dict() and data["allowed_tools"] == ["a", "b"]
    assert data["origin"] == {"surface": "responses"} and data["stream_rescue"] is False


def resumed(c: Continuation) -> LoopRequest:
    return Continuations(MemoryStore(), 600, 30.0).resumed_request(
        c, PLAN, {"call_1": ToolResult("client", "12 °C")}, [], False, time.monotonic() + 60, "acme")


def test_a_pause_the_previous_release_wrote_resumes_here() -> None:
    c = Continuation.from_bytes(orjson.dumps(PREVIOUS))
    loop = resumed(c)
    assert loop.messages == PREVIOUS["data"]["transcript"] and loop.client_tools == TOOLS  # type: ignore[index]
    assert (loop.tool_choice, loop.params, loop.max_iterations) == ("auto", {"max_tokens": 300}, 7)
    assert (loop.state.tool_rounds, loop.state.model, loop.state.iterations) == (1, "m-2024", 0)
    assert (loop.key_id, loop.key_name, loop.allowed_tools) == ("key_1", "alice", frozenset({"lookup"}))
    assert loop.native is None and loop.stream_rescue is False
    assert loop.resume is not None and set(loop.resume.results) == {"call_0", "call_1"}
    view = continuation_view(c)
    assert view["context"] == PREVIOUS["data"]["context"]  # type: ignore[index]
    assert view["pending"][0]["arguments_sha256"] == arguments_digest('{"q": "Zürich"}')


async def test_a_pause_written_here_resumes_and_shows_what_it_no_longer_stores() -> None:
    store = MemoryStore()
    continuations = Continuations(store, 600, 30.0)
    paused = request()
    cid = await continuations.pause(paused, ASSISTANT, {"call_0": ToolResult("ok", "done", 1.5)},
                                    [PendingCall(CALL, "client")])
    c = await store.get_continuation(cid, "acme")
    assert "arguments_sha256" not in c.pending[0]
    view = continuation_view(c)
    assert view["context"] == decision_context(paused.messages, ASSISTANT)
    assert view["pending"][0]["arguments_sha256"] == arguments_digest(CALL["function"]["arguments"])  # type: ignore[index]
    assert view["key"] == {"id": "key_1", "name": "alice"}
    loop = resumed(c)
    assert (loop.state.tool_rounds, loop.state.model, loop.max_iterations) == (1, "m-2024", 7)
    assert loop.allowed_tools is None and loop.native is None and loop.stream_rescue is None
    assert loop.resume is not None and set(loop.resume.results) == {"call_0", "call_1"}


async def test_a_resumed_continuation_keeps_what_its_view_shows_and_not_the_loop() -> None:
    store = MemoryStore()
    continuations = Continuations(store, 600, 30.0)
    cid = await continuations.pause(request(), ASSISTANT, {}, [PendingCall(CALL, "client")])
    paused = await store.get_continuation(cid, "acme")
    kept = kept_once_resumed(paused)
    assert kept.data == {"asker": {"id": "key_1", "name": "alice"},
                         "context": decision_context(request().messages, ASSISTANT)}
    assert len(kept.to_bytes()) < len(paused.to_bytes())
    await store.claim_continuation(cid, "acme", 30)
    await store.finish_continuation(cid, "acme", b'{"id":"chatcmpl-1","object":"chat.completion","body":{}}', kept)
    resumed = await store.get_continuation(cid, "acme")
    assert resumed.data == kept.data and resumed.pending == paused.pending
    shown, before = continuation_view(resumed, now=1.0), continuation_view(paused, now=1.0)
    assert shown == {**before, "status": "resumed"}
    previous = kept_once_resumed(Continuation.from_bytes(orjson.dumps(PREVIOUS)))  # the context it stored
    assert previous.data == {"asker": {"id": "key_1", "name": "alice"}, "context": PREVIOUS["data"]["context"]}  # type: ignore[index]


async def test_a_pause_carries_max_tool_calls_and_what_is_spent_of_it() -> None:
    """Beside ``state`` (which the previous release reads whole): a resume spends only what is left."""
    store = MemoryStore()
    continuations = Continuations(store, 600, 30.0)
    paused = request(max_tool_calls=3, state=LoopState(tool_rounds=1, model="m", tool_calls_run=2))
    data = paused_data(paused, ASSISTANT, {})
    assert data["max_tool_calls"] == [3, 2] and data["state"] == {"tool_rounds": 1, "model": "m"}
    assert "max_tool_calls" not in paused_data(request(), ASSISTANT, {})
    cid = await continuations.pause(paused, ASSISTANT, {}, [PendingCall(CALL, "client")])
    loop = resumed(await store.get_continuation(cid, "acme"))
    assert (loop.max_tool_calls, loop.state.tool_calls_run) == (3, 2)
    for damaged in ([3], [3, -1], ["3", 0], [True, 0], {"max": 3}, 3):  # unreadable: no cap, never a 500
        c = Continuation.from_bytes(orjson.dumps({**PREVIOUS, "data": {**PREVIOUS["data"], "max_tool_calls": damaged}}))  # type: ignore[dict-item]
        loop = resumed(c)
        assert loop.max_tool_calls is None and loop.state.tool_calls_run == 0
