"""A pause that began on ``/v1/responses``, decided way B, answers with a Response that continues it.

Two ``loopgate serve`` processes on one Redis: the asking key pauses on replica A through the
official ``openai`` SDK (``client.responses.create``), an approver key decides on replica B with
``POST /v1/continuations/{id}`` (what the approvals inbox does), and the asker finds the final
answer on A: ``client.responses.retrieve`` of the response the paused one's ``continued_by``
names, ``GET /v1/continuations/{id}?wait=5``, its ``input_items``, and a follow-up chained on it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tests.e2e.conftest import Gateway, gateway_config, two_replicas
from tests.fakes.upstream import FakeUpstream, Reply

REDIS_URL = os.environ["LOOPGATE_TEST_REDIS_URL"]  # the suite's own server (tests/conftest.py)
ASKER, APPROVER = "asker-key", "approver-key"
AUTH = f"""auth:
  keys:
    - {{key: {ASKER}, tenant: team-a, name: asker}}
    - {{key: {APPROVER}, tenant: team-a, name: reviewer, role: approver}}
"""
LOOKUP = [{"type": "function", "name": "lookup", "description": "client-side lookup",
           "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]
EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


@pytest.fixture(scope="module")
def replicas(fakes: dict[str, FakeUpstream]) -> Iterator[tuple[Gateway, Gateway]]:
    text = gateway_config(fakes, store_url=REDIS_URL).replace("auth:\n  keys:\n", AUTH, 1)
    yield from two_replicas(text, REDIS_URL, flush_after=True)


def call(gateway: Gateway, method: str, path: str, key: str, body: Any = None, **params: Any) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"}
    return httpx.request(method, f"{gateway.url}{path}", json=body, headers=headers, params=params, timeout=90)


def pause(gateway: Gateway, fakes: dict[str, FakeUpstream], **kwargs: Any) -> Response:
    """The asker's response pausing on the approval of ``delete_record``."""
    fakes["primary"].queue(Reply(tool_calls=[("delete_record", {"id": "42"})]))
    paused = gateway.client(ASKER).responses.create(model="agent", input="Delete record 42", **kwargs)
    assert [item.type for item in paused.output] == ["mcp_approval_request"]
    return paused


def decide(gateway: Gateway, paused: Response, key: str = APPROVER, **body: Any) -> httpx.Response:
    """Way B on ``gateway``: every pending call of ``paused`` approved (or ``body['decisions']``)."""
    continuation = paused.model_extra["gateway"]["continuation_id"]  # type: ignore[index]
    decisions = [{"tool_call_id": p["tool_call_id"], "approve": True}
                 for p in paused.model_extra["gateway"]["pending"]]  # type: ignore[index]
    return call(gateway, "POST", f"/v1/continuations/{continuation}", key, {"decisions": decisions, **body})


class Waiter(threading.Thread):
    """``GET /v1/continuations/{id}?wait=5`` on the asker's replica, started before the decision."""

    def __init__(self, gateway: Gateway, continuation_id: str) -> None:
        super().__init__(daemon=True)
        self.gateway, self.continuation_id = gateway, continuation_id
        self.response: httpx.Response | None = None

    def run(self) -> None:
        self.response = call(self.gateway, "GET", f"/v1/continuations/{self.continuation_id}", ASKER, wait=5)


