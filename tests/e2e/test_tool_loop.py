"""The server-side tool loop end to end: scripted fake model, real gateway, official SDK.

Every request a fake receives is checked against OpenAI's pairing rules (conftest), so each
test here also proves the loop never sent an unpaired transcript.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.e2e.conftest import Gateway
from tests.fakes.upstream import FakeUpstream, Reply

USER = [{"role": "user", "content": "What's the weather in Paris?"}]


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "tool"]


def ask(gateway: Gateway, stream: bool, **kwargs: Any) -> tuple[str, dict[str, Any], list[Any]]:
    """Run one request; return (text, gateway extension, progress events) in either mode."""
    client = gateway.client()
    kwargs.setdefault("messages", USER)
    kwargs.setdefault("model", "agent")
    if not stream:
        completion = client.chat.completions.create(**kwargs)
        return completion.choices[0].message.content or "", completion.model_extra["gateway"], []
    text, extension, events = "", {}, []
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        extra = chunk.model_extra.get("gateway")
        if extra and "event" in extra:
            events.append(extra)
        elif extra:
            extension = extra
        if chunk.choices:
            assert not chunk.choices[0].delta.tool_calls, "server tools must never appear as tool_calls deltas"
            text += chunk.choices[0].delta.content or ""
    return text, extension, events


@pytest.mark.parametrize("stream", [False, True])
def test_one_tool(gateway: Gateway, fakes: dict[str, FakeUpstream], stream: bool) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("get_weather", {"city": "Paris"})], usage=(10, 3)),
                           Reply(text="It is 18C and sunny in Paris.", usage=(20, 8)))
    text, extension, events = ask(gateway, stream)
    assert text == "It is 18C and sunny in Paris."
    second = fakes["primary"].bodies[1]
    assert tool_messages(second)[0]["content"] == "Paris: 18C, sunny"
    assert [t["function"]["name"] for t in second["tools"]][:2] == ["get_weather", "add"]
    assert extension["status"] == "completed" and extension["iterations"] == 2
    assert [(c["name"], c["status"]) for c in extension["tool_calls"]] == [("get_weather", "ok")]
    if stream:
        assert [e["event"] for e in events] == ["tool_started", "tool_finished"]
        assert events[1]["status"] == "ok"


def test_usage_is_summed_over_model_calls(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("get_weather", {"city": "Paris"})], usage=(10, 3)),
                           Reply(text="done", usage=(20, 8)))
    completion = gateway.client().chat.completions.create(model="agent", messages=USER)
    assert completion.usage.prompt_tokens == 30 and completion.usage.completion_tokens == 11


@pytest.mark.parametrize("stream", [False, True])
def test_chain_of_five(gateway: Gateway, fakes: dict[str, FakeUpstream], stream: bool) -> None:
    fakes["primary"].queue(*[Reply(tool_calls=[("add", {"a": i, "b": 1})]) for i in range(5)], Reply(text="5"))
    text, extension, _ = ask(gateway, stream)
    assert text == "5"
    assert extension["iterations"] == 6
    last = fakes["primary"].bodies[-1]
    assert [orjson.loads(m["content"])["sum"] for m in tool_messages(last)] == [1, 2, 3, 4, 5]


def test_parallel_calls_run_concurrently_in_call_order(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("sleepy", {"ms": 500, "stamp": True}),
                                             ("sleepy", {"ms": 100, "stamp": True}),
                                             ("sleepy", {"ms": 300, "stamp": True})]), Reply(text="rested"))
    text, extension, _ = ask(gateway, False)
    assert text == "rested"
    second = fakes["primary"].bodies[1]
    assistant = [m for m in second["messages"] if m["role"] == "assistant"][-1]
    ids = [c["id"] for c in assistant["tool_calls"]]
    assert [m["tool_call_id"] for m in tool_messages(second)] == ids
    contents = [m["content"] for m in tool_messages(second)]
    assert [c.split(" from ")[0] for c in contents] == ["slept 500", "slept 100", "slept 300"]
    # Concurrent, shown by the calls' own clocks rather than a wall-clock budget (a busy machine is slow,
    # not serial): every call began before the first one ended.
    spans = [tuple(float(t) for t in c.split(" from ")[1].split(" to ")) for c in contents]
    assert max(began for began, _ in spans) < min(ended for _, ended in spans), spans
    assert [c["status"] for c in extension["tool_calls"]] == ["ok", "ok", "ok"]


@pytest.mark.parametrize(
    ("call", "expected_status", "fragment"),
    [
        (("explode", {}), "error", "database is on fire"),
        (("slow", {"seconds": 5}), "error", "timed out after 0.3s"),
        (("get_weather", {"town": "Paris"}), "error", "'city' is a required property"),
        (("get_weather", "{not json"), "error", "not valid JSON"),
        (("teleport", {"to": "Mars"}), "error", "Unknown tool 'teleport'"),
    ],
    ids=["tool-fails", "tool-times-out", "schema-violation", "invalid-json", "unknown-tool"],
)
def test_failures_become_results_and_the_loop_goes_on(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                       call: tuple[str, Any], expected_status: str,
                                                       fragment: str) -> None:
    fakes["primary"].queue(Reply(tool_calls=[call]), Reply(text="Sorry, that did not work."))
    text, extension, _ = ask(gateway, False)
    assert text == "Sorry, that did not work."
    result = tool_messages(fakes["primary"].bodies[1])[0]["content"]
    assert fragment in result
    assert extension["tool_calls"][0]["status"] == expected_status


@pytest.mark.parametrize("stream", [False, True])
def test_iteration_cap_ends_with_a_finalize_call(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                 stream: bool) -> None:
    fakes["primary"].queue(*[Reply(tool_calls=[("get_weather", {"city": f"C{i}"})]) for i in range(2)],
                           Reply(text="Final answer without more tools."))
    text, extension, _ = ask(gateway, stream, extra_body={"gateway": {"max_tool_iterations": 2}})
    assert text == "Final answer without more tools."
    assert extension["iteration_limit_reached"] is True
    assert extension["iterations"] == 3
    final = fakes["primary"].bodies[-1]
    assert final["tool_choice"] == "none"
    assert final["tools"], "tool definitions stay (providers reject tool history without them)"
    assert "limit" in final["messages"][-1]["content"]
    assert len(fakes["primary"].bodies) == 3


def test_request_cap_cannot_raise_the_routes(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].default = Reply(tool_calls=[("get_weather", {"city": "X"})])
    try:
        _, extension, _ = ask(gateway, False, extra_body={"gateway": {"max_tool_iterations": 99}})
    finally:
        fakes["primary"].default = Reply(text="ok")
    assert extension["iterations"] == 7  # the route's 6 tool rounds + the finalize call
    assert extension["iteration_limit_reached"] is True


def test_parameters_hold_for_every_iteration(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("get_weather", {"city": "Paris"})]),
                           Reply(tool_calls=[("add", {"a": 1, "b": 2})]), Reply(text="{}"))
    ask(gateway, False, temperature=0.2, max_tokens=300, stop=["STOP"], seed=3,
        response_format={"type": "json_object"})
    assert len(fakes["primary"].bodies) == 3
    for body in fakes["primary"].bodies:
        assert (body["temperature"], body["max_tokens"], body["stop"], body["seed"]) == (0.2, 300, ["STOP"], 3)
        assert body["response_format"] == {"type": "json_object"}


def test_forced_tool_choice_applies_to_the_first_call_only(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    forced = {"type": "function", "function": {"name": "get_weather"}}
    fakes["primary"].queue(Reply(tool_calls=[("get_weather", {"city": "Paris"})]), Reply(text="done"))
    ask(gateway, False, tool_choice=forced)
    first, second = fakes["primary"].bodies
    assert first["tool_choice"] == forced
    assert second["tool_choice"] == "auto"


def test_tool_choice_none_is_honoured(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="no tools used"))
    ask(gateway, False, tool_choice="none")
    assert fakes["primary"].bodies[0]["tool_choice"] == "none"


def test_stop_finish_reason_with_tool_calls_still_runs_tools(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("get_weather", {"city": "Paris"})], finish="stop"), Reply(text="ok!"))
    text, extension, _ = ask(gateway, False)
    assert text == "ok!" and extension["tool_calls"][0]["status"] == "ok"


@pytest.mark.parametrize("stream", [False, True])
def test_a_turn_answered_by_another_provider(gateway: Gateway, fakes: dict[str, FakeUpstream], stream: bool) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("get_weather", {"city": "Paris"})]), Reply(status=500))
    fakes["secondary"].queue(Reply(text="Secondary finished it."))
    text, extension, _ = ask(gateway, stream, model="agent_failover")
    assert text == "Secondary finished it."
    assert extension["answered_by"] == ["primary:m1", "secondary:m2"]
    handed_over = fakes["secondary"].bodies[0]
    assert handed_over["model"] == "m2"
    assert tool_messages(handed_over)[0]["content"] == "Paris: 18C, sunny"


def test_text_is_identical_in_both_modes(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    script = [Reply(text="Let me check.", tool_calls=[("get_weather", {"city": "Paris"})]),
              Reply(text="It is sunny.")]
    fakes["primary"].queue(*script)
    plain, _, _ = ask(gateway, False)
    fakes["primary"].queue(*script)
    streamed, _, _ = ask(gateway, True)
    assert plain == streamed == "Let me check.\n\nIt is sunny."


def test_client_tool_named_like_a_server_tool_is_400(gateway: Gateway) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    response = gateway.post("/v1/chat/completions", {"model": "agent", "messages": USER, "tools": tools})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "tools[0]"
