"""A caller's ``namespace`` tools natively on an OpenAI Responses target (the GPT-5 family and later): sent as the
caller wrote them, a call coming back with its ``namespace`` round-trips to the caller exactly, and goes back to
the target in the history as the model made it. Other targets (and older models) keep the flattened names."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.e2e.conftest import KEY, TOOLS_YAML, Gateway, serving
from tests.fakes.openai_responses import FakeResponsesUpstream, ResponsesReply
from tests.fakes.openai_rules import openai_request_problems
from tests.fakes.upstream import FakeUpstream, Reply

AGENTS = {"type": "namespace", "name": "multi_agent_v1", "description": "Tools for sub-agents.", "tools": [
    {"type": "function", "name": "spawn_agent", "description": "Start a sub-agent.",
     "parameters": {"type": "object", "properties": {"task": {"type": "string"}}, "required": ["task"]}},
    {"type": "function", "name": "send_input", "description": "Message a sub-agent.", "strict": False,
     "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}},
    {"type": "custom", "name": "patch", "description": "Apply a patch."}]}
# Its name is no valid function name: its members are disambiguated, and go flat everywhere.
ODD = {"type": "namespace", "name": "my.tools", "description": "", "tools": [
    {"type": "function", "name": "run", "strict": False, "parameters": {"type": "object", "properties": {}}}]}
PLAIN = {"type": "function", "name": "exec_command", "strict": False,
         "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}
TOOLS = [PLAIN, AGENTS, ODD]
CODEX = Path(__file__).parents[1] / "fixtures" / "codex" / "session.json"


#: what no upstream request may carry (checked after every test: tests/e2e/conftest.py)
FORBIDDEN_UPSTREAM = (b'"tool":', "the canonical namespace key")


@pytest.fixture(scope="module")
def fakes() -> Iterator[dict[str, FakeUpstream]]:
    started: dict[str, FakeUpstream] = {"resp": FakeResponsesUpstream().start(),
                                        "chat": FakeUpstream("openai", openai_request_problems).start()}
    yield from serving(started)


@pytest.fixture(scope="module")
def gateway(fakes: dict[str, FakeUpstream]) -> Iterator[Gateway]:
    def provider(name: str) -> str:
        return (f"  {name}: {{type: {fakes[name].wire}, base_url: '{fakes[name].url}', api_key: key-{name}, "
                f"timeout_s: 5, connect_timeout_s: 1}}")

    gw = Gateway(f"""
server: {{host: 127.0.0.1, port: __PORT__}}
auth: {{keys: [{{key: {KEY}, tenant: team-a}}]}}
routing: {{backoff_base_s: 0.01, backoff_max_s: 0.05, breaker_failures: 1000, request_timeout_s: 30}}
providers:
{provider("resp")}
{provider("chat")}
{TOOLS_YAML}
models:
  resp: {{targets: [{{provider: resp, model: gpt-5.2}}], tools: [get_weather]}}
  resp_old: {{targets: [{{provider: resp, model: gpt-4.1}}]}}
  chat: {{targets: [{{provider: chat, model: gpt-5.2}}]}}
  resp_then_chat: {{targets: [{{provider: resp, model: gpt-5.2}}, {{provider: chat, model: gpt-5.2}}], retries: 0}}
