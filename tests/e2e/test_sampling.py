"""Sampling through the gateway, end to end: a running tool asks the client's model, on the server's route.

The tool (``tests.e2e.sample_tools:ask_model``) awaits the loop's sampling handler exactly as an MCP
source does when its server sends ``sampling/createMessage``. The request runs on the server's
``sampling_route`` (here answered by the fake ``secondary`` upstream) through the lifecycle of the key
whose call it is: usage rows, access records and its budget are that key's.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.asking import ADMIN, SAMPLER_KEY, asking_gateway, last_tool_result, usage_totals
from tests.e2e.conftest import Gateway
from tests.fakes.upstream import FakeUpstream, Reply


@pytest.fixture(scope="module")
def gw(fakes: dict[str, FakeUpstream]) -> Iterator[Gateway]:
    yield from asking_gateway(fakes)


def test_a_tool_asks_the_model_and_the_asking_key_pays(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("ask_model", {"prompt": "Say hi", "hint": "cheap"})],
                                 usage=(100, 10)),
                           Reply(text="The model said hi.", usage=(120, 5)))
    fakes["secondary"].queue(Reply(text="hi there", usage=(30, 3)))
    done = gw.client(SAMPLER_KEY).chat.completions.create(model="ask", messages=[{"role": "user", "content": "go"}])
    assert done.model_extra["gateway"]["status"] == "completed"
    # Translated, on the route's target the hint names, without tools, max_tokens capped (5000 -> 64).
    [sampled] = fakes["secondary"].bodies
    assert sampled["model"] == "small-cheap-model" and "tools" not in sampled
    assert sampled["max_tokens"] == 64
    assert sampled["messages"] == [{"role": "system", "content": "Answer briefly."},
                                   {"role": "user", "content": "Say hi"}]
    assert last_tool_result(fakes["primary"]) == "small-cheap-model said 'hi there' (endTurn)"
    # The chat request and the sampling request, both the asking key's (its tenant's rows), tokens included.
    totals = usage_totals(gw, ADMIN, "samplers", 2)
    assert totals == {"requests": 2, "prompt_tokens": 100 + 120 + 30, "completion_tokens": 10 + 5 + 3}
    metrics = httpx.get(f"{gw.url}/metrics").text
    assert 'path="/mcp/sampling",model="sampling_target",status="200"' in metrics


def test_sampling_is_refused_for_a_server_without_a_route(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("ask_model", {"prompt": "Say hi", "server": "asker"})]),
                           Reply(text="no"))
    gw.client(SAMPLER_KEY).chat.completions.create(model="ask", messages=[{"role": "user", "content": "go"}])
    assert last_tool_result(fakes["primary"]) == "refused: server 'asker' has no sampling_route"
    assert fakes["secondary"].bodies == []


def test_a_failing_route_is_a_refusal_the_tool_sees(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("ask_model", {"prompt": "Say hi"})]), Reply(text="oh well"))
    fakes["secondary"].queue(*[Reply(status=400, error_body={"error": {"message": "bad"}})] * 4)
    gw.client(SAMPLER_KEY).chat.completions.create(model="ask", messages=[{"role": "user", "content": "go"}])
    assert last_tool_result(fakes["primary"]).startswith("refused: ")
