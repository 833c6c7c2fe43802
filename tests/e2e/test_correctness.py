"""Correctness with real clients and strict providers: re-serialised follow-ups, malformed arguments in
history, reasoning pass-back, and a resume whose route is gone."""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import KEY, Gateway, gateway_config
from tests.e2e.test_continuations import LOOKUP, REDIS_URL, USER, require_redis
from tests.fakes.tool_server import ToolServer
from tests.fakes.upstream import FakeUpstream, Reply

# What a model emits: spaces after separators, non-ASCII escaped, keys in the model's order.
EMITTED = '{"q": "Z\\u00fcrich", "n": 1, "opts": {"b": true, "a": [1.0, null]}}'


def show(gateway: Gateway, continuation_id: str) -> httpx.Response:
    return httpx.get(f"{gateway.url}/v1/continuations/{continuation_id}", headers={"authorization": f"Bearer {KEY}"})


def reserialised_follow_up(paused: Any, output: str, arguments: str | None = None) -> list[dict[str, Any]]:
    """What a JavaScript-style client sends back: compact JSON, UTF-8 kept, keys re-ordered, 1.0 written as 1."""
    message = paused.choices[0].message
    calls = []
    for call in message.tool_calls:
        parsed = json.loads(call.function.arguments)
        rewritten = json.dumps(dict(reversed(list(parsed.items()))), separators=(",", ":"), ensure_ascii=False)
        calls.append({"id": call.id, "type": "function",
                      "function": {"name": call.function.name,
                                   "arguments": (arguments or rewritten).replace("1.0", "1")}})
    return [*USER, {"role": "assistant", "content": message.content, "tool_calls": calls},
            *[{"role": "tool", "tool_call_id": call.id, "content": output} for call in message.tool_calls]]


