"""Every tool type Codex and the Responses API send, end to end: the ``openai`` SDK against the gateway process.

Namespace tools (a call comes back as the ``function_call`` Codex routes by: its ``namespace`` and its
own name) paused and resumed way A; custom (freeform) tools round trip on an Anthropic target and on
the chat surface; the hosted ``web_search`` mapped to Anthropic's web search and Gemini's Google Search,
dropped with a warning where a target has none, refused by the route option; and what Codex CLI
itself sent (``tests/fixtures/codex/session.json``) answered on an Anthropic target.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.e2e.conftest import KEY, Gateway, gateway_config
from tests.e2e.test_responses import create, kinds
from tests.fakes.tool_server import ToolServer
from tests.fakes.upstream import FakeUpstream, Reply

MODELS = """
  tools_openai: {targets: [{provider: primary, model: gpt-x}], tools: [get_weather]}
  tools_claude: {targets: [{provider: claude, model: claude-sonnet-4-5}], tools: [get_weather]}
  tools_gemini: {targets: [{provider: gemini, model: gemini-3-pro-preview}], tools: [get_weather]}
  tools_gemini25: {targets: [{provider: gemini, model: gemini-2.5-pro}], tools: [get_weather]}
  tools_drop: {targets: [{provider: claude, model: claude-sonnet-4-5}], hosted_tools: drop}
  tools_refuse:
    targets: [{provider: claude, model: claude-sonnet-4-5}, {provider: primary, model: gpt-x}]
    hosted_tools: refuse
  tools_clash: {targets: [{provider: primary, model: gpt-x}], tools: [multi_agent_v1__spawn_agent]}
"""
# A server tool whose name is what a namespaced caller tool is offered as: a clash.
CLASHING_TOOL = """  multi_agent_v1__spawn_agent:
    description: A server tool named like a namespaced one
    python: "tests.e2e.sample_tools:add"
