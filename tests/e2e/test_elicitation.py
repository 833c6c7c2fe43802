"""Elicitation as a durable pause, end to end: a tool call asking the user for input pauses the loop.

Real ``loopgate serve`` processes on the suite's Redis, driven with the OpenAI SDK and plain HTTP
(the decision API, as the inbox calls it); the LLM is faked over HTTP. The asking tool is a Python
tool (``tests.e2e.sample_tools:ask_user``) that awaits the loop's elicitation handler exactly as an
MCP source does when its server sends ``elicitation/create``: what is under test is the loop's pause,
the held call, the decision and the store between replicas, not MCP (tests/e2e/test_mcp_elicitation.py
drives the reference MCP server).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.approving import audit
from tests.e2e.asking import APPROVER, REDIS_URL, ask, asking_config, asking_gateway, last_tool_result
from tests.e2e.conftest import HEADLESS_KEY, KEY, Gateway, two_replicas
from tests.e2e.test_webhooks import wait_type
from tests.fakes.upstream import FakeUpstream, Reply
from tests.fakes.webhook_receiver import WebhookReceiver


@pytest.fixture(scope="module")
def gw(fakes: dict[str, FakeUpstream]) -> Iterator[Gateway]:
    yield from asking_gateway(fakes)


def decide(gw: Gateway, continuation_id: str, key: str = KEY, **decision: Any) -> httpx.Response:
    call_id = decision.pop("tool_call_id", None) or view(gw, continuation_id)["pending"][0]["tool_call_id"]
    return gw.post(f"/v1/continuations/{continuation_id}", {"decisions": [{"tool_call_id": call_id, **decision}]},
                   key=key)


def view(gw: Gateway, continuation_id: str) -> dict[str, Any]:
    shown = httpx.get(f"{gw.url}/v1/continuations/{continuation_id}", headers={"authorization": f"Bearer {KEY}"},
                      timeout=20)
    assert shown.status_code == 200, shown.text
    body: dict[str, Any] = shown.json()
    return body


def test_the_pause_shows_the_question_and_an_accepted_answer_reaches_the_model(
        gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    paused = ask(gw, fakes)
    assert paused["status"] == "paused"
    [pending] = paused["pending"]
    assert pending["name"] == "ask_user" and pending["reason"] == "elicitation"
    assert pending["elicitation"] == {"server": "asker", "mode": "form", "message": "Who are you? (round 1)",
                                      "requested_schema": pending["elicitation"]["requested_schema"]}
    assert pending["elicitation"]["requested_schema"]["required"] == ["name"]
    shown = view(gw, paused["continuation_id"])
    assert shown["status"] == "pending"
    [item] = shown["pending"]
    assert item["elicitation"] == pending["elicitation"] and item["elicitation_expired"] is False
    assert item["elicitation_deadline"] >= time.time() + 500  # the default elicitation_timeout_s: 600 s

    fakes["primary"].queue(Reply(text="Nice to meet you, Ada."))
    decided = decide(gw, paused["continuation_id"], APPROVER, action="accept",
                     content={"name": "Ada", "age": 36, "subscribe": True, "color": "green"})
    assert decided.status_code == 200, decided.text
    body = decided.json()
    assert body["gateway"]["status"] == "completed"
    assert body["choices"][0]["message"]["content"] == "Nice to meet you, Ada."
    assert last_tool_result(fakes["primary"]) == \
        'user said: accept {"age":36,"color":"green","name":"Ada","subscribe":true}'
    assert [c["status"] for c in body["gateway"]["tool_calls"]] == ["ok"]
    # Answered once: a second decision is the conflict of any resumed continuation.
    again = decide(gw, paused["continuation_id"], tool_call_id=pending["tool_call_id"], action="decline")
    assert again.status_code == 409 and again.json()["error"]["code"] == "continuation_conflict"
    entry = next(e for e in audit(gw, APPROVER) if e["tool_call_id"] == pending["tool_call_id"])
    assert entry["event"] == "elicitation_accepted" and entry["key"]["name"] == "reviewer"
    assert "Ada" not in json.dumps(audit(gw, APPROVER))  # the answer's content is never audited


@pytest.mark.parametrize("action", ["decline", "cancel"])
def test_decline_and_cancel_reach_the_tool(gw: Gateway, fakes: dict[str, FakeUpstream], action: str) -> None:
    paused = ask(gw, fakes)
    fakes["primary"].queue(Reply(text="ok then"))
    decided = decide(gw, paused["continuation_id"], action=action, content={"name": "ignored"})
    assert decided.status_code == 200, decided.text
    assert last_tool_result(fakes["primary"]) == f"user said: {action} null"


@pytest.mark.parametrize(("content", "param"), [
    ({"age": 3}, "decisions[0].content.name"),                   # a required field missing
    ({"name": "Ada", "age": "old"}, "decisions[0].content.age"),  # the wrong type
    ({"name": "Ada", "age": 200}, "decisions[0].content.age"),    # beyond the maximum
    ({"name": "Ada", "color": "pink"}, "decisions[0].content.color"),  # not one of the enum
    ({"name": ""}, "decisions[0].content.name"),                 # shorter than minLength
    ({"name": "Ada", "email": "not-an-address"}, "decisions[0].content.email"),  # format
    ({"name": "Ada", "password": "x"}, "decisions[0].content.password"),  # not a field of the schema
    ({"name": {"first": "Ada"}}, "decisions[0].content.name"),   # not a flat value
])
def test_content_the_schema_refuses_is_a_400_naming_the_field(gw: Gateway, fakes: dict[str, FakeUpstream],
                                                               content: dict[str, Any], param: str) -> None:
    paused = ask(gw, fakes)
    refused = decide(gw, paused["continuation_id"], action="accept", content=content)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == param
    assert view(gw, paused["continuation_id"])["status"] == "pending"  # nothing was claimed
    fakes["primary"].queue(Reply(text="fine"))
    assert decide(gw, paused["continuation_id"], action="accept", content={"name": "Ada"}).status_code == 200
    # ``subscribe`` left out: its default, as the inbox's form would have sent it
    assert last_tool_result(fakes["primary"]) == 'user said: accept {"name":"Ada","subscribe":false}'


def test_an_accept_without_content_gives_the_schemas_defaults(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    """MCP's elicitation defaults (the conformance suite's ``elicitation-defaults`` form): way B fills what the
    answer leaves out from the schema's defaults, as the inbox's form does; what it sends wins."""
    paused = ask(gw, fakes, mode="defaults")
    assert paused["pending"][0]["elicitation"]["requested_schema"]["properties"]["score"]["default"] == 95.5
    fakes["primary"].queue(Reply(text="ok"))
    assert decide(gw, paused["continuation_id"], APPROVER, action="accept").status_code == 200
    assert last_tool_result(fakes["primary"]) == ('user said: accept {"age":30,"name":"John Doe","score":95.5,'
                                                  '"status":"active","verified":true}')
    paused = ask(gw, fakes, mode="defaults")
    fakes["primary"].queue(Reply(text="ok"))
    assert decide(gw, paused["continuation_id"], APPROVER, action="accept",
                  content={"name": "Ada", "verified": False}).status_code == 200
    assert last_tool_result(fakes["primary"]) == ('user said: accept {"age":30,"name":"Ada","score":95.5,'
                                                  '"status":"active","verified":false}')


def test_bad_decisions_are_400s(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    paused = ask(gw, fakes)
    for decision, param in (({"approve": True}, "decisions[0].action"), ({"action": "maybe"}, "decisions[0].action"),
                            ({"action": "accept", "content": "Ada"}, "decisions[0].content")):
        refused = decide(gw, paused["continuation_id"], **decision)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == param, refused.text
    # A plain follow-up cannot answer a question (the call is still running): it says where to answer.
    call_id = paused["pending"][0]["tool_call_id"]
    follow_up = gw.post("/v1/chat/completions", {"model": "ask", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Let me ask.", "tool_calls": [{"id": call_id, "type": "function", "function": {
            "name": "ask_user", "arguments": '{"question":"Who are you?"}'}}]},
        {"role": "tool", "tool_call_id": call_id, "content": "Ada"}]})
    assert follow_up.status_code == 400 and follow_up.json()["error"]["code"] == "elicitation_pending"
    assert decide(gw, paused["continuation_id"], action="cancel").status_code == 200


def test_the_tool_timeout_does_not_count_the_wait_for_the_user(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    paused = ask(gw, fakes)  # ask_user has timeout_s: 1
    time.sleep(1.5)
    fakes["primary"].queue(Reply(text="thanks"))
    decided = decide(gw, paused["continuation_id"], action="accept", content={"name": "Ada"})
    assert decided.status_code == 200 and decided.json()["gateway"]["tool_calls"][0]["status"] == "ok"
    assert last_tool_result(fakes["primary"]) == 'user said: accept {"name":"Ada","subscribe":false}'


def test_a_question_asked_again_pauses_again(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    paused = ask(gw, fakes, rounds=2)
    decided = decide(gw, paused["continuation_id"], action="accept", content={"name": "Ada"})
    assert decided.status_code == 200, decided.text
    again = decided.json()["gateway"]
    assert again["status"] == "paused" and again["continuation_id"] != paused["continuation_id"]
    [pending] = again["pending"]
    assert pending["tool_call_id"] == paused["pending"][0]["tool_call_id"]
    assert pending["elicitation"]["message"] == "Who are you? (round 2)"
    fakes["primary"].queue(Reply(text="done"))
    last = decide(gw, again["continuation_id"], action="accept", content={"name": "Grace"})
    assert last.status_code == 200 and last.json()["gateway"]["status"] == "completed"
    assert last_tool_result(fakes["primary"]) == ('user said: accept {"name":"Ada","subscribe":false}; '
                                                  'accept {"name":"Grace","subscribe":false}')


def test_a_question_times_out_declined(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    paused = ask(gw, fakes, server="quick")  # elicitation_timeout_s: 1.5
    deadline = time.monotonic() + 20
    while not view(gw, paused["continuation_id"])["pending"][0]["elicitation_expired"]:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    late = decide(gw, paused["continuation_id"], action="accept", content={"name": "Ada"})
    assert late.status_code == 409 and late.json()["error"]["code"] == "elicitation_expired"
    fakes["primary"].queue(Reply(text="no answer"))
    decided = decide(gw, paused["continuation_id"], action="decline")
    assert decided.status_code == 200, decided.text
    assert last_tool_result(fakes["primary"]) == "user said: decline null"
    entry = next(e for e in audit(gw, APPROVER) if e["tool_call_id"] == paused["pending"][0]["tool_call_id"])
    assert entry["event"] == "elicitation_timeout" and entry["key"]["id"] is None


def test_policy_decline_answers_at_once(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    done = ask(gw, fakes, server="refuser", then="declined")
    assert done["status"] == "completed" and done["tool_calls"][0]["status"] == "ok"
    assert last_tool_result(fakes["primary"]) == "user said: decline null"


def test_a_headless_key_declines_and_the_denial_is_audited(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    done = ask(gw, fakes, key=HEADLESS_KEY, then="could not ask")
    assert done["status"] == "completed"
    [denial] = done["headless_denials"]
    assert denial["name"] == "ask_user" and denial["reason"] == "elicitation"
    assert last_tool_result(fakes["primary"]) == "user said: decline null"
    entry = next(e for e in audit(gw, HEADLESS_KEY) if e["tool_call_id"] == denial["tool_call_id"])
    assert entry["event"] == "headless_denial" and entry["reason"] == "elicitation"


def test_url_mode_shows_the_url_and_accept_sends_no_content(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    paused = ask(gw, fakes, mode="url")
    question = paused["pending"][0]["elicitation"]
    assert question["mode"] == "url" and question["url"] == "https://auth.example.com/connect?state=abc"
    assert "requested_schema" not in question
    fakes["primary"].queue(Reply(text="connected"))
    assert decide(gw, paused["continuation_id"], action="accept").status_code == 200
    assert last_tool_result(fakes["primary"]) == "user said: accept null"


def test_the_responses_api_pauses_with_the_question_and_no_function_call(gw: Gateway,
                                                                         fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("ask_user", {"question": "Who?"})]))
    response = gw.post("/v1/responses", {"model": "ask", "input": "hi"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["gateway"]["status"] == "paused" and body["gateway"]["pending"][0]["reason"] == "elicitation"
    assert not [item for item in body["output"] if item["type"] == "function_call"]
    fakes["primary"].queue(Reply(text="Hello Ada"))
    decided = decide(gw, body["gateway"]["continuation_id"], action="accept", content={"name": "Ada"})
    assert decided.status_code == 200, decided.text
    assert decided.json()["object"] == "response" and decided.json()["status"] == "completed"


def test_a_streamed_pause_and_a_streamed_decision(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="Let me ask.", tool_calls=[("ask_user", {"question": "Who?"})]))
    stream = gw.client().chat.completions.create(model="ask", messages=[{"role": "user", "content": "hi"}],
                                                 stream=True)
    chunks = list(stream)
    paused = next(c.model_extra["gateway"] for c in chunks if (c.model_extra or {}).get("gateway", {}).get("status"))
    assert paused["status"] == "paused" and paused["pending"][0]["reason"] == "elicitation"
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    handed = [d.tool_calls[0].id for d in deltas if d.tool_calls and d.tool_calls[0].id]
    assert handed == [paused["pending"][0]["tool_call_id"]]
    fakes["primary"].queue(Reply(text="Hello, Ada."))
    decided = httpx.post(f"{gw.url}/v1/continuations/{paused['continuation_id']}", timeout=20,
                         headers={"authorization": f"Bearer {KEY}"}, json={"stream": True, "decisions": [
                             {"tool_call_id": handed[0], "action": "accept", "content": {"name": "Ada"}}]})
    assert decided.status_code == 200 and decided.text.endswith("data: [DONE]\n\n")
    events = [json.loads(line[6:]) for line in decided.text.splitlines() if line.startswith("data: {")]
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"]) == "Hello, Ada."
    assert events[-1]["gateway"]["status"] == "completed"


def test_webhooks_name_the_question_never_the_answer(fakes: dict[str, FakeUpstream]) -> None:
    receiver = WebhookReceiver()
    receiver.start()
    hooks = (f"notifications:\n  backoff_base_s: 0.2\n  webhooks:\n    - {{url: '{receiver.url}/ok', secret: "
             "whsec-test-0123456789, events: [paused, decided, resumed, headless_denied, expired]}\n")
    gateway = Gateway(asking_config(fakes, store_url="memory://", hooks=hooks)).start()
    try:
        paused = ask(gateway, fakes)
        [event] = wait_type(receiver, "/ok", "paused")
        [call] = event.json["tool_calls"]
        assert call["reason"] == "elicitation" and call["elicitation"] == {"server": "asker", "mode": "form"}
        fakes["primary"].queue(Reply(text="ok"))
        assert decide(gateway, paused["continuation_id"], action="accept",
                      content={"name": "Secret Agent"}).status_code == 200
        [decided] = wait_type(receiver, "/ok", "decided")
        assert decided.json["decisions"][0]["approved"] is True
        assert decided.json["decisions"][0]["reason"] == "elicitation accept"
        wait_type(receiver, "/ok", "resumed")
        ask(gateway, fakes, key=HEADLESS_KEY, then="no")
        [denied] = wait_type(receiver, "/ok", "headless_denied")
        assert denied.json["reason"] == "elicitation"
        unanswered = ask(gateway, fakes, server="quick")  # elicitation_timeout_s: 1.5, long before the TTL
        [expired] = wait_type(receiver, "/ok", "expired")
        assert expired.json["continuation_id"] == unanswered["continuation_id"]
        assert expired.json["reason"] == "elicitation timed out"
        assert expired.json["tool_calls"][0]["elicitation"] == {"server": "quick", "mode": "form"}
        assert all(b"Secret Agent" not in d.body for d in receiver.at("/ok"))
    finally:
        gateway.stop()
        receiver.stop()


# -- two replicas --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pair(fakes: dict[str, FakeUpstream], gw: Gateway) -> Iterator[tuple[Gateway, Gateway]]:
    gw.stop()  # the pair flushes the store the module's gateway uses
    yield from two_replicas(asking_config(fakes), REDIS_URL)


def test_a_decision_on_another_replica_reaches_the_held_call(pair: tuple[Gateway, Gateway],
                                                             fakes: dict[str, FakeUpstream]) -> None:
    holder, decider = pair
    paused = ask(holder, fakes, work_s=0.2)
    fakes["primary"].queue(Reply(text="Hello from the other side"))
    decided = decide(decider, paused["continuation_id"], action="accept", content={"name": "Ada"})
    assert decided.status_code == 200, decided.text
    assert decided.json()["choices"][0]["message"]["content"] == "Hello from the other side"
    assert last_tool_result(fakes["primary"]) == 'user said: accept {"name":"Ada","subscribe":false}'
    # The asker gets the final answer from either replica.
    assert view(holder, paused["continuation_id"])["status"] == "resumed"


def test_a_holder_that_is_gone_ends_the_call_as_an_error(pair: tuple[Gateway, Gateway],
                                                         fakes: dict[str, FakeUpstream]) -> None:
    holder, decider = pair
    paused = ask(holder, fakes)
    assert holder.process is not None
    holder.process.kill()  # gone without a word: nothing reports the held call
    holder.process.wait(timeout=10)
    fakes["primary"].queue(Reply(text="That did not work."))
    started = time.monotonic()
    decided = decide(decider, paused["continuation_id"], action="accept", content={"name": "Ada"})
    assert decided.status_code == 200, decided.text
    assert time.monotonic() - started < 40  # the acknowledgement bound (15 s), never a hang
    assert decided.json()["gateway"]["tool_calls"][0]["status"] == "error"
    assert "replica holding it open" in last_tool_result(fakes["primary"])


def test_a_holder_that_shuts_down_reports_its_held_call(fakes: dict[str, FakeUpstream],
                                                        pair: tuple[Gateway, Gateway]) -> None:
    holder, decider = pair  # the module's pair: after the test above, its first replica is gone already
    if holder.process is not None and holder.process.poll() is None:
        holder.stop()
    replacement = Gateway(asking_config(fakes)).start()  # a new holder on the same store
    try:
        paused = ask(replacement, fakes)
        replacement.stop()  # SIGTERM: a graceful shutdown reports the held call as ended
        assert replacement.process is not None and replacement.process.returncode is not None
        fakes["primary"].queue(Reply(text="It stopped."))
        decided = decide(decider, paused["continuation_id"], action="accept", content={"name": "Ada"})
        assert decided.status_code == 200, decided.text
        assert decided.json()["gateway"]["tool_calls"][0]["status"] == "error"
        assert "shut down" in last_tool_result(fakes["primary"])
    finally:
        replacement.stop()
