"""The one request lifecycle's governance, on two real gateway processes sharing a real Redis.

- a background response holds its admission (``max_concurrent``, ``tpm``) until its run ends and
  is settled with the run's real usage; per-key and per-tenant run caps hold across replicas;
- a pause decided by an approver key is charged to the key that asked: its limits, budget and
  usage rows; the approver shows up in the audit log only;
- admin API calls leave access records and audit entries.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest
import redis

from tests.e2e.conftest import Gateway, gateway_config, require_redis
from tests.fakes.tool_server import ToolServer
from tests.fakes.upstream import FakeUpstream, Reply

REDIS_URL = os.environ["LOOPGATE_TEST_REDIS_URL"]  # the suite's own server (tests/conftest.py)
ADMIN = "admin-secret"
ADMIN_HEADERS = {"authorization": f"Bearer {ADMIN}"}

AUTH = f"""auth:
  admin_keys: [{{key: {ADMIN}, name: ops}}]
  keys:
    - {{key: bg-conc, tenant: bg-conc-t, max_concurrent: 1}}
    - {{key: bg-tpm, tenant: bg-tpm-t, tpm: 1000}}
    - {{key: bg-a1, tenant: bg-caps}}
    - {{key: bg-a2, tenant: bg-caps}}
    - {{key: asker-key, tenant: team-x, name: asker, rpm: 50, budget: {{limit: 2000, unit: tokens, period: day}}}}
    - {{key: reviewer-key, tenant: team-x, name: reviewer, role: approver, rpm: 1000}}