def test_a_decision_on_another_replica_answers_the_asker_with_a_chained_response(
        replicas: tuple[Gateway, Gateway], fakes: dict[str, FakeUpstream]) -> None:
    first, second = replicas
    asker = first.client(ASKER)
    paused = pause(first, fakes, instructions="Be careful.", metadata={"ticket": "T-1"})
    continuation_id = paused.model_extra["gateway"]["continuation_id"]  # type: ignore[index]
    waiter = Waiter(first, continuation_id)
    waiter.start()
    fakes["primary"].queue(Reply(text="Record 42 deleted."))
    decided = decide(second, paused)
    assert decided.status_code == 200, decided.text
    body = decided.json()
    answer = Response.model_validate(body)  # the decider gets a Responses object, not a chat completion
    assert answer.object == "response" and answer.id.startswith("resp_") and answer.status == "completed"
    assert answer.previous_response_id == paused.id
    assert answer.instructions == "Be careful." and answer.metadata == {"ticket": "T-1"}
    assert [item.type for item in answer.output] == ["mcp_call", "message"]
    assert answer.output[0].approval_request_id == paused.output[0].id  # type: ignore[union-attr]
    assert answer.output_text == "Record 42 deleted."

    # The asker, on the other replica: the paused response names the one that continued it, and it is there.
    continued_by = asker.responses.retrieve(paused.id).model_extra["gateway"]["continued_by"]  # type: ignore[index]
    assert continued_by == {"id": answer.id, "object": "response"}
    retrieved = asker.responses.retrieve(continued_by["id"])
    assert retrieved.model_dump() == answer.model_dump()
    waiter.join(30)
    assert waiter.response is not None and waiter.response.status_code == 200, waiter.response
    view = waiter.response.json()
    assert view["status"] == "resumed" and view["result"] == body
    assert view["result_id"] == answer.id and view["result_object"] == "response"

    # Its input is the decision, as the Responses API would have said it.
    items = asker.responses.input_items.list(answer.id).data
    assert [(item.type, item.approval_request_id, item.approve) for item in items] == [  # type: ignore[union-attr]
        ("mcp_approval_response", paused.output[0].id, True)]

    # A follow-up chained on the decided response continues the whole conversation, on either replica.
    fakes["primary"].queue(Reply(text="Record 43 too."))
    follow = second.client(ASKER).responses.create(model="agent", previous_response_id=answer.id,
                                                   input="And record 43?")
    assert follow.output_text == "Record 43 too." and follow.previous_response_id == answer.id
    sent = fakes["primary"].requests[-1].body["messages"]
    # (the paused request's instructions are not carried over, as with any previous_response_id)
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "assistant", "user"]
    assert sent[0]["content"] == "Delete record 42" and sent[2]["content"] == "deleted 42"
    assert sent[-2]["content"] == "Record 42 deleted." and sent[-1]["content"] == "And record 43?"
    # Decided once: a second decision (on either replica) is a conflict, and the tool ran once.
    again = decide(first, paused)
    assert again.status_code == 409, again.text


def test_a_streamed_decision_is_a_responses_event_stream(replicas: tuple[Gateway, Gateway],
                                                        fakes: dict[str, FakeUpstream]) -> None:
    first, second = replicas
    paused = pause(first, fakes)
    fakes["primary"].queue(Reply(text="Streamed and deleted."))
    # The official SDK's own SSE decoder and Responses event types, on the continuations path.
    approver = second.client(APPROVER)
    pending = paused.model_extra["gateway"]["pending"]  # type: ignore[index]
    stream = approver.post(
        f"/continuations/{paused.model_extra['gateway']['continuation_id']}",  # type: ignore[index]
        body={"stream": True, "decisions": [{"tool_call_id": pending[0]["tool_call_id"], "approve": True}]},
        cast_to=object, stream=True, stream_cls=openai.Stream[ResponseStreamEvent])  # type: ignore[arg-type]
    events = [EVENTS.validate_python(event.model_dump()) for event in stream]
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert "response.output_text.delta" in kinds and "response.mcp_call.completed" in kinds
    final = events[-1].response
    assert final.previous_response_id == paused.id and final.output_text == "Streamed and deleted."
    assert events[0].response.id == final.id
    # Stored whole: the asker retrieves the same Response, and the continuation keeps it as its result.
    asker = first.client(ASKER)
    assert asker.responses.retrieve(final.id).model_dump() == final.model_dump()
    continuation_id = paused.model_extra["gateway"]["continuation_id"]  # type: ignore[index]
    view = call(first, "GET", f"/v1/continuations/{continuation_id}", ASKER, wait=5).json()
    assert view["result_id"] == final.id
    assert Response.model_validate(view["result"]).model_dump() == final.model_dump()


