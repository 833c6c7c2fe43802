"""Elicitation on a stateless MCP server (2026-07-28) is fully durable: any replica retries the call with the answer.

The server (the SDK's own server side, ``tests/fakes/sdk_mcp.py``) answers ``input_required`` with
its request state; the pause stores it. A decision on the replica that ran the call works as for any
server; a decision on another replica sends the retry from there, also when the first replica was
killed: no holder is needed. The tool's body runs exactly once (the server counts), and a second
decision is a 409.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import KEY, Gateway, gateway_config, two_replicas
from tests.fakes.sdk_mcp import StatelessServer
from tests.fakes.upstream import FakeUpstream, Reply

REDIS_URL = os.environ["LOOPGATE_TEST_REDIS_URL"]  # the suite's own server (tests/conftest.py)
GREET = ("greet", {"greeting": "Hello"})


@pytest.fixture(scope="module")
def server() -> Iterator[StatelessServer]:
    stateless = StatelessServer()
    yield stateless
    stateless.stop()


def config(fakes: dict[str, FakeUpstream], url: str, store_url: str = "memory://") -> str:
    routes = "  st_ask: {targets: [{provider: primary, model: m}], tools: ['mcp:st']}\n"
    text = gateway_config(fakes, store_url=store_url, extra_models=routes)
    return text.replace("models:\n", f"mcp_servers:\n  st: {{url: '{url}', timeout_s: 20}}\nmodels:\n", 1)


def ask(gw: Gateway, fakes: dict[str, FakeUpstream]) -> dict[str, Any]:
    fakes["primary"].queue(Reply(text="Let me greet them.", tool_calls=[GREET]))
    completion = gw.client().chat.completions.create(model="st_ask", messages=[{"role": "user", "content": "Hi!"}])
    extension: dict[str, Any] = completion.model_extra["gateway"]
    assert extension["status"] == "paused"
    [pending] = extension["pending"]
    assert pending["reason"] == "elicitation" and pending["elicitation"]["server"] == "st"
    assert pending["elicitation"]["message"] == "Whom should I greet with 'Hello'?"
    # The stored retry (the server's request state) is the gateway's own: never shown to a caller.
    shown = httpx.get(f"{gw.url}/v1/continuations/{extension['continuation_id']}",
                      headers={"authorization": f"Bearer {KEY}"}, timeout=20)
    assert shown.status_code == 200 and shown.json()["pending"][0]["reason"] == "elicitation"
    assert "request_state" not in shown.text and "retry" not in shown.json()["pending"][0]
    return extension


def decide(gw: Gateway, paused: dict[str, Any], name: str = "Ada") -> httpx.Response:
    call_id = paused["pending"][0]["tool_call_id"]
    return gw.post(f"/v1/continuations/{paused['continuation_id']}",
                   {"decisions": [{"tool_call_id": call_id, "action": "accept", "content": {"name": name}}]})


def completes(gw: Gateway, paused: dict[str, Any], fakes: dict[str, FakeUpstream], server: StatelessServer,
              runs_before: int) -> None:
    fakes["primary"].queue(Reply(text="Greeted."))
    decided = decide(gw, paused)
    assert decided.status_code == 200, decided.text
    assert decided.json()["choices"][0]["message"]["content"] == "Greeted."
    [result] = [m["content"] for m in fakes["primary"].bodies[-1]["messages"] if m["role"] == "tool"]
    assert result.startswith("Hello, Ada!")
    assert server.runs == runs_before + 1
    again = decide(gw, paused, "Bob")
    assert again.status_code == 409, again.text
    assert server.runs == runs_before + 1


def test_the_decision_on_the_same_replica(server: StatelessServer, fakes: dict[str, FakeUpstream]) -> None:
    gw = Gateway(config(fakes, server.url)).start()
    try:
        before = server.runs
        completes(gw, ask(gw, fakes), fakes, server, before)
    finally:
        gw.stop()


@pytest.fixture
def pair(server: StatelessServer, fakes: dict[str, FakeUpstream]) -> Iterator[tuple[Gateway, Gateway]]:
    yield from two_replicas(config(fakes, server.url, REDIS_URL), REDIS_URL, flush_after=True)


def test_a_second_replica_retries_the_call_after_the_first_was_killed(
        pair: tuple[Gateway, Gateway], server: StatelessServer, fakes: dict[str, FakeUpstream]) -> None:
    first, second = pair
    paused = ask(first, fakes)
    assert first.process is not None
    first.process.kill()  # a crash: nothing is reported, the held call is gone with the process
    first.process.wait(10)
    completes(second, paused, fakes, server, server.runs)


def test_a_second_replica_retries_the_call_while_the_first_still_holds_it(
        pair: tuple[Gateway, Gateway], server: StatelessServer, fakes: dict[str, FakeUpstream]) -> None:
    first, second = pair
    paused = ask(first, fakes)
    runs = server.runs
    completes(second, paused, fakes, server, runs)
    # The first replica's held call read the answer, lost the round's claim and ended without a retry of its own.
    deadline = time.monotonic() + 20
    while "another replica sends the retry" not in first.logs() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "another replica sends the retry" in first.logs()
    assert server.runs == runs + 1
