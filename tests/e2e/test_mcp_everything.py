"""The reference MCP server (server-everything) behind a real gateway, over stdio and Streamable HTTP.

Driven by the ``openai`` SDK with the upstream models faked at the HTTP level: its tools are listed
to the model and run server-side (echo, sum, structured content), its tiny image reaches an
Anthropic-format upstream as an image block and a Gemini 3 one as an inline part while an OpenAI
chat upstream reads a description, and a long-running operation's progress shows in a chat stream
(gateway events) and a Responses stream (``response.mcp_call.in_progress``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import Gateway, gateway_config
from tests.fakes.everything import EverythingHttp, everything_command
from tests.fakes.upstream import FakeUpstream, Reply

USER = [{"role": "user", "content": "Use the tools."}]
LONG_RUN = ("trigger-long-running-operation", {"duration": 1, "steps": 4})


@pytest.fixture(scope="module", params=["stdio", "http"])
def everything(request: pytest.FixtureRequest, fakes: dict[str, FakeUpstream]) -> Iterator[Gateway]:
    http = None
    if request.param == "stdio":
        node, entry, transport = everything_command()
        server = f"{{command: ['{node}', '{entry}', '{transport}'], timeout_s: 30}}"
    else:
        http = EverythingHttp()
        server = f"{{url: '{http.url}', timeout_s: 30}}"
    routes = ("  ev_gpt: {targets: [{provider: primary, model: m}], tools: ['mcp:ev']}\n"
              "  ev_claude: {targets: [{provider: claude, model: claude-sonnet-4-5}], tools: ['mcp:ev']}\n"
              "  ev_gemini: {targets: [{provider: gemini, model: gemini-3-pro-preview}], tools: ['mcp:ev']}\n")
    servers = f"mcp_servers:\n  ev: {server}\nmodels:\n"
    config = gateway_config(fakes, extra_models=routes).replace("models:\n", servers, 1)
    gw = Gateway(config).start()
    yield gw
    gw.stop()
    if http is not None:
        http.stop()


def tool_messages(body: dict[str, Any]) -> list[Any]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def test_its_tools_are_listed_and_run_from_a_route(everything: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("echo", {"message": "hello"}), ("get-sum", {"a": 2, "b": 3}),
                                             ("get-structured-content", {"location": "Chicago"})]),
                           Reply(text="All done."))
    completion = everything.client().chat.completions.create(model="ev_gpt", messages=USER)
    assert completion.choices[0].message.content == "All done."
    listed = {t["function"]["name"]: t["function"] for t in fakes["primary"].bodies[0]["tools"]}
    assert {"echo", "get-sum", "get-tiny-image", "trigger-long-running-operation",
            "trigger-elicitation-request"} <= set(listed)
    # The output schema is part of the tool's description, so the model knows the JSON it will read.
    assert '"humidity"' in listed["get-structured-content"]["description"]
    assert tool_messages(fakes["primary"].bodies[1]) == [
        "Echo: hello", "The sum of 2 and 3 is 5.",
        '{"temperature":36,"conditions":"Light rain / drizzle","humidity":82}']
    assert [c["status"] for c in completion.model_extra["gateway"]["tool_calls"]] == ["ok", "ok", "ok"]


def test_the_tiny_image_is_an_image_block_for_anthropic(everything: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["claude"].queue(Reply(tool_calls=[("get-tiny-image", {})]), Reply(text="A tiny image."))
    completion = everything.client().chat.completions.create(model="ev_claude", messages=USER)
    assert completion.choices[0].message.content == "A tiny image."
    results = [block for message in fakes["claude"].bodies[1]["messages"] if isinstance(message["content"], list)
               for block in message["content"] if block.get("type") == "tool_result"]
    (result,) = results
    images = [block for block in result["content"] if block["type"] == "image"]
    assert len(images) == 1 and images[0]["source"]["type"] == "base64"
    assert images[0]["source"]["media_type"] == "image/png" and len(images[0]["source"]["data"]) > 100


def test_the_tiny_image_is_an_inline_part_for_gemini_3(everything: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["gemini"].queue(Reply(tool_calls=[("get-tiny-image", {})]), Reply(text="A tiny image."))
    everything.client().chat.completions.create(model="ev_gemini", messages=USER)
    responses = [part["functionResponse"] for content in fakes["gemini"].bodies[1]["contents"]
                 for part in content["parts"] if "functionResponse" in part]
    (response,) = responses
    assert [part["inlineData"]["mimeType"] for part in response["parts"]] == ["image/png"]
    assert "[image: image/png," in str(response["response"]["output"])


def test_the_tiny_image_is_described_to_an_openai_chat_upstream(everything: Gateway,
                                                                fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("get-tiny-image", {})]), Reply(text="An image I cannot see."))
    everything.client().chat.completions.create(model="ev_gpt", messages=USER)
    (result,) = tool_messages(fakes["primary"].bodies[1])
    assert isinstance(result, str) and "[image: image/png," in result and "base64" not in result


def test_progress_shows_in_a_chat_stream(everything: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[LONG_RUN]), Reply(text="Finished."))
    stream = everything.client().chat.completions.create(model="ev_gpt", messages=USER, stream=True)
    events = [chunk.model_extra["gateway"] for chunk in stream if (chunk.model_extra or {}).get("gateway")]
    kinds = [event.get("event") for event in events]
    progress = [event for event in events if event.get("event") == "tool_progress"]
    assert progress, kinds
    assert kinds.index("tool_started") < kinds.index("tool_progress") < kinds.index("tool_finished")
    assert {event["name"] for event in progress} == {"trigger-long-running-operation"}
    assert all(event["total"] == 4 and 1 <= event["progress"] <= 4 for event in progress)


def test_progress_shows_in_a_responses_stream(everything: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[LONG_RUN]), Reply(text="Finished."))
    with everything.client().responses.stream(model="ev_gpt", input="Run it.") as stream:
        events = list(stream)
        response = stream.get_final_response()
    in_progress = [e for e in events if e.type == "response.mcp_call.in_progress"]
    reported = [e.model_extra["progress"] for e in in_progress if (e.model_extra or {}).get("progress")]
    assert reported and all(p["total"] == 4 for p in reported)
    (call,) = [item for item in response.output if item.type == "mcp_call"]
    assert call.server_label == "ev" and call.status == "completed"
    assert "Long running operation completed" in call.output
