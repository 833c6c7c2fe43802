"""The asker gets the final answer of a pause someone else decided, on any replica (issue 29).

Two ``loopgate serve`` processes on one Redis: the asking key pauses on one, an approver key
decides on the other (as the inbox does), and the asker reads the result from the first, waiting
for it with ``?wait=N``. The result is the body the decider received, per the surface the pause
began on: a chat completion, an Anthropic message, or a Responses response.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.e2e.conftest import Gateway, gateway_config, two_replicas
from tests.fakes.upstream import FakeUpstream, Reply

REDIS_URL = os.environ["LOOPGATE_TEST_REDIS_URL"]  # the suite's own server (tests/conftest.py)
ASKER, APPROVER, STRANGER = "asker-key", "approver-key", "stranger-key"
AUTH = f"""auth:
  keys:
    - {{key: {ASKER}, tenant: team-a, name: asker}}
    - {{key: {APPROVER}, tenant: team-a, name: reviewer, role: approver}}
    - {{key: {STRANGER}, tenant: team-b, name: stranger}}
"""
ASK = [{"role": "user", "content": "Delete record 42"}]


@pytest.fixture(scope="module")
def replicas(fakes: dict[str, FakeUpstream]) -> Iterator[tuple[Gateway, Gateway]]:
    text = gateway_config(fakes, store_url=REDIS_URL).replace("auth:\n  keys:\n", AUTH, 1)
    yield from two_replicas(text, REDIS_URL, flush_after=True)


def call(gateway: Gateway, method: str, path: str, key: str, body: Any = None, **params: Any) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"}
    return httpx.request(method, f"{gateway.url}{path}", json=body, headers=headers, params=params, timeout=90)


def pause_chat(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> dict[str, Any]:
    fakes["primary"].queue(Reply(tool_calls=[("delete_record", {"id": "42"})]))
    paused = call(gateway, "POST", "/v1/chat/completions", ASKER, {"model": "agent", "messages": ASK})
    assert paused.status_code == 200, paused.text
    extension: dict[str, Any] = paused.json()["gateway"]
    assert extension["status"] == "paused"
    return extension


def approve(gateway: Gateway, extension: dict[str, Any], **body: Any) -> httpx.Response:
    decision = {"tool_call_id": extension["pending"][0]["tool_call_id"], "approve": True}
    return call(gateway, "POST", f"/v1/continuations/{extension['continuation_id']}", APPROVER,
                {"decisions": [decision], **body})


class Waiter(threading.Thread):
    """``GET /v1/continuations/{id}?wait=N`` from another thread, started before the decision."""

    def __init__(self, gateway: Gateway, continuation_id: str, wait: float = 60) -> None:
        super().__init__(daemon=True)
        self.args_ = (gateway, continuation_id, wait)
        self.response: httpx.Response | None = None
        self.took = 0.0

    def run(self) -> None:
        gateway, continuation_id, wait = self.args_
        started = time.monotonic()
        self.response = call(gateway, "GET", f"/v1/continuations/{continuation_id}", ASKER, wait=wait)
        self.took = time.monotonic() - started


def test_the_asker_waits_on_one_replica_for_a_decision_made_on_the_other(
        replicas: tuple[Gateway, Gateway], fakes: dict[str, FakeUpstream]) -> None:
    first, second = replicas
    extension = pause_chat(first, fakes)
    continuation_id = extension["continuation_id"]
    waiter = Waiter(first, continuation_id)
    waiter.start()
    time.sleep(0.3)  # let the wait begin (it polls the shared store; no timing is asserted)
    assert waiter.is_alive()
    fakes["primary"].queue(Reply(text="Record 42 deleted."))
    decided = approve(second, extension)
    assert decided.status_code == 200, decided.text
    waiter.join(60)
    assert waiter.response is not None and waiter.response.status_code == 200, waiter.response
    view = waiter.response.json()
    assert view["status"] == "resumed"
    assert view["result"] == decided.json()  # the very body the decider received
    assert view["result_id"] == decided.json()["id"] and view["result_object"] == "chat.completion"
    assert view["result"]["choices"][0]["message"]["content"] == "Record 42 deleted."
    # Read again later, on either replica, without waiting: the same result, for the continuation's TTL.
    for gateway in replicas:
        again = call(gateway, "GET", f"/v1/continuations/{continuation_id}", ASKER)
        assert again.json()["result"] == decided.json()
    # Tenant isolation: another tenant's key learns nothing, waiting or not.
    stranger = call(first, "GET", f"/v1/continuations/{continuation_id}", STRANGER, wait=1)
    assert stranger.status_code == 404


def test_a_streamed_decision_stores_the_same_answer_whole(replicas: tuple[Gateway, Gateway],
                                                          fakes: dict[str, FakeUpstream]) -> None:
    first, second = replicas
    extension = pause_chat(first, fakes)
    fakes["primary"].queue(Reply(text="Streamed and deleted."))
    streamed = approve(second, extension, stream=True)
    assert streamed.status_code == 200, streamed.text
    chunks = [orjson.loads(line[6:]) for line in streamed.text.splitlines()
              if line.startswith("data: ") and line != "data: [DONE]"]
    view = call(first, "GET", f"/v1/continuations/{extension['continuation_id']}", ASKER).json()
    result = view["result"]
    assert result["object"] == "chat.completion" and result["id"] == chunks[0]["id"]
    assert result["created"] == chunks[0]["created"]
    assert result["choices"][0]["message"]["content"] == "Streamed and deleted."


def test_wait_returns_at_its_bound_while_nobody_decides(replicas: tuple[Gateway, Gateway],
                                                        fakes: dict[str, FakeUpstream]) -> None:
    first, _ = replicas
    extension = pause_chat(first, fakes)
    started = time.monotonic()
    view = call(first, "GET", f"/v1/continuations/{extension['continuation_id']}", ASKER, wait=1)
    assert view.status_code == 200 and view.json()["status"] == "pending" and "result" not in view.json()
    assert time.monotonic() - started >= 1.0


@pytest.mark.parametrize("wait", ["61", "-1", "soon", "nan", "1e999"])
def test_wait_is_bounded(replicas: tuple[Gateway, Gateway], fakes: dict[str, FakeUpstream], wait: str) -> None:
    first, _ = replicas
    extension = pause_chat(first, fakes)
    refused = call(first, "GET", f"/v1/continuations/{extension['continuation_id']}", ASKER, wait=wait)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "wait"


def test_a_pause_begun_on_messages_keeps_the_anthropic_message(replicas: tuple[Gateway, Gateway],
                                                               fakes: dict[str, FakeUpstream]) -> None:
    first, second = replicas
    fakes["primary"].queue(Reply(tool_calls=[("delete_record", {"id": "42"})]))
    paused = httpx.post(f"{first.url}/v1/messages", json={"model": "agent", "max_tokens": 200, "messages": ASK},
                        headers={"x-api-key": ASKER}, timeout=30)
    assert paused.status_code == 200, paused.text
    extension = paused.json()["gateway"]
    fakes["primary"].queue(Reply(text="Deleted, Anthropic-style."))
    decided = approve(second, extension)
    assert decided.json()["type"] == "message"
    view = call(first, "GET", f"/v1/continuations/{extension['continuation_id']}", ASKER).json()
    assert view["result"] == decided.json() and view["result_object"] == "message"


def test_a_paused_response_points_at_the_response_that_continued_it(replicas: tuple[Gateway, Gateway],
                                                                    fakes: dict[str, FakeUpstream]) -> None:
    first, second = replicas
    asker = first.client(ASKER)
    fakes["primary"].queue(Reply(tool_calls=[("delete_record", {"id": "42"})]))
    paused = asker.responses.create(model="agent", input="Delete record 42")
    request = paused.output[0]
    assert request.type == "mcp_approval_request"
    continuation_id = paused.model_extra["gateway"]["continuation_id"]
    fakes["primary"].queue(Reply(text="Done."))
    answer = {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}
    continued = second.client(ASKER).responses.create(model="agent", previous_response_id=paused.id,
                                                      input=[answer])  # type: ignore[list-item]
    retrieved = asker.responses.retrieve(paused.id)
    assert retrieved.model_extra["gateway"]["continued_by"] == {"id": continued.id, "object": "response"}
    view = call(first, "GET", f"/v1/continuations/{continuation_id}", ASKER).json()
    assert view["result_id"] == continued.id and view["result_object"] == "response"
    assert view["result"]["output"][-1]["content"][0]["text"] == "Done."
    # The same Response the answer got (and that GET /v1/responses/{id} keeps).
    assert view["result"] == call(first, "GET", f"/v1/responses/{continued.id}", ASKER).json()


def test_the_listing_filter_says_pending_and_still_takes_paused(replicas: tuple[Gateway, Gateway],
                                                                fakes: dict[str, FakeUpstream]) -> None:
    first, _ = replicas
    extension = pause_chat(first, fakes)
    pending = call(first, "GET", "/v1/continuations", ASKER, status="pending", limit=100).json()
    alias = call(first, "GET", "/v1/continuations", ASKER, status="paused", limit=100).json()
    ids = [c["id"] for c in pending["data"]]
    assert extension["continuation_id"] in ids and ids == [c["id"] for c in alias["data"]]
    assert {c["status"] for c in pending["data"]} == {"pending"}
    refused = call(first, "GET", "/v1/continuations", ASKER, status="waiting")
    assert refused.status_code == 400 and "pending" in refused.json()["error"]["message"]
