"""The OpenAI Agents SDK, with its default Responses model, pointed at Loopgate over real HTTP.

``OpenAIResponsesModel`` is what ``Agent(model="...")`` uses by default; it resends the whole
conversation on every turn (no ``previous_response_id``), so the function-tool round trip also
proves that Loopgate accepts its own output items coming back as input. Tracing export is off:
no network besides the gateway.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from tests.e2e.conftest import Gateway
from tests.fakes.upstream import FakeUpstream, Reply
from tests.lazy import lazy_import

if importlib.util.find_spec("agents") is None:
    pytest.skip("the OpenAI Agents SDK is not installed (pip install -e '.[test]')", allow_module_level=True)
agents = lazy_import("agents")  # imported by the worker that runs these tests (tests/lazy.py)
CALLS: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def _no_tracing_export() -> None:
    agents.set_tracing_disabled(True)


def local_time(city: str) -> str:
    """The local time in a city."""
    CALLS.append(city)
    return f"12:00 in {city}"


def _model(gateway: Gateway, route: str) -> Any:
    return agents.OpenAIResponsesModel(model=route, openai_client=gateway.async_client())


async def test_agent_with_a_function_tool_runs_to_completion(gateway: Gateway,
                                                             fakes: dict[str, FakeUpstream]) -> None:
    CALLS.clear()
    fakes["primary"].queue(Reply(tool_calls=[("local_time", {"city": "Paris"})]), Reply(text="It is noon in Paris."))
    agent = agents.Agent(name="clock", instructions="Answer with the local time.",
                         tools=[agents.function_tool(local_time)], model=_model(gateway, "plain"))
    result = await agents.Runner.run(agent, "What time is it in Paris?")
    assert result.final_output == "It is noon in Paris."
    assert CALLS == ["Paris"]  # the SDK ran its own tool, once
    # The second model call saw the tool call and its result, paired, after the system instructions.
    second = fakes["primary"].bodies[1]["messages"]
    assert second[0] == {"role": "system", "content": "Answer with the local time."}
    assert [m["role"] for m in second[1:]] == ["user", "assistant", "tool"]
    assert second[-1]["content"] == "12:00 in Paris"
    assert second[2]["tool_calls"][0]["function"]["name"] == "local_time"


async def test_agent_on_a_route_with_a_server_tool_runs_to_completion(gateway: Gateway,
                                                                      fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("get_weather", {"city": "Oslo"})]), Reply(text="Oslo is sunny."))
    agent = agents.Agent(name="weather", instructions="Use your tools.", model=_model(gateway, "agent"))
    result = await agents.Runner.run(agent, "Weather in Oslo?")
    assert result.final_output == "Oslo is sunny."
    # The gateway ran the tool itself: the second upstream call carries its result.
    second = fakes["primary"].bodies[1]["messages"]
    assert second[-1]["role"] == "tool" and "Oslo: 18C, sunny" in second[-1]["content"]
    # The agent sees the server tool as an mcp_call item in the model's output.
    types = [item.type for item in result.raw_responses[0].output]
    assert types == ["mcp_call", "message"]


async def test_agent_multi_turn_resends_everything(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("get_weather", {"city": "Rome"})]), Reply(text="Rome: sunny."),
                           Reply(text="Yes, take sunglasses."))
    agent = agents.Agent(name="weather", instructions="Use your tools.", model=_model(gateway, "agent"))
    first = await agents.Runner.run(agent, "Weather in Rome?")
    follow_up = await agents.Runner.run(agent, [*first.to_input_list(), {"role": "user", "content": "Sunglasses?"}])
    assert follow_up.final_output == "Yes, take sunglasses."
    # The mcp_call item came back as input: the model sees the earlier exchange, paired.
    third = fakes["primary"].bodies[2]["messages"]
    assert [m["role"] for m in third] == ["system", "user", "assistant", "tool", "assistant", "user"]
