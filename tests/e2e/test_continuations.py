"""Pause and resume end to end, on the memory store and on a real Redis shared by gateway processes."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest
import redis

from gateway.store.redis import RedisStore
from tests.e2e.conftest import HEADLESS_KEY, OTHER_KEY, Gateway, gateway_config, require_redis
from tests.fakes.tool_server import ToolServer
from tests.fakes.upstream import FakeUpstream, Reply
from tests.ports import free_port

REDIS_URL = os.environ["LOOPGATE_TEST_REDIS_URL"]  # the suite's own server (tests/conftest.py)
IN_CI = os.environ.get("CI", "").lower() == "true"
USER = [{"role": "user", "content": "Tidy up record 42 and tell me the weather."}]
LOOKUP = [{"type": "function", "function": {"name": "lookup", "description": "client-side lookup",
                                            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def redis_gateways(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> Iterator[tuple[Gateway, Gateway]]:
    require_redis(REDIS_URL)
    redis.Redis.from_url(REDIS_URL).flushdb()
    config = gateway_config(fakes, store_url=REDIS_URL, tool_server=tool_server.url)
    first, second = Gateway(config).start(), Gateway(config).start()
    yield first, second
    first.stop()
    second.stop()


def pause_on_client_tool(gateway: Gateway, fakes: dict[str, FakeUpstream], stream: bool = False) -> Any:
    """Server tool first (hidden), then a client tool: the request pauses on the latter."""
    fakes["primary"].queue(Reply(tool_calls=[("get_weather", {"city": "Paris"})]),
                           Reply(text="Checking.", tool_calls=[("lookup", {"q": "record 42"})]))
    return gateway.client().chat.completions.create(model="agent", messages=USER, tools=LOOKUP)


def follow_up(completion: Any, output: str) -> list[dict[str, Any]]:
    message = completion.choices[0].message
    return [*USER, message.model_dump(exclude_none=True, exclude={"reasoning_content"}),
            *[{"role": "tool", "tool_call_id": call.id, "content": output} for call in message.tool_calls]]


def test_client_tool_pause_and_resume_way_a(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    paused = pause_on_client_tool(gateway, fakes)
    choice = paused.choices[0]
    extension = paused.model_extra["gateway"]
    assert choice.finish_reason == "tool_calls"
    assert [c.function.name for c in choice.message.tool_calls] == ["lookup"]
    assert choice.message.content == "Checking."
    assert extension["status"] == "paused" and extension["continuation_id"].startswith("cont_")
    assert extension["pending"] == [{"tool_call_id": choice.message.tool_calls[0].id, "name": "lookup",
                                     "reason": "client"}]
    assert [c["name"] for c in extension["tool_calls"]] == ["get_weather"]

    fakes["primary"].queue(Reply(text="Record 42 is archived; Paris is sunny."))
    done = gateway.client().chat.completions.create(model="agent", messages=follow_up(paused, "archived"),
                                                    tools=LOOKUP)
    assert done.choices[0].message.content == "Record 42 is archived; Paris is sunny."
    assert done.model_extra["gateway"]["status"] == "completed"
    resumed = fakes["primary"].bodies[-1]["messages"]
    # The stored transcript came back, with the hidden server exchange the client never saw.
    assert [m["role"] for m in resumed] == ["user", "assistant", "tool", "assistant", "tool"]
    assert resumed[2]["content"] == "Paris: 18C, sunny"
    assert resumed[4]["content"] == "archived"


def test_mixed_turn_runs_server_calls_first(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("lookup", {"q": "a"}), ("get_weather", {"city": "Rome"})]))
    paused = gateway.client().chat.completions.create(model="agent", messages=USER, tools=LOOKUP)
    assert [c.function.name for c in paused.choices[0].message.tool_calls] == ["lookup"]
    assert paused.model_extra["gateway"]["tool_calls"][0]["name"] == "get_weather"
    fakes["primary"].queue(Reply(text="done"))
    gateway.client().chat.completions.create(model="agent", messages=follow_up(paused, "A!"), tools=LOOKUP)
    tools = [m for m in fakes["primary"].bodies[-1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tools] == ["A!", "Rome: 18C, sunny"]  # call order, not completion order


def test_stream_pause(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="One moment.", tool_calls=[("lookup", {"q": "x"})]))
    chunks = list(gateway.client().chat.completions.create(model="agent", messages=USER, tools=LOOKUP, stream=True))
    calls = [d for c in chunks if c.choices for d in (c.choices[0].delta.tool_calls or [])]
    assert [(d.function.name, d.function.arguments) for d in calls] == [("lookup", '{"q":"x"}')]
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
    summary = [c.model_extra["gateway"] for c in chunks if c.model_extra.get("gateway", {}).get("status")]
    assert summary[-1]["status"] == "paused" and summary[-1]["pending"][0]["tool_call_id"] == calls[0].id


def approve_flow(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> tuple[str, str]:
    fakes["primary"].queue(Reply(tool_calls=[("delete_remote", {"id": "42"})]))
    paused = gateway.client().chat.completions.create(model="agent", messages=USER)
    extension = paused.model_extra["gateway"]
    assert extension["pending"][0]["reason"] == "approval"
    return extension["continuation_id"], extension["pending"][0]["tool_call_id"]


def test_approval_approve_runs_the_tool_once(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                             tool_server: ToolServer) -> None:
    before = len(tool_server.calls)
    continuation_id, call_id = approve_flow(gateway, fakes)
    assert len(tool_server.calls) == before  # never runs without approval
    shown = httpx.get(f"{gateway.url}/v1/continuations/{continuation_id}",
                      headers={"authorization": "Bearer test-key"}).json()
    assert shown["status"] == "pending" and shown["model"] == "agent"
    assert shown["pending"][0]["name"] == "delete_remote" and orjson.loads(shown["pending"][0]["arguments"]) == {
        "id": "42"}
    assert shown["expires_at"] > shown["created_at"]
    fakes["primary"].queue(Reply(text="Deleted record 42."))
    response = gateway.post(f"/v1/continuations/{continuation_id}",
                            {"decisions": [{"tool_call_id": call_id, "approve": True}]})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["choices"][0]["message"]["content"] == "Deleted record 42."
    assert body["gateway"]["tool_calls"][0]["status"] == "ok"
    assert tool_server.calls[before:] == [{"id": "42"}]
    again = gateway.post(f"/v1/continuations/{continuation_id}",
                         {"decisions": [{"tool_call_id": call_id, "approve": True}]})
    assert again.status_code == 409
    assert len(tool_server.calls) == before + 1


def test_approval_deny(gateway: Gateway, fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> None:
    before = len(tool_server.calls)
    continuation_id, call_id = approve_flow(gateway, fakes)
    fakes["primary"].queue(Reply(text="Understood, not deleting."))
    response = gateway.post(f"/v1/continuations/{continuation_id}", {"decisions": [
        {"tool_call_id": call_id, "approve": False, "reason": "record is still in use"}]})
    assert response.status_code == 200
    assert response.json()["gateway"]["tool_calls"][0]["status"] == "denied"
    result = next(m for m in fakes["primary"].bodies[-1]["messages"] if m["role"] == "tool")["content"]
    assert "declined" in result and "record is still in use" in result
    assert len(tool_server.calls) == before


def test_missing_or_bad_decision_is_400_and_keeps_it_resumable(gateway: Gateway, fakes: dict[str, FakeUpstream]
                                                               ) -> None:
    continuation_id, call_id = approve_flow(gateway, fakes)
    missing = gateway.post(f"/v1/continuations/{continuation_id}", {"decisions": []})
    assert missing.status_code == 400 and call_id in missing.json()["error"]["message"]
    wrong = gateway.post(f"/v1/continuations/{continuation_id}", {"decisions": [{"tool_call_id": call_id,
                                                                                 "output": "fake"}]})
    assert wrong.status_code == 400
    fakes["primary"].queue(Reply(text="ok"))
    fine = gateway.post(f"/v1/continuations/{continuation_id}", {"decisions": [{"tool_call_id": call_id,
                                                                                "approve": False}]})
    assert fine.status_code == 200


def test_get_delete_and_tenancy(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    continuation_id, call_id = approve_flow(gateway, fakes)
    url = f"{gateway.url}/v1/continuations/{continuation_id}"
    other = {"authorization": f"Bearer {OTHER_KEY}"}
    assert httpx.get(url, headers=other).status_code == 404
    assert httpx.delete(url, headers=other).status_code == 404
    assert gateway.post(f"/v1/continuations/{continuation_id}", {"decisions": [
        {"tool_call_id": call_id, "approve": True}]}, key=OTHER_KEY).status_code == 404
    assert httpx.get(f"{gateway.url}/v1/continuations/cont_nope", headers={"authorization": "Bearer test-key"}
                     ).status_code == 404
    deleted = httpx.delete(url, headers={"authorization": "Bearer test-key"})
    assert deleted.status_code == 200 and deleted.json()["deleted"] is True
    assert httpx.get(url, headers={"authorization": "Bearer test-key"}).status_code == 404
    assert gateway.post(f"/v1/continuations/{continuation_id}", {"decisions": [
        {"tool_call_id": call_id, "approve": True}]}).status_code == 404


def race_resumes(gateways: list[Gateway], fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> None:
    """Six simultaneous approvals of one continuation through ``gateways``: one wins, the tool runs once."""
    before = len(tool_server.calls)
    continuation_id, call_id = approve_flow(gateways[0], fakes)
    fakes["primary"].default = Reply(text="done", delay_s=0.3)
    statuses: list[int] = []

    def resume(gw: Gateway) -> None:
        statuses.append(gw.post(f"/v1/continuations/{continuation_id}", {"decisions": [
            {"tool_call_id": call_id, "approve": True}]}).status_code)

    try:
        threads = [threading.Thread(target=resume, args=(gateways[i % len(gateways)],)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        fakes["primary"].default = Reply(text="ok")
    assert sorted(statuses) == [200, 409, 409, 409, 409, 409]
    assert len(tool_server.calls) == before + 1


def test_concurrent_resumes_exactly_one_wins(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                             tool_server: ToolServer) -> None:
    race_resumes([gateway], fakes, tool_server)


def test_failed_resume_can_be_retried_and_the_tool_ran_once(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                            tool_server: ToolServer) -> None:
    before = len(tool_server.calls)
    continuation_id, call_id = approve_flow(gateway, fakes)
    decision = {"decisions": [{"tool_call_id": call_id, "approve": True}]}
    fakes["primary"].queue(Reply(status=500))
    failed = gateway.post(f"/v1/continuations/{continuation_id}", decision)
    assert failed.status_code == 502
    assert len(tool_server.calls) == before + 1
    fakes["primary"].queue(Reply(text="Deleted after all."))
    retried = gateway.post(f"/v1/continuations/{continuation_id}", decision)
    assert retried.status_code == 200, retried.text
    assert retried.json()["choices"][0]["message"]["content"] == "Deleted after all."
    assert len(tool_server.calls) == before + 1, "the approved tool must not run again on the retry"
    tool_result = next(m for m in fakes["primary"].bodies[-1]["messages"] if m["role"] == "tool")["content"]
    assert tool_result == "deleted 42"


@pytest.mark.parametrize("how", ["key", "body", "header"])
def test_headless_denies_instead_of_pausing(gateway: Gateway, fakes: dict[str, FakeUpstream], how: str) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("delete_remote", {"id": "7"}), ("lookup", {"q": "z"})]),
                           Reply(text="Could not do either."))
    kwargs: dict[str, Any] = {}
    key = HEADLESS_KEY if how == "key" else "test-key"
    if how == "body":
        kwargs["extra_body"] = {"gateway": {"headless": True}}
    client = gateway.client(key=key, default_headers={"X-Gateway-Headless": "true"} if how == "header" else None)
    completion = client.chat.completions.create(model="agent", messages=USER, tools=LOOKUP, **kwargs)
    extension = completion.model_extra["gateway"]
    assert extension["status"] == "completed"
    assert completion.choices[0].message.content == "Could not do either."
    assert [(d["name"], d["reason"]) for d in extension["headless_denials"]] == [
        ("delete_remote", "approval"), ("lookup", "client")]
    results = [m["content"] for m in fakes["primary"].bodies[-1]["messages"] if m["role"] == "tool"]
    assert all("headless" in r for r in results)


# --- Redis: shared by several gateway processes ---------------------------------------


def test_pause_on_one_process_resume_on_another(redis_gateways: tuple[Gateway, Gateway],
                                                fakes: dict[str, FakeUpstream]) -> None:
    first, second = redis_gateways
    paused = pause_on_client_tool(first, fakes)
    fakes["primary"].queue(Reply(text="Resumed elsewhere."))
    done = second.client().chat.completions.create(model="agent", messages=follow_up(paused, "found"), tools=LOOKUP)
    assert done.choices[0].message.content == "Resumed elsewhere."
    roles = [m["role"] for m in fakes["primary"].bodies[-1]["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "tool"]


def test_way_b_across_processes_and_restart(redis_gateways: tuple[Gateway, Gateway],
                                            fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> None:
    first, second = redis_gateways
    continuation_id, call_id = approve_flow(first, fakes)
    first.stop()
    first.start()  # a restart between pause and resume loses nothing
    fakes["primary"].queue(Reply(text="Gone."))
    resumed = first.post(f"/v1/continuations/{continuation_id}", {"decisions": [
        {"tool_call_id": call_id, "approve": True}]})
    assert resumed.status_code == 200, resumed.text
    assert second.post(f"/v1/continuations/{continuation_id}", {"decisions": [
        {"tool_call_id": call_id, "approve": True}]}).status_code == 409


def test_concurrent_resumes_across_processes(redis_gateways: tuple[Gateway, Gateway],
                                             fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> None:
    race_resumes(list(redis_gateways), fakes, tool_server)


def test_headless_denials_are_audited_in_redis(redis_gateways: tuple[Gateway, Gateway],
                                               fakes: dict[str, FakeUpstream]) -> None:
    first, _ = redis_gateways
    fakes["primary"].queue(Reply(tool_calls=[("delete_remote", {"id": "9"})]), Reply(text="skipped"))
    first.client(key=HEADLESS_KEY).chat.completions.create(model="agent", messages=USER)

    async def read() -> list[dict[str, Any]]:
        store = RedisStore(REDIS_URL)
        try:
            return await store.read_audit("jobs")
        finally:
            await store.aclose()

    entries = asyncio.run(read())
    assert entries[-1]["tool"] == "delete_remote" and entries[-1]["reason"] == "approval"
    assert len(entries[-1]["arguments_sha256"]) == 64 and entries[-1]["ts"] > 0


def test_expired_continuation_is_404(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> None:
    require_redis(REDIS_URL)
    gw = Gateway(gateway_config(fakes, store_url=REDIS_URL, tool_server=tool_server.url, ttl_s=1)).start()
    try:
        continuation_id, call_id = approve_flow(gw, fakes)
        time.sleep(1.3)
        response = gw.post(f"/v1/continuations/{continuation_id}", {"decisions": [
            {"tool_call_id": call_id, "approve": True}]})
        assert response.status_code == 404
    finally:
        gw.stop()


def test_store_outage_is_503_and_readyz_recovers(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> None:
    binary = shutil.which("redis-server")
    if binary is None:
        if IN_CI:
            pytest.fail("redis-server is not installed")
        pytest.skip("redis-server is not installed")
    port = free_port()

    def start_redis() -> subprocess.Popen[bytes]:
        process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                    "--appendonly", "no"], stdout=subprocess.DEVNULL)
        for _ in range(100):
            try:
                redis.Redis(port=port, socket_connect_timeout=0.2).ping()
                return process
            except redis.RedisError:
                time.sleep(0.05)
        raise RuntimeError("private redis did not start")

    server = start_redis()
    gw = Gateway(gateway_config(fakes, store_url=f"redis://127.0.0.1:{port}/0", tool_server=tool_server.url)).start()
    try:
        assert httpx.get(f"{gw.url}/readyz").status_code == 200
        server.terminate()
        server.wait(5)
        ready = httpx.get(f"{gw.url}/readyz", timeout=10)
        assert ready.status_code == 503 and ready.json()["store"]["reachable"] is False
        fakes["primary"].queue(Reply(tool_calls=[("lookup", {"q": "x"})]))
        with pytest.raises(openai.APIStatusError) as caught:
            gw.client().chat.completions.create(model="agent", messages=USER, tools=LOOKUP)
        assert caught.value.status_code == 503
        assert caught.value.body["code"] == "store_unavailable"
        server = start_redis()
        assert httpx.get(f"{gw.url}/readyz", timeout=10).status_code == 200
        fakes["primary"].queue(Reply(tool_calls=[("lookup", {"q": "x"})]))
        paused = gw.client().chat.completions.create(model="agent", messages=USER, tools=LOOKUP)
        assert paused.model_extra["gateway"]["status"] == "paused"
    finally:
        gw.stop()
        server.terminate()
        server.wait(5)


def test_reused_tool_call_ids_do_not_resume_another_conversation(gateway: Gateway,
                                                                 fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("lookup", {"q": "conversation X"})]))
    paused = gateway.client().chat.completions.create(model="agent", messages=USER, tools=LOOKUP)
    call_id = paused.choices[0].message.tool_calls[0].id
    # Another conversation whose server reused the same id for a different call.
    other = [{"role": "user", "content": "something else"},
             {"role": "assistant", "content": None, "tool_calls": [{"id": call_id, "type": "function", "function": {
                 "name": "lookup", "arguments": '{"q": "conversation Y"}'}}]},
             {"role": "tool", "tool_call_id": call_id, "content": "Y result"}]
    fakes["primary"].queue(Reply(text="Y answered statelessly."))
    answer = gateway.client().chat.completions.create(model="agent", messages=other, tools=LOOKUP)
    assert answer.choices[0].message.content == "Y answered statelessly."
    assert [m["role"] for m in fakes["primary"].bodies[-1]["messages"]] == ["user", "assistant", "tool"]
    continuation_id = paused.model_extra["gateway"]["continuation_id"]
    shown = httpx.get(f"{gateway.url}/v1/continuations/{continuation_id}",
                      headers={"authorization": "Bearer test-key"}).json()
    assert shown["status"] == "pending", "conversation X must still be waiting for its own result"


def test_way_b_resume_streams(gateway: Gateway, fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> None:
    continuation_id, call_id = approve_flow(gateway, fakes)
    fakes["primary"].queue(Reply(text="Deleted, streamed."))
    with httpx.stream("POST", f"{gateway.url}/v1/continuations/{continuation_id}", timeout=20,
                      headers={"authorization": "Bearer test-key"},
                      json={"decisions": [{"tool_call_id": call_id, "approve": True}], "stream": True,
                            "stream_options": {"include_usage": True}}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    chunks = [orjson.loads(line) for line in lines[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
    assert text == "Deleted, streamed."
    events = [c["gateway"]["event"] for c in chunks if "event" in c.get("gateway", {})]
    assert events == ["tool_started", "tool_finished"]
    summary = next(c["gateway"] for c in chunks if "gateway" in c and "event" not in c["gateway"])
    assert summary["status"] == "completed" and summary["tool_calls"][0]["status"] == "ok"
    assert any(c.get("usage") for c in chunks)


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_way_a_lookup_claims_a_refused_follow_up_gives_it_back_and_duplicates_get_409(
        store: str, request: pytest.FixtureRequest, fakes: dict[str, FakeUpstream]) -> None:
    # Way A's lookup takes the claim with its read (one step): a follow-up then refused must give it back, and of
    # simultaneous identical follow-ups exactly one resumes (the others: 409, the contract's answer).
    gw: Gateway = request.getfixturevalue("gateway") if store == "memory" else request.getfixturevalue(
        "redis_gateways")[0]
    paused = pause_on_client_tool(gw, fakes)
    continuation_id = paused.model_extra["gateway"]["continuation_id"]
    mismatched = follow_up(paused, "ok")
    mismatched[-2]["tool_calls"][0]["function"]["arguments"] = '{"q": "another record"}'
    fakes["primary"].queue(Reply(text="answered statelessly"))
    assert gw.client().chat.completions.create(model="agent", messages=mismatched, tools=LOOKUP
                                               ).choices[0].message.content == "answered statelessly"
    view = httpx.get(f"{gw.url}/v1/continuations/{continuation_id}", headers={"authorization": "Bearer test-key"})
    assert view.json()["status"] == "pending", "a refused way-A follow-up leaves the continuation pending"
    fakes["primary"].default = Reply(text="resumed once", delay_s=0.3)
    statuses: list[int] = []

    def resume() -> None:
        statuses.append(gw.post("/v1/chat/completions", {"model": "agent", "messages": follow_up(paused, "ok"),
                                                         "tools": LOOKUP}).status_code)

    try:
        threads = [threading.Thread(target=resume) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        fakes["primary"].default = Reply(text="ok")
    assert sorted(statuses) == [200, 409, 409, 409]
    view = httpx.get(f"{gw.url}/v1/continuations/{continuation_id}", headers={"authorization": "Bearer test-key"})
    assert view.json()["status"] == "resumed"


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_a_way_a_follow_up_sent_again_after_its_resume_is_409_never_stateless(
        store: str, request: pytest.FixtureRequest, fakes: dict[str, FakeUpstream]) -> None:
    # A client whose answer was lost (a dropped connection, its gateway killed after the finish) sends the same
    # follow-up again. Answered statelessly, the model would see a transcript without the hidden server exchange and
    # ask for it again (the tool would run twice); the contract's answer is 409, and the answer is kept.
    first, second = (request.getfixturevalue("gateway"),) * 2 if store == "memory" else \
        request.getfixturevalue("redis_gateways")
    paused = pause_on_client_tool(first, fakes)
    continuation_id = paused.model_extra["gateway"]["continuation_id"]
    fakes["primary"].queue(Reply(text="Record 42 is archived."))
    done = first.client().chat.completions.create(model="agent", messages=follow_up(paused, "archived"), tools=LOOKUP)
    assert done.choices[0].message.content == "Record 42 is archived."
    upstream_calls = len(fakes["primary"].bodies)
    for gw in (first, second):
        again = gw.post("/v1/chat/completions", {"model": "agent", "messages": follow_up(paused, "archived"),
                                                 "tools": LOOKUP})
        assert again.status_code == 409, again.text
        error = again.json()["error"]
        assert error["code"] == "continuation_conflict" and f"/v1/continuations/{continuation_id}" in error["message"]
    assert len(fakes["primary"].bodies) == upstream_calls, "no upstream call for a repeated follow-up"
    view = httpx.get(f"{second.url}/v1/continuations/{continuation_id}", headers={"authorization": "Bearer test-key"})
    assert view.json()["status"] == "resumed"
    assert view.json()["result"]["choices"][0]["message"]["content"] == "Record 42 is archived."
    # Later turns of the same conversation (the resumed exchange in their history, a new question last) go on.
    later = [*follow_up(paused, "archived"), {"role": "assistant", "content": "Record 42 is archived."},
             {"role": "user", "content": "Thanks. And record 43?"}]
    fakes["primary"].queue(Reply(text="Record 43 is live."))
    assert second.client().chat.completions.create(model="agent", messages=later, tools=LOOKUP
                                                   ).choices[0].message.content == "Record 43 is live."