def pause_with_emitted_arguments(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> Any:
    fakes["primary"].queue(Reply(tool_calls=[("get_weather", {"city": "Paris"})]),
                           Reply(text="Checking.", tool_calls=[("lookup", EMITTED)]))
    paused = gateway.client().chat.completions.create(model="agent", messages=USER, tools=LOOKUP)
    assert paused.choices[0].message.tool_calls[0].function.arguments == EMITTED
    return paused


def test_way_a_resumes_when_the_client_reserialises_arguments(gateway: Gateway,
                                                              fakes: dict[str, FakeUpstream]) -> None:
    paused = pause_with_emitted_arguments(gateway, fakes)
    follow_up = reserialised_follow_up(paused, "found")
    sent = follow_up[1]["tool_calls"][0]["function"]["arguments"]
    assert sent != EMITTED and json.loads(sent) == json.loads(EMITTED)
    fakes["primary"].queue(Reply(text="Zürich found; Paris is sunny."))
    done = gateway.client().chat.completions.create(model="agent", messages=follow_up, tools=LOOKUP)
    assert done.model_extra["gateway"]["status"] == "completed"
    resumed = fakes["primary"].bodies[-1]["messages"]
    # Resumed from the stored transcript: the hidden server exchange is there, the continuation is used up.
    assert [m["role"] for m in resumed] == ["user", "assistant", "tool", "assistant", "tool"]
    assert resumed[2]["content"] == "Paris: 18C, sunny" and resumed[4]["content"] == "found"
    shown = show(gateway, paused.model_extra["gateway"]["continuation_id"])
    assert shown.status_code == 404 or shown.json()["status"] == "resumed"


def test_way_a_with_other_arguments_is_stateless_and_logged(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    paused = pause_with_emitted_arguments(gateway, fakes)
    changed = '{"q":"Bern\\n forged log line","n":2}' + "x" * 500  # caller text: escaped and cut in the log
    fakes["primary"].queue(Reply(text="Answered statelessly."))
    gateway.client().chat.completions.create(model="agent", messages=reserialised_follow_up(paused, "r", changed),
                                             tools=LOOKUP)
    assert [m["role"] for m in fakes["primary"].bodies[-1]["messages"]] == ["user", "assistant", "tool"]
    continuation_id = paused.model_extra["gateway"]["continuation_id"]
    assert show(gateway, continuation_id).json()["status"] == "pending"
    deadline = time.monotonic() + 5
    while continuation_id not in gateway.logs() and time.monotonic() < deadline:
        time.sleep(0.05)
    line = next(line for line in gateway.logs().splitlines() if continuation_id in line)
    assert "does not match" in line and "other arguments" in line
    assert "\\n forged log line" in line and "x" * 150 not in line


@pytest.mark.parametrize("route", ["solo_primary", "chain_primary_claude", "chain_primary_gemini"])
def test_malformed_arguments_in_history_reach_strict_providers_as_an_object(
        gateway: Gateway, fakes: dict[str, FakeUpstream], route: str) -> None:
    """The model cuts its arguments short; the loop answers with an error result; the next call must be valid.

    On the chain routes the next call fails over to Anthropic or Gemini, which need an object too.
    """
    fakes["primary"].queue(Reply(tool_calls=[("get_weather", '{"city": "Par')]))
    nxt = fakes["primary"] if route == "solo_primary" else fakes[route.rsplit("_", 1)[1]]
    if route != "solo_primary":
        fakes["primary"].queue(Reply(status=503, error_body={"error": {"message": "busy", "type": "server_error"}}))
    nxt.queue(Reply(text="Which city did you mean?"))
    done = gateway.client().chat.completions.create(model=route, messages=[{"role": "user", "content": "Weather?"}])
    assert done.choices[0].message.content == "Which city did you mean?"
    assert done.model_extra["gateway"]["tool_calls"][0]["status"] == "error"
    # The strict fakes (autouse check) refused nothing; the tool result still tells the model what went wrong.
    assert "not valid JSON" in json.dumps(nxt.requests[-1].body)


def test_reasoning_goes_back_by_default_to_the_provider_that_produced_it(
        gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(reasoning="I should call it.", tool_calls=[("get_weather", {"city": "Paris"})]),
                           Reply(tool_calls=[("add", {"a": 1, "b": 2})]), Reply(text="Sunny."))
    gateway.client().chat.completions.create(model="agent", messages=USER)
    third = [m for m in fakes["primary"].bodies[2]["messages"] if m["role"] == "assistant"]
    assert [m.get("reasoning_content") for m in third] == ["I should call it.", ""]
    assert all("reasoning_origin" not in m for m in third)


def test_reasoning_never_goes_to_another_provider(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(reasoning="Mine.", tool_calls=[("get_weather", {"city": "Paris"})]),
                           Reply(status=503, error_body={"error": {"message": "busy", "type": "server_error"}}))
    fakes["secondary"].queue(Reply(text="Sunny."))
    done = gateway.client().chat.completions.create(model="chain_primary_secondary", messages=USER)
    assert done.model_extra["gateway"]["answered_by"][-1].startswith("secondary:")
    assert all("reasoning_content" not in m for m in fakes["secondary"].bodies[-1]["messages"])


def test_resume_whose_route_is_gone_is_404_both_ways_and_stays_pending(fakes: dict[str, FakeUpstream],
                                                                         tool_server: ToolServer) -> None:
    """Paused on a route that a config change removed: ways A and B answer alike, and nothing is consumed."""
    require_redis(REDIS_URL)
    extra = "  temporary:\n    targets: [{provider: primary, model: up-model}]\n    tools: [get_weather]\n"
    before = Gateway(gateway_config(fakes, store_url=REDIS_URL, tool_server=tool_server.url,
                                    extra_models=extra)).start()
    try:
        # Ids unique in the shared Redis: other tests left continuations with the fake's usual call_1_0.
        fakes["primary"]._ids = itertools.count(time.time_ns())
        fakes["primary"].queue(Reply(tool_calls=[("lookup", {"q": "x"})]))
        paused = before.client().chat.completions.create(model="temporary", messages=USER, tools=LOOKUP)
    finally:
        before.stop()
    after = Gateway(gateway_config(fakes, store_url=REDIS_URL, tool_server=tool_server.url)).start()
    try:
        continuation_id = paused.model_extra["gateway"]["continuation_id"]
        call_id = paused.choices[0].message.tool_calls[0].id
        # Way A with a route that does exist: the continuation's own route decides, as in way B.
        message = paused.choices[0].message.model_dump(exclude_none=True)
        way_a = after.post("/v1/chat/completions", {"model": "agent", "tools": LOOKUP, "messages": [
            *USER, message, {"role": "tool", "tool_call_id": call_id, "content": "r"}]})
        way_b = after.post(f"/v1/continuations/{continuation_id}",
                           {"decisions": [{"tool_call_id": call_id, "output": "r"}]})
        assert way_a.status_code == way_b.status_code == 404
        assert way_a.json() == way_b.json()
        assert way_a.json()["error"]["code"] == "model_not_found" and "temporary" in way_a.json()["error"]["message"]
        assert show(after, continuation_id).json()["status"] == "pending"
        assert fakes["primary"].requests[-1].body["model"] == "up-model" and len(fakes["primary"].requests) == 1
    finally:
        after.stop()
