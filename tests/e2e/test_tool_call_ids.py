"""Way A with two identical paused requests in one tenant (issue 52), on the in-memory store and on Redis.

The mock provider gave identical requests identical tool-call ids, and the way-A index kept the
latest continuation per id: a follow-up from the first caller resumed the *second* caller's
continuation with the first caller's results. Now the mock's ids are unique per call, and an id
that two live continuations of a tenant share (an upstream that repeats ids) is never resolved by
guessing: the follow-up is answered statelessly, each continuation stays pending for its owner (way
B), and once one of them is gone the id is the other's alone again.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Gateway, require_redis
from tests.fakes.upstream import FakeUpstream, Reply

REDIS_URL = os.environ["LOOPGATE_TEST_REDIS_URL"]
KEY = "ids-key"
CLIENT_TOOLS = [{"type": "function", "function": {
    "name": "read_local_file", "description": "Read a file on the caller's machine",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]
ASK = [{"role": "user", "content": "Summarise notes.txt: use read_local_file"}]


def ids_config(store_url: str, upstream: str, tenant: str) -> str:
    return f"""
server: {{host: 127.0.0.1, port: __PORT__}}
auth: {{keys: [{{key: {KEY}, tenant: {tenant}}}]}}
store: {{url: "{store_url}"}}
providers:
  mock: {{type: mock}}
  primary: {{type: openai, base_url: '{upstream}', api_key: upstream-primary}}
models:
  demo: {{targets: [{{provider: mock, model: mock-1}}]}}
  repeats: {{targets: [{{provider: primary, model: up-model}}]}}
"""


@pytest.fixture(scope="module", params=["memory", "redis"])
def ids_gateway(request: pytest.FixtureRequest, fakes: dict[str, FakeUpstream]) -> Iterator[Gateway]:
    store = "memory://"
    if request.param == "redis":
        require_redis(REDIS_URL)
        store = REDIS_URL
    # a tenant of its own: the suite's Redis holds other tests' tool-call index entries
    gateway = Gateway(ids_config(store, fakes["primary"].url, f"ids-{uuid.uuid4().hex[:12]}")).start()
    yield gateway
    gateway.stop()


def pause(gateway: Gateway, model: str) -> tuple[str, dict[str, Any]]:
    paused = gateway.client(key=KEY).chat.completions.create(model=model, messages=ASK, tools=CLIENT_TOOLS)
    extension = paused.model_extra["gateway"]
    assert extension["status"] == "paused", extension
    return extension["continuation_id"], paused.choices[0].message.model_dump(exclude_none=True)


def follow_up(gateway: Gateway, model: str, assistant: dict[str, Any], output: str) -> httpx.Response:
    messages = [*ASK, assistant, {"role": "tool", "tool_call_id": assistant["tool_calls"][0]["id"], "content": output}]
    return gateway.post("/v1/chat/completions", {"model": model, "messages": messages, "tools": CLIENT_TOOLS},
                        key=KEY)


def status(gateway: Gateway, continuation_id: str) -> str:
    answer = httpx.get(f"{gateway.url}/v1/continuations/{continuation_id}", headers={"authorization": f"Bearer {KEY}"})
    assert answer.status_code == 200, answer.text
    return str(answer.json()["status"])


def test_identical_mock_requests_get_their_own_ids_and_each_follow_up_resumes_its_own(ids_gateway: Gateway) -> None:
    first, first_turn = pause(ids_gateway, "demo")
    second, second_turn = pause(ids_gateway, "demo")
    assert first != second
    # The same call, by content: only the ids differ.
    assert first_turn["tool_calls"][0]["function"] == second_turn["tool_calls"][0]["function"]
    assert first_turn["tool_calls"][0]["id"] != second_turn["tool_calls"][0]["id"]
    answered = follow_up(ids_gateway, "demo", first_turn, "the first caller's notes")
    assert answered.status_code == 200, answered.text
    assert answered.json()["choices"][0]["message"]["content"] == \
        "The read_local_file tool returned: the first caller's notes"
    assert (status(ids_gateway, first), status(ids_gateway, second)) == ("resumed", "pending")
    answered = follow_up(ids_gateway, "demo", second_turn, "the second caller's notes")
    assert answered.status_code == 200, answered.text
    assert (status(ids_gateway, first), status(ids_gateway, second)) == ("resumed", "resumed")


def test_a_shared_id_is_never_resolved_by_guessing(ids_gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    same = f"call_{uuid.uuid4().hex[:8]}"  # an upstream that repeats its ids
    for _ in range(2):
        fakes["primary"].queue(Reply(tool_calls=[("read_local_file", {"path": "notes.txt"})], call_ids=[same]))
    first, first_turn = pause(ids_gateway, "repeats")
    second, second_turn = pause(ids_gateway, "repeats")
    assert first_turn["tool_calls"][0]["id"] == second_turn["tool_calls"][0]["id"] == same
    # The follow-up cannot say which continuation it answers: neither is resumed (the second used to be),
    # it is answered as the stateless conversation it sent.
    fakes["primary"].queue(Reply(text="answered statelessly"))
    answered = follow_up(ids_gateway, "repeats", first_turn, "the first caller's notes")
    assert answered.status_code == 200, answered.text
    assert answered.json()["choices"][0]["message"]["content"] == "answered statelessly"
    assert [m["role"] for m in fakes["primary"].bodies[-1]["messages"]] == ["user", "assistant", "tool"]
    assert (status(ids_gateway, first), status(ids_gateway, second)) == ("pending", "pending")
    # Each owner resumes its own by id (way B) ...
    fakes["primary"].queue(Reply(text="done for the first"))
    resumed = ids_gateway.post(f"/v1/continuations/{first}", {"decisions": [
        {"tool_call_id": same, "output": "the first caller's notes"}]}, key=KEY)
    assert resumed.status_code == 200, resumed.text
    told = [m for m in fakes["primary"].bodies[-1]["messages"] if m["role"] == "tool"]
    assert told[-1]["content"] == "the first caller's notes"
    assert (status(ids_gateway, first), status(ids_gateway, second)) == ("resumed", "pending")
    # ... and once the id is the other's alone again, its way-A follow-up resumes it.
    fakes["primary"].queue(Reply(text="done for the second"))
    answered = follow_up(ids_gateway, "repeats", second_turn, "the second caller's notes")
    assert answered.status_code == 200, answered.text
    assert answered.json()["choices"][0]["message"]["content"] == "done for the second"
    assert status(ids_gateway, second) == "resumed"