"""
SECTIONS = """
background: {max_runs_per_key: 2, max_runs_per_tenant: 3, lease_s: 5, heartbeat_s: 0.2, poll_s: 0.05}
logging: {format: json, level: info, access: true}
"""


@pytest.fixture(scope="module")
def pair(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> Iterator[tuple[Gateway, Gateway]]:
    require_redis(REDIS_URL)
    redis.Redis.from_url(REDIS_URL).flushdb()
    text = gateway_config(fakes, store_url=REDIS_URL, tool_server=tool_server.url)
    config = text.replace("auth:\n  keys:\n", AUTH, 1) + SECTIONS
    first, second = Gateway(config).start(), Gateway(config).start()
    yield first, second
    first.stop()
    second.stop()


def wait_for(check: Callable[[], bool], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {within_s} s"
        time.sleep(0.02)


def admin(method: str, gw: Gateway, path: str, body: Any = None, **params: str) -> httpx.Response:
    return httpx.request(method, f"{gw.url}{path}", json=body, params=params, headers=ADMIN_HEADERS, timeout=10)


def start_background(gw: Gateway, key: str) -> httpx.Response:
    return gw.post("/v1/responses", {"model": "plain", "input": "take your time", "background": True}, key=key)


def ended(gw: Gateway, key: str, response_id: str) -> bool:
    status = gw.client(key).responses.retrieve(response_id).status
    return status not in ("queued", "in_progress")


def wait_ended(pair: tuple[Gateway, Gateway], key: str, ids: list[str]) -> None:
    for response_id in ids:
        wait_for(lambda rid=response_id: ended(pair[0], key, rid), 30, f"background run {response_id}")  # type: ignore[misc]


def refused_code(response: httpx.Response) -> str:
    assert response.status_code == 429, response.text
    return str(response.json()["error"]["code"])


# -- background runs hold their admission ------------------------------------------------------

def test_background_run_holds_its_concurrency_slot_until_it_ends(pair: tuple[Gateway, Gateway],
                                                                slow_primary: Callable[..., None]) -> None:
    first, second = pair
    still_running = threading.Event()
    slow_primary(hold=still_running)
    running = start_background(first, "bg-conc")
    assert running.status_code == 200, running.text
    assert running.json()["status"] in ("queued", "in_progress")
    # Beside it, on either replica, in the background or not: max_concurrent 1 is taken.
    assert refused_code(start_background(second, "bg-conc")) == "rate_limit_exceeded"
    assert refused_code(second.post("/v1/chat/completions", {"model": "plain", "messages": [
        {"role": "user", "content": "hi"}]}, key="bg-conc")) == "rate_limit_exceeded"
    still_running.set()
    wait_ended(pair, "bg-conc", [running.json()["id"]])
    slow_primary()
    # Its end gave the slot back: the next one runs.
    again = start_background(second, "bg-conc")
    assert again.status_code == 200, again.text
    wait_ended(pair, "bg-conc", [again.json()["id"]])


def test_background_runs_are_settled_with_their_usage(pair: tuple[Gateway, Gateway],
                                                      slow_primary: Callable[..., None]) -> None:
    """tpm 1000 and runs reporting 900 tokens: the second is let in on what is left, the third is refused.

    Before the lifecycle held background admissions, each run gave its admission back at once and
    its usage was never settled, so every one of them went through.
    """
    slow_primary(usage=(880, 20))
    ids = []
    for gw in pair:
        started = start_background(gw, "bg-tpm")
        assert started.status_code == 200, started.text
        ids.append(started.json()["id"])
        wait_ended(pair, "bg-tpm", ids[-1:])
    final = pair[0].client("bg-tpm").responses.retrieve(ids[0])
    assert final.status == "completed" and final.usage is not None and final.usage.total_tokens == 900
    refused = start_background(pair[1], "bg-tpm")
    assert refused_code(refused) == "rate_limit_exceeded"
    assert refused.json()["error"]["type"] == "tokens"


def test_background_caps_per_key_and_per_tenant_across_replicas(pair: tuple[Gateway, Gateway],
                                                                slow_primary: Callable[..., None]) -> None:
    first, second = pair
    still_running = threading.Event()
    slow_primary(hold=still_running)

    async def burst(key: str, n: int) -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=10) as client:
            body = {"model": "plain", "input": "go", "background": True}
            return list(await asyncio.gather(*(
                client.post(f"{pair[i % 2].url}/v1/responses", json=body, headers={"authorization": f"Bearer {key}"})
                for i in range(n))))

    # Concurrently, alternating replicas: max_runs_per_key 2 lets exactly two in.
    answers = asyncio.run(burst("bg-a1", 5))
    admitted = [a for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code != 200]
    assert len(admitted) == 2 and len(refused) == 3, [a.text for a in answers]
    assert {refused_code(a) for a in refused} == {"too_many_background_responses"}
    assert refused[0].headers["retry-after"] == "1"
    assert "max_runs_per_key: 2" in refused[0].json()["error"]["message"]
    # The tenant's third slot goes to its other key; a fourth run of the tenant is refused.
    third = start_background(second, "bg-a2")
    assert third.status_code == 200, third.text
    assert refused_code(start_background(first, "bg-a2")) == "too_many_background_responses"
    # Back to back: once the runs end, their slots are free again on both replicas.
    still_running.set()
    wait_ended(pair, "bg-a1", [a.json()["id"] for a in admitted])
    wait_ended(pair, "bg-a2", [third.json()["id"]])
    slow_primary()
    again = [start_background(gw, "bg-a1") for gw in pair]
    assert [a.status_code for a in again] == [200, 200], [a.text for a in again]
    wait_ended(pair, "bg-a1", [a.json()["id"] for a in again])


# -- resumes are charged to the key that asked -------------------------------------------------

def key_id(gw: Gateway, name: str) -> str:
    listed = admin("GET", gw, "/admin/keys").json()["data"]
    return str(next(k["id"] for k in listed if k["name"] == name))


def requests_of(gw: Gateway, key: str) -> int:
    rows = admin("GET", gw, "/admin/usage", tenant="team-x", key=key).json()["data"]
    return sum(int(row["requests"]) for row in rows)


def tokens_of(gw: Gateway, key: str) -> int:
    rows = admin("GET", gw, "/admin/usage", tenant="team-x", key=key).json()["data"]
    return sum(int(row["total_tokens"]) for row in rows)


def pause(gw: Gateway, fakes: dict[str, FakeUpstream]) -> tuple[str, str]:
    fakes["primary"].queue(Reply(tool_calls=[("delete_record", {"id": "7"})], usage=(300, 20)))
    paused = gw.post("/v1/chat/completions", {"model": "agent", "messages": [{"role": "user", "content": "rm 7"}]},
                     key="asker-key")
    assert paused.status_code == 200, paused.text
    extra = paused.json()["gateway"]
    assert extra["status"] == "paused"
    return extra["continuation_id"], extra["pending"][0]["tool_call_id"]


def test_an_approvers_decision_is_charged_to_the_asking_key(pair: tuple[Gateway, Gateway],
                                                            fakes: dict[str, FakeUpstream]) -> None:
    first, second = pair
    asker, reviewer = key_id(first, "asker"), key_id(first, "reviewer")
    continuation, call = pause(first, fakes)
    wait_for(lambda: requests_of(first, asker) == 1, 10, "the ask's usage row")

    fakes["primary"].queue(Reply(text="deleted", usage=(400, 30)))
    resumed = second.post(f"/v1/continuations/{continuation}", {"decisions": [{"tool_call_id": call, "approve": True}]},
                          key="reviewer-key")
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["choices"][0]["message"]["content"] == "deleted"
    # The asker's limits, not the reviewer's (rpm 1000), are what admitted it.
    assert resumed.headers["x-ratelimit-limit-requests"] == "50"
    # Its usage rows are the asker's: two requests, both calls' tokens; the reviewer has none.
    wait_for(lambda: requests_of(first, asker) == 2, 10, "the resume's usage row")
    assert tokens_of(first, asker) == 320 + 430
    assert requests_of(first, reviewer) == 0
    # The reviewer is in the audit log, as the one who approved.
    audit = httpx.get(f"{first.url}/v1/audit", headers={"authorization": "Bearer asker-key"}, timeout=10).json()
    approved = [e for e in audit["data"] if e["event"] == "approved" and e["continuation_id"] == continuation]
    assert len(approved) == 1 and approved[0]["key"] == {"id": reviewer, "name": "reviewer"}


def test_the_asking_keys_budget_refuses_an_approvers_resume(pair: tuple[Gateway, Gateway],
                                                            fakes: dict[str, FakeUpstream]) -> None:
    first, second = pair
    asker = key_id(first, "asker")
    continuation, call = pause(first, fakes)
    # Spend the rest of the asker's 2,000-token day.
    fakes["primary"].queue(Reply(text="big", usage=(2000, 10)))
    assert first.post("/v1/chat/completions", {"model": "plain", "messages": [{"role": "user", "content": "x"}]},
                      key="asker-key").status_code == 200
    wait_for(lambda: tokens_of(first, asker) >= 2000, 10, "the spend")

    def spent_on_second() -> bool:  # its reading of the asker's budget is fresh once a chat is refused
        answer = second.post("/v1/chat/completions", {"model": "plain", "messages": [{"role": "user", "content": "x"}]},
                             key="asker-key")
        return answer.status_code == 429 and answer.json()["error"]["code"] == "insufficient_quota"

    wait_for(spent_on_second, 10, "the asker's budget spent, as the second replica reads it")
    # The reviewer has no budget of its own: the asker's is what refuses the resume.
    decision = {"decisions": [{"tool_call_id": call, "approve": False, "reason": "no"}]}
    answer = second.post(f"/v1/continuations/{continuation}", decision, key="reviewer-key")
    assert answer.status_code == 429 and answer.json()["error"]["code"] == "insufficient_quota", answer.text
    # Refused before the claim: still pending, nothing lost.
    shown = httpx.get(f"{second.url}/v1/continuations/{continuation}",
                      headers={"authorization": "Bearer reviewer-key"}, timeout=10)
    assert shown.status_code == 200 and shown.json()["status"] == "pending"


def test_a_revoked_askers_paused_work_does_not_go_on(pair: tuple[Gateway, Gateway],
                                                     fakes: dict[str, FakeUpstream]) -> None:
    first, second = pair
    created = admin("POST", first, "/admin/keys", {"tenant": "team-x", "name": "short-lived"}).json()
    fakes["primary"].queue(Reply(tool_calls=[("delete_record", {"id": "9"})]))
    paused = first.post("/v1/chat/completions", {"model": "agent", "messages": [{"role": "user", "content": "rm"}]},
                        key=created["key"]).json()["gateway"]
    assert admin("DELETE", first, f"/admin/keys/{created['id']}").status_code == 200
    decision = {"decisions": [{"tool_call_id": paused["pending"][0]["tool_call_id"], "approve": True}]}
    # The revoke reaches the second replica with its next key snapshot: decide once it has (deciding
    # earlier would resume the work, and every later try would be a 409, not the refusal under test).
    wait_for(lambda: httpx.get(f"{second.url}/v1/models", headers={"authorization": f"Bearer {created['key']}"},
                               timeout=10).status_code == 401, 5, "the revoke seen by the second replica")
    answer = second.post(f"/v1/continuations/{paused['continuation_id']}", decision, key="reviewer-key")
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "asker_key_revoked", answer.text


# -- admin calls are recorded and audited ------------------------------------------------------

def access_records(gw: Gateway, want: Callable[[list[dict[str, Any]]], bool]) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 30  # generous: returns as soon as the records are there
    while True:
        records = []
        for line in gw.logs().splitlines():
            if line.startswith("{"):
                record = orjson.loads(line)
                if record.get("message") == "access":
                    records.append(record)
        if want(records) or time.monotonic() > deadline:
            return records
        time.sleep(0.02)


def test_admin_changes_leave_access_records_and_audit_entries(pair: tuple[Gateway, Gateway]) -> None:
    first, _ = pair
    created = admin("POST", first, "/admin/keys", {"tenant": "team-x", "name": "audited", "rpm": 10})
    assert created.status_code == 201, created.text
    made = created.json()
    assert admin("PATCH", first, f"/admin/keys/{made['id']}", {"rpm": 20, "name": "audited-2"}).status_code == 200
    assert admin("DELETE", first, f"/admin/keys/{made['id']}").status_code == 200
    assert admin("GET", first, "/admin/keys").status_code == 200

    def admin_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for r in records if str(r.get("path", "")).startswith("/admin/keys")]

    def seen(records: list[dict[str, Any]]) -> set[tuple[Any, Any, Any]]:
        return {(r["method"], r["path"], r["status"]) for r in admin_records(records)}

    expected = {("POST", "/admin/keys", 201), ("PATCH", "/admin/keys/{id}", 200), ("DELETE", "/admin/keys/{id}", 200),
                ("GET", "/admin/keys", 200)}
    # Wait for these four (records are written after the answer; other tests of the module made admin calls too).
    records = admin_records(access_records(first, lambda rs: expected <= seen(rs)))
    assert expected <= seen(records)
    assert {r["key_id"] for r in records} == {"admin:ops"}
    assert all(made["id"] not in line and made["key"] not in line for line in first.logs().splitlines())

    audit = httpx.get(f"{first.url}/v1/audit", headers={"authorization": "Bearer asker-key"}, timeout=10).json()
    changes = {e["event"]: e for e in audit["data"] if e["key"]["id"] == made["id"]}
    assert set(changes) == {"key.created", "key.updated", "key.revoked"}
    assert {e["admin"] for e in changes.values()} == {"ops"}
    assert changes["key.created"]["changes"] == ["name", "rpm", "tenant"]
    assert changes["key.updated"]["changes"] == ["name", "rpm"]
    assert changes["key.updated"]["key"]["name"] == "audited-2"
    assert made["key"] not in orjson.dumps(audit).decode()


def test_a_refused_admin_call_is_recorded_too(pair: tuple[Gateway, Gateway]) -> None:
    first, _ = pair
    answer = httpx.post(f"{first.url}/admin/keys", json={"tenant": "x"}, headers={"authorization": "Bearer nope"},
                        timeout=10)
    assert answer.status_code == 401
    rid = answer.headers["x-request-id"]
    records = access_records(first, lambda rs: any(r.get("request_id") == rid for r in rs))
    (record,) = [r for r in records if r.get("request_id") == rid]
    assert record["status"] == 401 and record["error"] == "invalid_api_key" and record["key_id"] is None


def test_openai_sdk_background_run_through_the_lifecycle(pair: tuple[Gateway, Gateway]) -> None:
    """The official SDK's view: a background response with a per-key cap still polls to completion."""
    client = pair[1].client("bg-a2")
    created = client.responses.create(model="plain", input="hello", background=True)
    deadline = time.monotonic() + 30
    while created.status in ("queued", "in_progress"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
        created = client.responses.retrieve(created.id)
    assert created.status == "completed" and created.output_text
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_unknown")


def test_every_read_of_the_api_is_recorded_with_its_route_template(pair: tuple[Gateway, Gateway]) -> None:
    """Models, stored responses (found or not), their input items, cancels and listings: one access record
    each, under the route's template (never the caller's id) and the key that asked."""
    first, _ = pair
    auth = {"authorization": "Bearer bg-a1"}
    made = first.post("/v1/responses", {"model": "plain", "input": "hello"}, key="bg-a1")
    assert made.status_code == 200, made.text
    response_id = made.json()["id"]
    calls = [("GET", "/v1/models", 200), ("GET", f"/v1/responses/{response_id}", 200),
             ("GET", f"/v1/responses/{response_id}/input_items", 200), ("GET", "/v1/responses/resp_nothing", 404),
             ("POST", f"/v1/responses/{response_id}/cancel", 400), ("GET", "/v1/continuations", 200),
             ("GET", "/v1/audit", 200), ("DELETE", f"/v1/responses/{response_id}", 200)]
    ids = {}
    for method, path, status in calls:
        answer = httpx.request(method, f"{first.url}{path}", headers=auth, timeout=10)
        assert answer.status_code == status, (path, answer.text)
        ids[answer.headers["x-request-id"]] = (method, status)
    records = [r for r in access_records(first, lambda rs: ids.keys() <= {r.get("request_id") for r in rs})
               if r.get("request_id") in ids]
    assert len(records) == len(calls)
    assert {r["path"] for r in records} == {"/v1/models", "/v1/responses/{id}", "/v1/responses/{id}/input_items",
                                            "/v1/responses/{id}/cancel", "/v1/continuations", "/v1/audit"}
    assert all(r["key_id"] == records[0]["key_id"] and r["key_id"] for r in records)
    assert all((r["method"], r["status"]) == ids[r["request_id"]] for r in records)
    assert response_id not in "".join(str(r) for r in records)