def test_a_client_tool_answered_way_b_and_store_false_is_honoured(replicas: tuple[Gateway, Gateway],
                                                                  fakes: dict[str, FakeUpstream]) -> None:
    first, second = replicas
    fakes["primary"].queue(Reply(tool_calls=[("lookup", {"q": "42"})]))
    paused = first.client(ASKER).responses.create(model="agent", input="Look up 42", tools=LOOKUP,  # type: ignore
                                                  store=False)
    assert [item.type for item in paused.output] == ["function_call"]
    call_id = paused.output[0].call_id  # type: ignore[union-attr]
    fakes["primary"].queue(Reply(text="42 is the answer."))
    continuation_id = paused.model_extra["gateway"]["continuation_id"]  # type: ignore[index]
    decided = call(second, "POST", f"/v1/continuations/{continuation_id}", ASKER,
                   {"decisions": [{"tool_call_id": call_id, "output": "forty-two"}]})
    assert decided.status_code == 200, decided.text
    answer = Response.model_validate(decided.json())
    assert answer.output_text == "42 is the answer." and answer.previous_response_id == paused.id
    assert answer.store is False
    # Not stored, as the paused request asked; the continuation still has the answer for the asker.
    with pytest.raises(openai.NotFoundError):
        first.client(ASKER).responses.retrieve(answer.id)
    view = call(first, "GET", f"/v1/continuations/{continuation_id}", ASKER).json()
    assert view["result_id"] == answer.id and view["result_object"] == "response"
    tool_message = fakes["primary"].requests[-1].body["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["content"] == "forty-two"


def test_a_decided_response_that_pauses_again_is_decided_as_its_continuation(
        replicas: tuple[Gateway, Gateway], fakes: dict[str, FakeUpstream]) -> None:
    first, second = replicas
    paused = pause(first, fakes)
    fakes["primary"].queue(Reply(tool_calls=[("delete_record", {"id": "43"})]))
    again = decide(second, paused)
    assert again.status_code == 200, again.text
    repaused = Response.model_validate(again.json())
    assert [item.type for item in repaused.output] == ["mcp_call", "mcp_approval_request"]
    assert repaused.previous_response_id == paused.id
    fakes["primary"].queue(Reply(text="Both deleted."))
    final = decide(first, repaused)
    assert final.status_code == 200, final.text
    answer = Response.model_validate(final.json())
    assert answer.previous_response_id == repaused.id and answer.output_text == "Both deleted."
    asker = first.client(ASKER)
    assert asker.responses.retrieve(repaused.id).model_extra["gateway"]["continued_by"]["id"] == answer.id  # type: ignore
    assert asker.responses.retrieve(answer.id).output_text == "Both deleted."


def test_a_chat_pause_is_still_answered_with_a_chat_completion(replicas: tuple[Gateway, Gateway],
                                                              fakes: dict[str, FakeUpstream]) -> None:
    first, second = replicas
    fakes["primary"].queue(Reply(tool_calls=[("delete_record", {"id": "42"})]))
    paused = call(first, "POST", "/v1/chat/completions", ASKER,
                  {"model": "agent", "messages": [{"role": "user", "content": "Delete record 42"}]}).json()
    extension = paused["gateway"]
    fakes["primary"].queue(Reply(text="Chat-style."))
    decided = call(second, "POST", f"/v1/continuations/{extension['continuation_id']}", APPROVER,
                   {"decisions": [{"tool_call_id": extension["pending"][0]["tool_call_id"], "approve": True}]})
    assert decided.json()["object"] == "chat.completion"


def test_a_background_pause_decided_way_b_is_answered_in_the_foreground(
        replicas: tuple[Gateway, Gateway], fakes: dict[str, FakeUpstream]) -> None:
    first, second = replicas
    asker = first.client(ASKER)
    fakes["primary"].queue(Reply(tool_calls=[("delete_record", {"id": "42"})]))
    created = asker.responses.create(model="agent", input="Delete record 42", background=True)
    deadline = time.monotonic() + 60  # a condition polled with a generous bound, not a timing
    paused = asker.responses.retrieve(created.id)
    while paused.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.05)
        paused = asker.responses.retrieve(created.id)
    assert paused.status == "completed" and [item.type for item in paused.output] == ["mcp_approval_request"]
    fakes["primary"].queue(Reply(text="Deleted in the end."))
    decided = decide(second, paused)
    assert decided.status_code == 200, decided.text
    answer = Response.model_validate(decided.json())
    assert answer.background is False and answer.previous_response_id == created.id
    assert answer.output_text == "Deleted in the end."
    assert asker.responses.retrieve(created.id).model_extra["gateway"]["continued_by"]["id"] == answer.id  # type: ignore
    assert asker.responses.retrieve(answer.id).output_text == "Deleted in the end."
