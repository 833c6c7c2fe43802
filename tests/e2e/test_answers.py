"""What a response says about who answered (``model``, ``gateway.route``) and how lenient stream parsing is.

Wrong-shaped answers that fail over are in the fault matrix of test_failover.py.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import orjson
import pytest

from tests.e2e.conftest import PROVIDER_MODELS, Gateway
from tests.e2e.test_continuations import LOOKUP
from tests.fakes.upstream import FakeUpstream, Reply

USER = [{"role": "user", "content": "What's the weather in Paris?"}]
HEADERS = {"authorization": "Bearer test-key"}


def chat(gateway: Gateway, body: dict[str, Any]) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """(the completion, []) or (None, every chunk of the stream) for one request over raw HTTP."""
    response = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, headers=HEADERS, timeout=20)
    assert response.status_code == 200, response.text
    if not body.get("stream"):
        return response.json(), []
    lines = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return None, [orjson.loads(line) for line in lines[:-1]]


def summary(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    return next(c["gateway"] for c in chunks if "iterations" in c.get("gateway", {}))


def text_of(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
def test_model_is_the_upstream_model_and_the_route_is_in_gateway(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                                 stream: bool) -> None:
    fakes["primary"].queue(Reply(text="Sunny."))
    completion, chunks = chat(gateway, {"model": "plain", "messages": USER, "stream": stream,
                                        "stream_options": {"include_usage": True}} if stream else
                              {"model": "plain", "messages": USER})
    if completion is not None:
        assert completion["model"] == "up-model"  # as OpenAI's: the model that answered, not the route
        assert completion["gateway"]["route"] == "plain"
        return
    assert text_of(chunks) == "Sunny."
    assert {c["model"] for c in chunks} == {"up-model"}  # every chunk, usage and summary included
    assert summary(chunks)["route"] == "plain"
    assert any(c.get("usage") for c in chunks)


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
def test_a_loop_answered_by_two_targets(gateway: Gateway, fakes: dict[str, FakeUpstream], stream: bool) -> None:
    """Each chunk names the model that produced it; the response (and the stream's end) the final call's."""
    fakes["primary"].queue(Reply(tool_calls=[("get_weather", {"city": "Paris"})]), Reply(status=500))
    fakes["secondary"].queue(Reply(text="Secondary finished it."))
    completion, chunks = chat(gateway, {"model": "agent_failover", "messages": USER, "stream": stream})
    if completion is not None:
        assert completion["model"] == "m2"
        assert completion["gateway"]["answered_by"] == ["primary:m1", "secondary:m2"]
        assert completion["gateway"]["route"] == "agent_failover"
        return
    models = [c["model"] for c in chunks]
    first_text = next(i for i, c in enumerate(chunks) if c.get("choices") and c["choices"][0]["delta"].get("content"))
    tool_events = [i for i, c in enumerate(chunks) if c.get("gateway", {}).get("event")]
    assert tool_events and all(models[i] == "m1" for i in tool_events)  # the turn m1 answered
    assert models[0] == "m1" and set(models[first_text:]) == {"m2"}
    assert text_of(chunks) == "Secondary finished it."


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
def test_a_paused_response_names_the_model_of_the_paused_turn(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                              stream: bool) -> None:
    fakes["primary"].queue(Reply(status=500))
    fakes["secondary"].queue(Reply(text="Let me look.", tool_calls=[("lookup", {"q": "x"})]))
    body = {"model": "agent_failover", "messages": USER, "tools": LOOKUP, "stream": stream}
    completion, chunks = chat(gateway, body)
    if completion is None:
        assert {c["model"] for c in chunks} == {"m2"}
        assert summary(chunks)["status"] == "paused" and summary(chunks)["route"] == "agent_failover"
        return
    assert completion["model"] == "m2" and completion["gateway"]["status"] == "paused"
    # Resumed (way A): the answer now comes from the first target again, and the response says so.
    fakes["primary"].queue(Reply(text="Found it."))
    message = completion["choices"][0]["message"]
    follow_up = [*USER, {k: v for k, v in message.items() if k != "reasoning_content"},
                 {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "x=1"}]
    done, _ = chat(gateway, {"model": "agent_failover", "messages": follow_up, "tools": LOOKUP})
    assert done is not None and done["choices"][0]["message"]["content"] == "Found it."
    assert done["model"] == "m1" and done["gateway"]["route"] == "agent_failover"


def test_a_streamed_way_b_resume_names_models_from_its_first_chunk(gateway: Gateway,
                                                                   fakes: dict[str, FakeUpstream]) -> None:
    """The approved tool runs before any model call: its chunks belong to the paused turn's model."""
    fakes["primary"].queue(Reply(tool_calls=[("delete_remote", {"id": "42"})]))
    paused, _ = chat(gateway, {"model": "agent", "messages": USER})
    assert paused is not None and paused["model"] == "up-model"
    pending = paused["gateway"]["pending"][0]["tool_call_id"]
    fakes["primary"].queue(Reply(text="Deleted record 42."))
    response = httpx.post(f"{gateway.url}/v1/continuations/{paused['gateway']['continuation_id']}", headers=HEADERS,
                          json={"stream": True, "decisions": [{"tool_call_id": pending, "approve": True}]},
                          timeout=20)
    assert response.status_code == 200, response.text
    chunks = [orjson.loads(line[6:]) for line in response.text.splitlines()
              if line.startswith("data: ") and line != "data: [DONE]"]
    assert text_of(chunks) == "Deleted record 42."
    assert {c["model"] for c in chunks} == {"up-model"}  # never the route name
    assert summary(chunks)["route"] == "agent"


def malformed_count(gateway: Gateway, target: str) -> float:
    metrics = httpx.get(f"{gateway.url}/metrics").text
    found = re.search(rf'^loopgate_upstream_malformed_events_total\{{target="{re.escape(target)}"\}} (\S+)$', metrics,
                      re.MULTILINE)
    return float(found.group(1)) if found else 0.0


@pytest.mark.parametrize("provider", list(PROVIDER_MODELS))
def test_malformed_events_mid_stream_are_skipped_and_counted(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                             provider: str) -> None:
    """Not JSON, then JSON of the wrong shape, in the middle of a stream: the answer is still whole."""
    target = f"{provider}:{PROVIDER_MODELS[provider]}"
    before = malformed_count(gateway, target)
    fakes[provider].queue(Reply(text="Paris is sunny today.", fault="malformed_event"))
    _, chunks = chat(gateway, {"model": f"solo_{provider}", "messages": USER, "stream": True})
    assert not [c for c in chunks if "error" in c]
    assert text_of(chunks) == "Paris is sunny today."
    assert summary(chunks)["status"] == "completed" and summary(chunks)["attempts"][0]["error_class"] is None
    assert malformed_count(gateway, target) == before + 2


@pytest.mark.parametrize("provider", list(PROVIDER_MODELS))
def test_a_stream_of_only_wrong_shaped_events_fails_over(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                         provider: str) -> None:
    other = "claude" if provider == "primary" else "primary"
    fakes[provider].queue(Reply(text="x", fault="wrong_shape"))
    fakes[other].queue(Reply(text="From the fallback."))
    _, chunks = chat(gateway, {"model": f"chain_{provider}_{other}", "messages": USER, "stream": True})
    assert text_of(chunks) == "From the fallback."
    assert [a["error_class"] for a in summary(chunks)["attempts"]] == ["invalid_response", None]
    assert {c["model"] for c in chunks} == {PROVIDER_MODELS[other]}


@pytest.mark.parametrize("provider", list(PROVIDER_MODELS))
def test_a_stream_whose_only_content_event_is_malformed_fails_over(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                                   provider: str) -> None:
    """Every other event valid, the finish included: was a 200 with an empty answer (issue 29)."""
    other = "claude" if provider == "primary" else "primary"
    fakes[provider].queue(Reply(text="Zzyzx", fault="malformed_content"))
    fakes[other].queue(Reply(text="From the fallback."))
    _, chunks = chat(gateway, {"model": f"chain_{provider}_{other}", "messages": USER, "stream": True})
    assert text_of(chunks) == "From the fallback."
    assert [a["error_class"] for a in summary(chunks)["attempts"]] == ["invalid_response", None]


def test_a_lone_stream_whose_only_content_event_is_malformed_is_an_error_not_an_empty_answer(
        gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="Zzyzx", fault="malformed_content"))
    response = httpx.post(f"{gateway.url}/v1/chat/completions", json={"model": "plain", "messages": USER,
                                                                      "stream": True}, headers=HEADERS, timeout=20)
    assert response.status_code == 502, response.text
    assert "delivered nothing valid" in response.json()["error"]["message"]