models:
"""
AGENTS = {"type": "namespace", "name": "multi_agent_v1", "description": "Tools for sub-agents.", "tools": [
    {"type": "function", "name": "spawn_agent", "description": "Spawn an agent.", "strict": False,
     "parameters": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}},
    {"type": "function", "name": "close_agent", "description": "Close an agent.",
     "parameters": {"type": "object", "properties": {"target": {"type": "string"}}}}]}
PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files with a patch.",
         "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch" /(.|\\n)*/'}}
SEARCH = {"type": "web_search", "external_web_access": True}
PATCH_TEXT = "*** Begin Patch\n*** Update File: a.py\n@@\n-x = 1\n+x = 2\n*** End Patch"
CODEX = orjson.loads((Path(__file__).resolve().parents[1] / "fixtures" / "codex" / "session.json").read_bytes())


@pytest.fixture(scope="module")
def gateway(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> Iterator[Gateway]:
    config = gateway_config(fakes, tool_server=tool_server.url, extra_models=MODELS)
    config = config.replace("\nmodels:\n", "\n" + CLASHING_TOOL, 1)
    gw = Gateway(config).start()
    yield gw
    gw.stop()


def dump(items: Any) -> list[dict[str, Any]]:
    return [item.model_dump(exclude_none=True) for item in items]


# --- namespace tools --------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_namespaced_call_pauses_and_resumes_way_a(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                  stream: bool) -> None:
    user = {"role": "user", "content": "Spawn a helper, then check the weather in Oslo."}
    fakes["primary"].queue(Reply(text="Spawning.", tool_calls=[("multi_agent_v1__spawn_agent", {"message": "help"})]))
    first = create(gateway, stream, model="tools_openai", input=[user], tools=[AGENTS], store=False)
    assert kinds(first) == ["message", "function_call"]
    call = first.output[-1]
    assert (call.name, call.namespace) == ("spawn_agent", "multi_agent_v1")
    assert orjson.loads(call.arguments) == {"message": "help"}
    assert first.model_extra["gateway"]["status"] == "paused"
    offered = {tool["function"]["name"]: tool["function"] for tool in fakes["primary"].requests[-1].body["tools"]}
    assert offered["multi_agent_v1__spawn_agent"]["description"] == "Tools for sub-agents.\n\nSpawn an agent."
    assert {"get_weather", "multi_agent_v1__close_agent"} <= offered.keys()

    # Codex's way: every item back (the call with its namespace), the output by call id.
    fakes["primary"].queue(Reply(tool_calls=[("get_weather", {"city": "Oslo"})]), Reply(text="Helper up; Oslo mild."))
    second = create(gateway, stream, model="tools_openai", tools=[AGENTS], store=False, input=[
        user, *dump(first.output), {"type": "function_call_output", "call_id": call.call_id, "output": "agent-7"}])
    assert second.output_text.endswith("Helper up; Oslo mild.") and kinds(second)[-1] == "message"
    assert second.model_extra["gateway"]["status"] == "completed"
    resumed = fakes["primary"].requests[-2].body["messages"]
    assert resumed[-2]["tool_calls"][0]["function"]["name"] == "multi_agent_v1__spawn_agent"
    assert resumed[-1] == {"role": "tool", "tool_call_id": call.call_id, "content": "agent-7"}


def test_namespaced_call_resumes_by_previous_response_id(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("multi_agent_v1__close_agent", {"target": "agent-7"})]))
    first = gateway.client().responses.create(model="tools_openai", input="Close agent-7.", tools=[AGENTS])
    call = first.output[0]
    assert (call.type, call.name, call.namespace) == ("function_call", "close_agent", "multi_agent_v1")
    fakes["primary"].queue(Reply(text="Closed."))
    second = gateway.client().responses.create(model="tools_openai", previous_response_id=first.id, tools=[AGENTS],
                                               input=[{"type": "function_call_output", "call_id": call.call_id,
                                                       "output": "closed"}])
    assert second.output_text == "Closed."
    assert fakes["primary"].requests[-1].body["messages"][-1]["content"] == "closed"


def test_a_namespaced_tool_named_like_a_server_tool_is_refused(gateway: Gateway) -> None:
    response = gateway.post("/v1/responses", {"model": "tools_clash", "input": "hi", "tools": [AGENTS]})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "tools[0].tools[0]" and "multi_agent_v1__spawn_agent" in error["message"]


# --- custom tools -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_custom_tool_round_trip_on_anthropic(gateway: Gateway, fakes: dict[str, FakeUpstream], stream: bool) -> None:
    fakes["claude"].queue(Reply(text="Patching.", tool_calls=[("apply_patch", {"input": PATCH_TEXT})]))
    first = create(gateway, stream, model="tools_claude", input="Set x to 2 in a.py", tools=[PATCH])
    assert kinds(first) == ["message", "custom_tool_call"]
    call = first.output[-1]
    assert (call.name, call.input) == ("apply_patch", PATCH_TEXT) and call.call_id.startswith("toolu_")
    tool = next(t for t in fakes["claude"].requests[-1].body["tools"] if t["name"] == "apply_patch")
    assert tool["input_schema"]["properties"]["input"]["type"] == "string"
    assert "lark grammar" in tool["description"] and '"*** Begin Patch"' in tool["description"]

    fakes["claude"].queue(Reply(text="x is now 2."))
    second = create(gateway, stream, model="tools_claude", previous_response_id=first.id, tools=[PATCH], input=[
        {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "Success. Updated a.py"}])
    assert second.output_text == "x is now 2."
    sent = fakes["claude"].requests[-1].body["messages"]
    assert sent[-2]["content"][-1] == {"type": "tool_use", "id": call.call_id, "name": "apply_patch",
                                       "input": {"input": PATCH_TEXT}}
    assert sent[-1]["content"][0]["tool_use_id"] == call.call_id


def test_custom_tool_on_the_chat_surface(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    tool = {"type": "custom", "custom": {"name": "apply_patch", "description": "Edit files.",
                                         "format": {"type": "grammar", "grammar": {"syntax": "lark",
                                                                                  "definition": "start: /.+/"}}}}
    user = {"role": "user", "content": "Set x to 2."}
    fakes["primary"].queue(Reply(tool_calls=[("apply_patch", {"input": PATCH_TEXT})]))
    first = gateway.client().chat.completions.create(model="tools_openai", messages=[user], tools=[tool])
    call = first.choices[0].message.tool_calls[0]
    assert call.type == "custom" and (call.custom.name, call.custom.input) == ("apply_patch", PATCH_TEXT)
    sent_tool = next(t for t in fakes["primary"].requests[-1].body["tools"] if t["function"]["name"] == "apply_patch")
    assert sent_tool["type"] == "function"  # not OpenAI's own API: the function form
    fakes["primary"].queue(Reply(text="Done."))
    second = gateway.client().chat.completions.create(model="tools_openai", tools=[tool], messages=[
        user, first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "patched"}])
    assert second.choices[0].message.content == "Done."
    history = fakes["primary"].requests[-1].body["messages"]
    assert history[1]["tool_calls"][0]["function"] == {"name": "apply_patch",
                                                       "arguments": orjson.dumps({"input": PATCH_TEXT}).decode()}

    # Streamed, the paused call is a ``custom`` tool-call fragment.
    fakes["primary"].queue(Reply(tool_calls=[("apply_patch", {"input": PATCH_TEXT})]))
    streamed = gateway.post("/v1/chat/completions", {"model": "tools_openai", "messages": [user], "tools": [tool],
                                                     "stream": True})
    chunks = [orjson.loads(line[6:]) for line in streamed.text.splitlines()
              if line.startswith("data: {") and '"choices":[{' in line]
    fragments = [call for chunk in chunks for call in chunk["choices"][0]["delta"].get("tool_calls") or ()]
    assert [(f["type"], f["custom"]) for f in fragments] == [("custom", {"name": "apply_patch", "input": PATCH_TEXT})]


# --- hosted tools ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_web_search_mapped_to_anthropic(gateway: Gateway, fakes: dict[str, FakeUpstream], stream: bool) -> None:
    fakes["claude"].queue(Reply(text="Loopgate 2.0 is out.", web_search=[("loopgate release",
                                                                          ["https://example.com/loopgate"])]))
    response = create(gateway, stream, model="tools_claude", input="What is new in Loopgate?",
                      tools=[SEARCH, AGENTS], include=["web_search_call.action.sources"])
    assert kinds(response) == ["web_search_call", "message"]
    search = response.output[0]
    assert search.status == "completed" and search.action.query == "loopgate release"
    assert [source.url for source in search.action.sources] == ["https://example.com/loopgate"]
    assert response.output_text == "Loopgate 2.0 is out." and "warnings" not in response.model_extra["gateway"]
    body = fakes["claude"].requests[-1].body
    assert {"type": "web_search_20250305", "name": "web_search"} in body["tools"]
    if stream:
        events = response.__dict__["_events"]
        assert events.index("response.web_search_call.searching") < events.index("response.output_text.delta")

    # The next turn resends the search item (Codex keeps the state): read, and left out of the transcript.
    fakes["claude"].queue(Reply(text="You are welcome."))
    again = create(gateway, stream, model="tools_claude", tools=[SEARCH], store=False, input=[
        {"role": "user", "content": "What is new in Loopgate?"}, *dump(response.output),
        {"role": "user", "content": "Thanks"}])
    assert again.output_text == "You are welcome."
    assert [m["role"] for m in fakes["claude"].requests[-1].body["messages"]] == ["user", "assistant", "user"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_web_search_mapped_to_gemini_beside_functions(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                      stream: bool) -> None:
    fakes["gemini"].queue(Reply(web_search=[("weather in paris", ["https://meteo.example/paris"])],
                                tool_calls=[("get_weather", {"city": "Paris"})]),
                          Reply(text="Paris is sunny."))
    response = create(gateway, stream, model="tools_gemini", input="Weather in Paris?", tools=[SEARCH])
    assert "web_search_call" in kinds(response) and kinds(response)[-2:] == ["mcp_call", "message"]
    search = next(item for item in response.output if item.type == "web_search_call")
    assert search.action.query == "weather in paris" and not getattr(search.action, "sources", None)
    first, second = (recorded.body for recorded in fakes["gemini"].requests[-2:])
    assert first["tools"][1] == {"googleSearch": {}} and first["toolConfig"]["includeServerSideToolInvocations"]
    model_turn = second["contents"][1]["parts"]
    assert "toolCall" in model_turn[0] and "toolResponse" in model_turn[1] and "functionCall" in model_turn[2]
    assert response.output_text == "Paris is sunny."


def test_web_search_dropped_with_a_warning(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["gemini"].queue(Reply(text="No search here."))
    response = gateway.client().responses.create(model="tools_gemini25", input="Search the web", tools=[SEARCH])
    assert response.output_text == "No search here."
    assert response.model_extra["gateway"]["warnings"] == [{
        "type": "hosted_tools_dropped", "target": "gemini:gemini-2.5-pro", "tools": ["web_search"],
        "message": response.model_extra["gateway"]["warnings"][0]["message"]}]
    assert "googleSearch" not in orjson.dumps(fakes["gemini"].requests[-1].body).decode()

    fakes["primary"].queue(Reply(text="Plain."))
    plain = gateway.client().responses.create(model="tools_openai", input="hi",
                                              tools=[SEARCH, {"type": "file_search", "vector_store_ids": ["vs_1"]}])
    assert plain.model_extra["gateway"]["warnings"][0]["tools"] == ["web_search", "file_search"]
    assert "web_search" not in orjson.dumps(fakes["primary"].requests[-1].body).decode()

    fakes["claude"].queue(Reply(text="Not mapped."))
    dropped = gateway.client().responses.create(model="tools_drop", input="hi", tools=[SEARCH])
    assert dropped.model_extra["gateway"]["warnings"][0]["target"] == "claude:claude-sonnet-4-5"
    assert "tools" not in fakes["claude"].requests[-1].body


def test_the_route_option_refuses_hosted_tools(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    response = gateway.post("/v1/responses", {"model": "tools_refuse", "input": "hi",
                                              "tools": [{"type": "function", "name": "f"}, SEARCH]})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "tools[1]" and "primary:gpt-x" in error["message"] and "refuse" in error["message"]
    assert fakes["claude"].requests == [] and fakes["primary"].requests == []
    fakes["claude"].queue(Reply(text="Fine."))
    assert gateway.client().responses.create(model="tools_refuse", input="hi").output_text == "Fine."


# --- what Codex CLI sent ----------------------------------------------------------------------------------


def test_codex_requests_on_an_anthropic_target(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    first, follow_up = (request["body"] for request in CODEX["requests"][:2])
    fakes["claude"].queue(Reply(tool_calls=[("exec_command", {"cmd": "echo loopgate-ok"})]), Reply(text="loopgate-ok"))
    for body in (first, follow_up):
        with httpx.stream("POST", f"{gateway.url}/v1/responses", json={**body, "model": "tools_claude"}, timeout=20,
                          headers={"authorization": f"Bearer {KEY}", "x-codex-beta-features": "remote_compaction_v2"}
                          ) as answer:
            assert answer.status_code == 200
            events = [line.removeprefix("event: ") for line in answer.iter_lines() if line.startswith("event: ")]
        assert events[0] == "response.created" and events[-1] == "response.completed"
    sent = fakes["claude"].requests[0].body
    names = [tool["name"] for tool in sent["tools"]]
    assert "multi_agent_v1__spawn_agent" in names and "exec_command" in names
    assert {"type": "web_search_20250305", "name": "web_search"} in sent["tools"]
    assert sent["system"] and sent["messages"][0]["role"] == "user"
    answered = fakes["claude"].requests[1].body["messages"]
    assert answered[-1]["content"][0]["type"] == "tool_result"