""").start()
    yield gw
    gw.stop()


def respond(gateway: Gateway, body: dict[str, Any]) -> dict[str, Any]:
    answer = gateway.post("/v1/responses", body)
    assert answer.status_code == 200, answer.text
    return answer.json()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_namespaces_go_natively_and_a_call_round_trips(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                       stream: bool) -> None:
    fakes["resp"].queue(ResponsesReply(text="Spawning.", tool_calls=[("spawn_agent", {"task": "tests"})],
                                       namespaces=["multi_agent_v1"]))
    first = gateway.post("/v1/responses", {"model": "resp", "input": "Run the tests in a sub-agent.",
                                           "tools": TOOLS, "store": False, "stream": stream})
    assert first.status_code == 200, first.text
    sent = fakes["resp"].requests[0].body
    # The route's server tool first, then the caller's in its order, its namespace whole in its place.
    assert [t["type"] for t in sent["tools"]] == ["function", "function", "namespace", "function"]
    native = sent["tools"][2]
    assert native["name"] == "multi_agent_v1" and native["description"] == "Tools for sub-agents."
    assert native["tools"] == [{**AGENTS["tools"][0], "strict": False}, AGENTS["tools"][1], AGENTS["tools"][2]]
    flat = [t["name"] for t in sent["tools"] if t["type"] == "function"]
    assert flat[:2] == ["get_weather", "exec_command"] and flat[2].startswith("my_tools__run_")
    call = _call_item(first, stream)
    assert (call["name"], call["namespace"]) == ("spawn_agent", "multi_agent_v1")
    # Codex keeps the state: the whole conversation comes back, the call with its namespace, and its output.
    fakes["resp"].queue(Reply(text="Started."))
    history = [{"type": "message", "role": "user", "content": "Run the tests in a sub-agent."},
               {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Spawning."}]},
               {k: v for k, v in call.items() if k not in ("id", "status")},
               {"type": "function_call_output", "call_id": call["call_id"], "output": "agent_7"}]
    respond(gateway, {"model": "resp", "input": history, "tools": TOOLS, "store": False})
    back = [i for i in fakes["resp"].requests[1].body["input"] if i.get("type") == "function_call"]
    assert back == [{"type": "function_call", "call_id": call["call_id"], "name": "spawn_agent",
                     "namespace": "multi_agent_v1", "arguments": '{"task":"tests"}'}]


def _call_item(answer: Any, stream: bool) -> dict[str, Any]:
    if not stream:
        return next(i for i in answer.json()["output"] if i["type"] == "function_call")
    events = [orjson.loads(line[6:]) for line in answer.text.splitlines() if line.startswith("data: {")]
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    return next(i for i in done if i["type"] == "function_call")


def test_a_stored_conversation_sends_the_call_back_as_the_model_made_it(gateway: Gateway,
                                                                       fakes: dict[str, FakeUpstream]) -> None:
    fakes["resp"].queue(ResponsesReply(reasoning="Delegate.", tool_calls=[("send_input", {"id": "a1"})],
                                       namespaces=["multi_agent_v1"]), Reply(text="Sent."))
    first = respond(gateway, {"model": "resp", "input": "Tell agent a1.", "tools": TOOLS})
    call = first["output"][-1]
    assert (call["type"], call["name"], call["namespace"]) == ("function_call", "send_input", "multi_agent_v1")
    respond(gateway, {"model": "resp", "previous_response_id": first["id"], "tools": TOOLS, "input": [
        {"type": "function_call_output", "call_id": call["call_id"], "output": "ok"}]})
    back = [i for i in fakes["resp"].requests[1].body["input"] if i.get("type") == "function_call"]
    assert [(i["name"], i.get("namespace")) for i in back] == [("send_input", "multi_agent_v1")]


def test_a_server_tool_runs_beside_native_namespaces(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["resp"].queue(ResponsesReply(tool_calls=[("get_weather", {"city": "Paris"})]), Reply(text="Sunny."))
    done = respond(gateway, {"model": "resp", "input": "Weather?", "tools": TOOLS})
    assert done["output"][-1]["content"][0]["text"] == "Sunny."
    assert [i["type"] for i in done["output"]] == ["mcp_call", "message"]


@pytest.mark.parametrize("model", ["chat", "resp_old"])
def test_other_targets_keep_the_flattened_names(gateway: Gateway, fakes: dict[str, FakeUpstream], model: str) -> None:
    fake = fakes["chat" if model == "chat" else "resp"]
    fake.queue(Reply(tool_calls=[("multi_agent_v1__spawn_agent", {"task": "t"})]))
    first = respond(gateway, {"model": model, "input": "Go.", "tools": TOOLS, "store": False})
    body = fake.requests[0].body
    names = [t["function"]["name"] if "function" in t else t.get("name") for t in body["tools"]]
    assert "multi_agent_v1__spawn_agent" in names and "namespace" not in [t["type"] for t in body["tools"]]
    call = first["output"][-1]
    assert (call["name"], call["namespace"]) == ("spawn_agent", "multi_agent_v1")


def test_failover_from_the_responses_target_keeps_the_call_for_chat(gateway: Gateway,
                                                                     fakes: dict[str, FakeUpstream]) -> None:
    fakes["resp"].queue(Reply(status=503))
    fakes["chat"].queue(Reply(text="Done."))
    history = [{"type": "message", "role": "user", "content": "Go."},
               {"type": "function_call", "call_id": "call_9", "name": "spawn_agent", "namespace": "multi_agent_v1",
                "arguments": "{}"},
               {"type": "function_call_output", "call_id": "call_9", "output": "agent_1"}]
    respond(gateway, {"model": "resp_then_chat", "input": history, "tools": TOOLS, "store": False})
    native = next(i for i in fakes["resp"].requests[0].body["input"] if i.get("type") == "function_call")
    assert (native["name"], native["namespace"]) == ("spawn_agent", "multi_agent_v1")
    flat = fakes["chat"].requests[0].body["messages"][1]["tool_calls"][0]["function"]["name"]
    assert flat == "multi_agent_v1__spawn_agent"


def test_codex_recorded_tools_reach_the_target_as_codex_wrote_its_namespace(gateway: Gateway,
                                                                            fakes: dict[str, FakeUpstream]) -> None:
    recorded = orjson.loads(CODEX.read_bytes())["requests"][0]["body"]
    fakes["resp"].queue(Reply(text="ok"))
    respond(gateway, {**recorded, "model": "resp", "stream": False})
    namespaces = [t for t in recorded["tools"] if t["type"] == "namespace"]
    sent = [t for t in fakes["resp"].requests[0].body["tools"] if t["type"] == "namespace"]
    assert [t["name"] for t in sent] == [t["name"] for t in namespaces] and namespaces
    assert sent[0]["tools"] == namespaces[0]["tools"]  # Codex sets strict on each: verbatim
