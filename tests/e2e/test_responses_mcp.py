"""``mcp_call`` items name the MCP server a server tool came from (``server_label``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.conftest import Gateway, gateway_config
from tests.e2e.test_mcp import ThreadedMcp
from tests.fakes.upstream import FakeUpstream, Reply


@pytest.fixture(scope="module")
def calc_gateway(fakes: dict[str, FakeUpstream]) -> Iterator[Gateway]:
    mcp = ThreadedMcp()
    servers = f"mcp_servers:\n  calc: {{url: '{mcp.server.url}', timeout_s: 5}}\n"
    routes = "  mcp_agent:\n    targets: [{provider: primary, model: m}]\n    tools: [get_weather, 'mcp:calc']\n"
    gw = Gateway(gateway_config(fakes, extra_models=routes).replace("models:\n", servers + "models:\n", 1)).start()
    yield gw
    gw.stop()
    mcp.stop()


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
def test_mcp_calls_carry_the_server_label(calc_gateway: Gateway, fakes: dict[str, FakeUpstream],
                                          stream: bool) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("mixed", {}), ("fail", {}), ("get_weather", {"city": "Oslo"})]),
                           Reply(text="Here is the chart."))
    client = calc_gateway.client()
    if stream:
        with client.responses.stream(model="mcp_agent", input="Draw the chart.") as events:
            for _ in events:
                pass
            response = events.get_final_response()
    else:
        response = client.responses.create(model="mcp_agent", input="Draw the chart.")
    calls = {item.name: item for item in response.output if item.type == "mcp_call"}
    assert {name: call.server_label for name, call in calls.items()} == {
        "mixed": "calc", "fail": "calc", "get_weather": "loopgate"}
    assert calls["mixed"].status == "completed" and calls["mixed"].output.startswith("a chart:")
    assert calls["fail"].status == "failed" and calls["fail"].error.content == "boom: the tool failed"
    assert response.output_text == "Here is the chart."
