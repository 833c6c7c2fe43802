"""Approvals end to end: listing, digests, the audit trail, policies, time-outs and per-key tools.

Real ``loopgate serve`` processes on a real Redis, driven with the OpenAI SDK (pauses) and plain
HTTP (the approval API, as the inbox page calls it); the LLM and the MCP server are faked over HTTP.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest
import redis

from tests.e2e.approving import (
    APPROVER,
    ASKER,
    B_APPROVER,
    LIMITED,
    REDIS_URL,
    approvals_config,
    audit,
    decide,
    get,
    listed,
    pause,
)
from tests.e2e.conftest import HEADLESS_KEY, OTHER_KEY, Gateway, gateway_on_redis
from tests.e2e.test_mcp import ThreadedMcp
from tests.fakes.upstream import FakeUpstream, Reply


@pytest.fixture(scope="module")
def mcp() -> Iterator[ThreadedMcp]:
    server = ThreadedMcp()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gw(fakes: dict[str, FakeUpstream], mcp: ThreadedMcp) -> Iterator[Gateway]:
    yield from gateway_on_redis(approvals_config(fakes, mcp.server.url), REDIS_URL)


def tool_result(body: dict[str, Any]) -> str:
    """The first tool result of an upstream request."""
    return str(next(m for m in body["messages"] if m["role"] == "tool")["content"])


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_listing_newest_first_with_cursor_and_the_view(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    made = [pause(gw, fakes, record)[0] for record in ("a", "b", "c")]
    first = get(gw, "/v1/continuations", APPROVER, limit=2, status="paused").json()
    assert len(first["data"]) == 2 and first["has_more"] and first["next_cursor"]
    ids = [e["id"] for e in listed(gw, APPROVER, limit=2, status="paused")]
    assert [i for i in ids if i in made] == made[::-1]  # newest first
    entry = next(e for e in listed(gw, APPROVER) if e["id"] == made[2])
    call = entry["pending"][0]
    assert orjson.loads(call["arguments"]) == {"id": "c"} and call["arguments_sha256"] == sha(call["arguments"])
    assert {k: call[k] for k in ("name", "reason", "approval_deadline", "approval_expired")} == {
        "name": "delete_record", "reason": "approval", "approval_deadline": None, "approval_expired": False}
    assert entry["status"] == "pending" and entry["route"] == entry["model"] == "appr"
    assert entry["key"]["name"] == "asker" and entry["key"]["id"].startswith("cfg_")
    assert ASKER not in orjson.dumps(entry).decode()
    assert entry["context"] == {"user": "Delete record c", "assistant": "Deleting c."}
    assert entry["created_at"] <= time.time() < entry["expires_at"]
    view = get(gw, f"/v1/continuations/{made[2]}", APPROVER).json()
    assert view == entry
    # Another tenant's keys see none of it, by listing or by id.
    assert not {e["id"] for e in listed(gw, B_APPROVER)} & set(made)
    assert not {e["id"] for e in listed(gw, OTHER_KEY)} & set(made)
    assert get(gw, f"/v1/continuations/{made[2]}", B_APPROVER).status_code == 404


def test_approver_lists_and_decides_but_cannot_call_models(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    continuation_id, call_id, paused = pause(gw, fakes, "77")
    arguments = paused.choices[0].message.tool_calls[0].function.arguments
    fakes["primary"].queue(Reply(text="Record 77 is gone."))
    done = decide(gw, continuation_id, APPROVER, {"tool_call_id": call_id, "approve": True,
                                                   "arguments_sha256": sha(arguments)})
    assert done.status_code == 200, done.text
    assert done.json()["choices"][0]["message"]["content"] == "Record 77 is gone."
    results = [m["content"] for m in fakes["primary"].bodies[-1]["messages"] if m["role"] == "tool"]
    assert results == ["deleted 77"]  # the tool ran, once
    assert continuation_id not in {e["id"] for e in listed(gw, APPROVER)}  # resumed: out of the index
    with pytest.raises(openai.PermissionDeniedError) as refused:
        gw.client(APPROVER).chat.completions.create(model="appr", messages=[{"role": "user", "content": "x"}])
    assert refused.value.body["code"] == "approver_key"  # type: ignore[index]


def test_digest_mismatch_is_409_and_changes_nothing(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    continuation_id, call_id, paused = pause(gw, fakes, "9")
    wrong = decide(gw, continuation_id, APPROVER, {"tool_call_id": call_id, "approve": True,
                                                    "arguments_sha256": sha('{"id":"10"}')})
    assert wrong.status_code == 409 and wrong.json()["error"]["code"] == "arguments_mismatch"
    assert get(gw, f"/v1/continuations/{continuation_id}", APPROVER).json()["status"] == "pending"
    assert continuation_id in {e["id"] for e in listed(gw, APPROVER)}
    assert not [e for e in audit(gw, APPROVER) if e["continuation_id"] == continuation_id]
    fakes["primary"].queue(Reply(text="ok"))
    arguments = paused.choices[0].message.tool_calls[0].function.arguments
    right = decide(gw, continuation_id, APPROVER, {"tool_call_id": call_id, "approve": True,
                                                    "arguments_sha256": sha(arguments).upper()})
    assert right.status_code == 200, right.text


def test_audit_records_who_decided_what(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    started = time.time()
    approved_id, approved_call, paused = pause(gw, fakes, "11")
    fakes["primary"].queue(Reply(text="done"))
    assert decide(gw, approved_id, APPROVER, {"tool_call_id": approved_call, "approve": True}).status_code == 200
    denied_id, denied_call, _ = pause(gw, fakes, "12")
    fakes["primary"].queue(Reply(text="fine"))
    assert decide(gw, denied_id, ASKER, {"tool_call_id": denied_call, "approve": False,
                                         "reason": "not that one"}).status_code == 200
    assert "not that one" in tool_result(fakes["primary"].bodies[-1])

    entries = audit(gw, APPROVER, limit=1, **{"from": dt.datetime.fromtimestamp(started, dt.UTC).isoformat()})
    assert [e["event"] for e in entries] == ["denied", "approved"]  # newest first, one page at a time
    denied, approved = entries
    arguments = paused.choices[0].message.tool_calls[0].function.arguments
    assert approved["key"]["name"] == "reviewer" and approved["key"]["id"].startswith("cfg_")
    assert {k: approved[k] for k in ("object", "tool", "tool_call_id", "continuation_id", "arguments_sha256",
                                     "reason")} == {
        "object": "audit.entry", "tool": "delete_record", "tool_call_id": approved_call,
        "continuation_id": approved_id, "arguments_sha256": sha(arguments), "reason": None}
    assert denied["key"]["name"] == "asker" and denied["reason"] == "not that one"
    assert started - 1 <= approved["created_at"] <= denied["created_at"] <= time.time() + 1
    # Time bounds (epoch seconds or ISO 8601) and tenants.
    assert audit(gw, APPROVER, to=str(started - 3600)) == []
    assert [e["id"] for e in audit(gw, APPROVER, to=str(denied["created_at"]),
                                   **{"from": str(approved["created_at"])})] == [denied["id"], approved["id"]]
    assert not [e for e in audit(gw, B_APPROVER) if e["continuation_id"] in (approved_id, denied_id)]
    for params in ({"limit": "0"}, {"limit": "101"}, {"cursor": "nope"}, {"from": "yesterday"}):
        bad = get(gw, "/v1/audit", APPROVER, **params)
        assert bad.status_code == 400 and bad.json()["error"]["param"] == next(iter(params))


def test_headless_denials_are_audited_with_the_key(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("delete_record", {"id": "5"})]), Reply(text="could not"))
    done = gw.client(HEADLESS_KEY).chat.completions.create(model="appr", messages=[{"role": "user", "content": "x"}])
    denial = done.model_extra["gateway"]["headless_denials"][0]
    entry = next(e for e in audit(gw, HEADLESS_KEY) if e["tool_call_id"] == denial["tool_call_id"])
    assert entry["event"] == "headless_denial" and entry["tool"] == "delete_record"
    assert entry["key"]["id"].startswith("cfg_") and entry["key"]["name"] and entry["reason"] == "approval"
    assert entry["arguments_sha256"] == sha('{"id":"5"}')
    assert "headless_denial" not in {e["event"] for e in audit(gw, APPROVER)}  # tenant jobs' entry only


def test_approval_timeout_denies_and_a_late_decision_is_409(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    continuation_id, call_id, _ = pause(gw, fakes, "t1", tool="timed_delete")
    deadline = get(gw, f"/v1/continuations/{continuation_id}", APPROVER).json()["pending"][0]["approval_deadline"]
    assert time.time() - 5 < deadline <= time.time() + 2
    time.sleep(max(0.0, deadline - time.time()) + 1.1)
    view = get(gw, f"/v1/continuations/{continuation_id}", APPROVER).json()
    assert view["pending"][0]["approval_expired"] is True
    late = decide(gw, continuation_id, APPROVER, {"tool_call_id": call_id, "approve": True})
    assert late.status_code == 409 and late.json()["error"]["code"] == "approval_expired"
    assert get(gw, f"/v1/continuations/{continuation_id}", APPROVER).json()["status"] == "pending"
    # The loop resumes with the denial (way B, with nothing left to decide).
    fakes["primary"].queue(Reply(text="It was not approved in time."))
    done = decide(gw, continuation_id, ASKER)
    assert done.status_code == 200, done.text
    result = tool_result(fakes["primary"].bodies[-1])
    assert "approval timed out" in result
    assert done.json()["gateway"]["tool_calls"][0]["status"] == "denied"
    entry = next(e for e in audit(gw, APPROVER) if e["continuation_id"] == continuation_id)
    assert entry["event"] == "approval_timeout" and entry["reason"] == "approval timed out"
    assert entry["key"] == {"id": None, "name": None} and entry["tool_call_id"] == call_id


def test_approval_timeout_applies_to_way_a(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    _, call_id, paused = pause(gw, fakes, "t2", tool="timed_delete")
    time.sleep(2.1)
    message = paused.choices[0].message
    fakes["primary"].queue(Reply(text="Skipped it."))
    gw.client(ASKER).chat.completions.create(model="appr", messages=[
        {"role": "user", "content": "Delete record t2"}, message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call_id, "content": "deleted it myself"}])
    result = tool_result(fakes["primary"].bodies[-1])
    assert "approval timed out" in result and "myself" not in result


def test_approval_auto_follows_mcp_annotations(gw: Gateway, fakes: dict[str, FakeUpstream],
                                               mcp: ThreadedMcp) -> None:
    calls_before = mcp.server.methods().count("tools/call")
    fakes["primary"].queue(Reply(tool_calls=[("mixed", {}), ("fail", {}), ("auto_delete", {"id": "1"})]))
    paused = gw.client(ASKER).chat.completions.create(model="appr", messages=[{"role": "user", "content": "go"}])
    extension = paused.model_extra["gateway"]
    # readOnlyHint: runs at once; destructiveHint and no annotations at all: a person decides.
    assert sorted((p["name"], p["reason"]) for p in extension["pending"]) == [
        ("auto_delete", "approval"), ("fail", "approval")]
    assert [(c["name"], c["status"]) for c in extension["tool_calls"]] == [("mixed", "ok")]
    assert mcp.server.methods().count("tools/call") == calls_before + 1


def test_key_tool_allow_list_hides_other_tools(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("delete_record", {"id": "1"})]), Reply(text="I cannot."))
    done = gw.client(LIMITED).chat.completions.create(model="appr", messages=[{"role": "user", "content": "go"}])
    assert done.model_extra["gateway"]["status"] == "completed"  # no pause: the tool is not this key's
    offered = [[t["function"]["name"] for t in body.get("tools", [])] for body in fakes["primary"].bodies]
    assert offered == [["get_weather"], ["get_weather"]]
    result = tool_result(fakes["primary"].bodies[1])
    assert result.startswith("Unknown tool 'delete_record'")
    # The asker's key (no allow-list) is offered every tool of the route.
    fakes["primary"].queue(Reply(text="hi"))
    gw.client(ASKER).chat.completions.create(model="appr", messages=[{"role": "user", "content": "go"}])
    assert {"delete_record", "mixed", "fail"} <= {t["function"]["name"] for t in fakes["primary"].bodies[-1]["tools"]}


def test_listing_forgets_expired_continuations(fakes: dict[str, FakeUpstream], mcp: ThreadedMcp,
                                               gw: Gateway) -> None:
    short = Gateway(approvals_config(fakes, mcp.server.url, ttl_s=2)).start()
    try:
        continuation_id, _, _ = pause(short, fakes, "soon")
        assert continuation_id in {e["id"] for e in listed(short, APPROVER)}
        time.sleep(2.5)
        assert continuation_id not in {e["id"] for e in listed(short, APPROVER)}
        members = redis.Redis.from_url(REDIS_URL).zrange("loopgate:{t:team-a}:conts", 0, -1)
        assert continuation_id.encode() not in members  # trimmed from the index, not just hidden
        cancelled, _, _ = pause(short, fakes, "cancel")
        assert httpx.delete(f"{short.url}/v1/continuations/{cancelled}",
                            headers={"authorization": f"Bearer {APPROVER}"}).status_code == 200
        assert cancelled not in {e["id"] for e in listed(short, APPROVER)}
    finally:
        short.stop()


def test_listing_rejects_bad_parameters(gw: Gateway) -> None:
    for params in ({"limit": "x"}, {"limit": "500"}, {"cursor": "A" * 600}, {"status": "weird"}):
        bad = get(gw, "/v1/continuations", APPROVER, **params)
        assert bad.status_code == 400 and bad.json()["error"]["param"] == next(iter(params))
    assert get(gw, "/v1/continuations", "nobody").status_code == 401


def test_responses_api_decisions_are_audited_and_checked_like_way_b(gw: Gateway,
                                                                    fakes: dict[str, FakeUpstream]) -> None:
    """An ``mcp_approval_response`` is a decision like way B's: audited with its key, allow-lists applied."""
    client = gw.client(ASKER)
    fakes["primary"].queue(Reply(tool_calls=[("delete_record", {"id": "77"})]))
    first = client.responses.create(model="appr", input="Delete record 77")
    request = first.output[0]
    assert request.type == "mcp_approval_request"
    fakes["primary"].queue(Reply(text="Not deleted."))
    answer = {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": False,
              "reason": "keep 77"}
    second = client.responses.create(model="appr", previous_response_id=first.id, input=[answer])
    assert second.status == "completed" and "keep 77" in tool_result(fakes["primary"].bodies[-1])
    call_id = request.id.removeprefix("mcpr_")  # the item id is the tool call's, prefixed
    entry = next(e for e in audit(gw, APPROVER) if e["tool_call_id"] == call_id)
    assert entry["event"] == "denied" and entry["reason"] == "keep 77" and entry["key"]["name"] == "asker"
    assert entry["arguments_sha256"] == sha(request.arguments)
    # A key's tool allow-list holds on the Responses API too: the model is never offered the others.
    fakes["primary"].queue(Reply(text="ok"))
    gw.client(LIMITED).responses.create(model="appr", input="weather?")
    offered = {t["function"]["name"] for t in fakes["primary"].bodies[-1].get("tools", [])}
    assert offered == {"get_weather"}
    # An unknown model's 404 lists only the routes this key may use.
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.create(model="nope", input="x")
    assert "appr" in str(missing.value)
