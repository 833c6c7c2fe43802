"""Webhook notifications end to end: real gateway processes, a real receiver, the built-in mock model.

The mock model calls ``delete_record`` (approval required) whenever the user message names it,
so every request below pauses (or, headless, is denied) without scripting an upstream.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import time
from collections.abc import Iterator

import httpx
import pytest
import redis

from gateway.notify import verify
from tests.e2e.conftest import HEADLESS_KEY, KEY, Gateway, require_redis
from tests.fakes.webhook_receiver import Delivery, WebhookReceiver
from tests.ports import free_port

REDIS_URL = os.environ["LOOPGATE_TEST_REDIS_URL"]  # the suite's own server (tests/conftest.py)
IN_CI = os.environ.get("CI", "").lower() == "true"
SECRET = "whsec-test-0123456789"
ASK = [{"role": "user", "content": "Please use delete_record on record 42."}]
PUBLIC = "https://gateway.example.com"
APPROVER_KEY = "approver-key"


def config(hooks: str, store_url: str = "memory://", ttl_s: int = 600, extra: str = "") -> str:
    return f"""
server: {{host: 127.0.0.1, port: __PORT__, public_url: "{PUBLIC}/"}}
auth:
  keys:
    - {{key: {KEY}, tenant: team-a, name: alice}}
    - {{key: {APPROVER_KEY}, tenant: team-a, name: bob, role: approver}}
    - {{key: {HEADLESS_KEY}, tenant: jobs, headless: true, name: nightly}}
store: {{url: "{store_url}", continuation_ttl_s: {ttl_s}}}
providers:
  mock: {{type: mock}}
tools:
  delete_record:
    description: Delete a record
    parameters: {{type: object, properties: {{id: {{type: string}}}}, required: [id]}}
    python: "tests.e2e.sample_tools:delete_record"
    approval: required
  delete_soon:
    description: Delete a record (the approval times out after a second)
    parameters: {{type: object, properties: {{id: {{type: string}}}}, required: [id]}}
    python: "tests.e2e.sample_tools:delete_record"
    approval: required
    approval_timeout_s: 1
models:
  agent: {{targets: [{{provider: mock, model: m}}], tools: [delete_record, delete_soon]}}
  plain: {{targets: [{{provider: mock, model: m}}]}}
notifications:
  backoff_base_s: 0.2
  backoff_max_s: 1
{extra}
  webhooks:
{hooks}
"""


def hook(url: str, events: str = "[paused, resumed, decided, expired, headless_denied]", fmt: str = "json",
         timeout_s: float = 5) -> str:
    return f"    - {{url: '{url}', secret: {SECRET}, events: {events}, format: {fmt}, timeout_s: {timeout_s}}}\n"


@pytest.fixture(scope="module")
def receiver() -> Iterator[WebhookReceiver]:
    server = WebhookReceiver()
    server.start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _fresh(receiver: WebhookReceiver) -> None:
    receiver.reset()


def pause(gateway: Gateway) -> dict[str, object]:
    completion = gateway.client().chat.completions.create(model="agent", messages=ASK)
    extension = completion.model_extra["gateway"]
    assert extension["status"] == "paused", extension
    return extension


def signed(delivery: Delivery) -> bool:
    return verify(SECRET, delivery.body, delivery.headers["X-Loopgate-Signature"])


def of_type(deliveries: list[Delivery], kind: str) -> list[Delivery]:
    return [d for d in deliveries if d.json.get("type") == kind]


def wait_type(receiver: WebhookReceiver, path: str, kind: str, count: int = 1, timeout: float = 15) -> list[Delivery]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = of_type(receiver.at(path), kind)
        if len(found) >= count:
            return found
        time.sleep(0.05)
    raise AssertionError(f"no {kind} at {path}: {[d.json.get('type') for d in receiver.at(path)]}")


@pytest.fixture(scope="module")
def gateway(receiver: WebhookReceiver) -> Iterator[Gateway]:
    hooks = (hook(f"{receiver.url}/ok") + hook(f"{receiver.url}/slack", "[paused, decided]", "slack")
             + hook(f"{receiver.url}/flaky", "[paused]"))
    gw = Gateway(config(hooks)).start()
    yield gw
    gw.stop()


def test_paused_event_is_signed_and_carries_digests_not_arguments(gateway: Gateway, receiver: WebhookReceiver) -> None:
    paused = pause(gateway)
    [delivery] = wait_type(receiver, "/ok", "paused")
    assert signed(delivery)
    assert not verify("another-secret", delivery.body, delivery.headers["X-Loopgate-Signature"])
    assert not verify(SECRET, delivery.body + b" ", delivery.headers["X-Loopgate-Signature"])
    event = delivery.json
    assert delivery.headers["X-Loopgate-Event-Id"] == event["id"] and event["id"].startswith("evt_")
    assert delivery.headers["X-Loopgate-Event"] == "paused"
    assert event["tenant"] == "team-a" and event["route"] == "agent"
    assert event["continuation_id"] == paused["continuation_id"]
    shown = httpx.get(f"{gateway.url}/v1/continuations/{paused['continuation_id']}",
                      headers={"authorization": f"Bearer {KEY}"}).json()["pending"][0]
    [call] = event["tool_calls"]
    assert call == {"tool_call_id": shown["tool_call_id"], "name": "delete_record", "reason": "approval",
                    "arguments_sha256": hashlib.sha256(shown["arguments"].encode()).hexdigest()}
    assert b'"42"' not in delivery.body and "arguments" not in call  # argument values never leave
    assert abs(event["created_at"] - time.time()) < 60 and event["expires_at"] > event["created_at"]


def test_decision_emits_decided_and_resumed(gateway: Gateway, receiver: WebhookReceiver) -> None:
    paused = pause(gateway)
    call_id = paused["pending"][0]["tool_call_id"]
    done = gateway.post(f"/v1/continuations/{paused['continuation_id']}",
                        {"decisions": [{"tool_call_id": call_id, "approve": False, "reason": "not <today>"}]},
                        key=APPROVER_KEY)
    assert done.status_code == 200, done.text
    [decided] = wait_type(receiver, "/ok", "decided")
    [resumed] = wait_type(receiver, "/ok", "resumed")
    assert signed(decided) and signed(resumed)
    assert decided.json["continuation_id"] == resumed.json["continuation_id"] == paused["continuation_id"]
    assert decided.json["decisions"] == [{"tool_call_id": call_id, "name": "delete_record", "approved": False,
                                          "reason": "not <today>"}]
    assert resumed.json["way"] == "b"
    # The answer the decider received, by id: the asker fetches it with GET /v1/continuations/{id}.
    assert resumed.json["result_id"] == done.json()["id"] and resumed.json["result_status"] == "completed"
    assert decided.json["decided_by"] == "bob" and decided.json["asked_by"] == "alice"
    assert decided.json["id"] != resumed.json["id"]


def test_headless_denial_event(gateway: Gateway, receiver: WebhookReceiver) -> None:
    done = gateway.client(HEADLESS_KEY).chat.completions.create(model="agent", messages=ASK)
    assert done.model_extra["gateway"]["headless_denials"]
    [delivery] = wait_type(receiver, "/ok", "headless_denied")
    event = delivery.json
    assert signed(delivery) and event["tenant"] == "jobs" and event["tool_calls"][0]["name"] == "delete_record"
    assert event["continuation_id"] is None and event["reason"] and event["decided_by"] == "nightly"
    assert event["route"] == "agent"


def test_retry_after_500_then_success(gateway: Gateway, receiver: WebhookReceiver) -> None:
    paused = pause(gateway)

    def mine() -> list[Delivery]:  # earlier tests' pauses are retried here too
        return [d for d in receiver.at("/flaky") if d.json["continuation_id"] == paused["continuation_id"]]

    deadline = time.monotonic() + 15
    while len(mine()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    first, second = mine()
    assert (first.status, second.status) == (500, 200)
    assert first.headers["X-Loopgate-Event-Id"] == second.headers["X-Loopgate-Event-Id"]
    assert first.body == second.body and signed(first) and signed(second)
    time.sleep(1.5)  # longer than the next backoff: a delivered event is not sent again
    assert len(mine()) == 2


def test_slack_payload_links_to_the_inbox(gateway: Gateway, receiver: WebhookReceiver) -> None:
    paused = pause(gateway)
    [delivery] = receiver.wait_for("/slack", 1)
    assert signed(delivery)
    payload = delivery.json
    assert set(payload) == {"text", "blocks"}
    assert "Approval needed" in payload["text"] and "delete_record" in payload["text"]
    assert "asked by *alice*" in payload["text"]
    assert f"<{PUBLIC}/ui/approvals|" in payload["text"]  # public_url's trailing slash is dropped
    kinds = [b["type"] for b in payload["blocks"]]
    assert kinds == ["section", "context", "actions"]
    assert payload["blocks"][0]["text"]["type"] == "mrkdwn"
    assert str(paused["continuation_id"]) in payload["blocks"][1]["elements"][0]["text"]
    button = payload["blocks"][2]["elements"][0]
    assert button["type"] == "button" and button["url"] == f"{PUBLIC}/ui/approvals"
    # resumed is not subscribed by this receiver; the decided event is, with mrkdwn escaped
    gateway.post(f"/v1/continuations/{paused['continuation_id']}",
                 {"decisions": [{"tool_call_id": paused["pending"][0]["tool_call_id"], "approve": False,
                                 "reason": "<!channel> & co"}]})
    second = receiver.wait_for("/slack", 2)[1].json
    assert "&lt;!channel&gt; &amp; co" in second["text"] and "<!channel>" not in second["text"]


def test_expired_when_a_pause_is_never_answered(receiver: WebhookReceiver) -> None:
    # A path of its own: the module's gateway may still deliver earlier tests' events to /ok.
    gw = Gateway(config(hook(f"{receiver.url}/ttl", "[expired]"), ttl_s=3)).start()
    try:
        paused = pause(gw)
        [delivery] = wait_type(receiver, "/ttl", "expired")
        assert signed(delivery) and delivery.json["continuation_id"] == paused["continuation_id"]
        assert delivery.json["reason"] == "the continuation expired unanswered"
        assert [d.json["type"] for d in receiver.at("/ttl")] == ["expired"]  # only what it subscribed to
    finally:
        gw.stop()


def test_expired_when_an_approval_times_out(receiver: WebhookReceiver) -> None:
    gw = Gateway(config(hook(f"{receiver.url}/deadline", "[paused, expired]"))).start()
    try:
        completion = gw.client().chat.completions.create(
            model="agent", messages=[{"role": "user", "content": "Please use delete_soon on record 7."}])
        paused = completion.model_extra["gateway"]
        [delivery] = wait_type(receiver, "/deadline", "expired")  # long before the continuation's TTL (600 s)
        event = delivery.json
        assert signed(delivery) and event["continuation_id"] == paused["continuation_id"]
        assert event["reason"] == "approval timed out" and event["tool_calls"][0]["name"] == "delete_soon"
        assert event["asked_by"] == "alice"
    finally:
        gw.stop()


def test_a_dead_receiver_adds_nothing_to_request_latency(receiver: WebhookReceiver) -> None:
    """A receiver that hangs (timeout 8 s) and one that refuses connections, against a healthy one."""
    closed = f"http://127.0.0.1:{free_port()}/refused"  # nothing listens there: connecting is refused
    dead = Gateway(config(hook(f"{receiver.url}/hang", timeout_s=8) + hook(closed)
                          + hook(f"{receiver.url}/fine", "[paused]"))).start()
    healthy = Gateway(config(hook(f"{receiver.url}/ok"))).start()
    try:
        for gw in (dead, healthy):
            pause(gw)  # warm-up; for the dead one, this starts the attempt that hangs
        [hung] = receiver.wait_for("/hang", 1)
        timings: dict[str, list[float]] = {"dead": [], "healthy": []}
        for _ in range(5):
            for name, gw in (("dead", dead), ("healthy", healthy)):
                started = time.perf_counter()
                pause(gw)
                timings[name].append(time.perf_counter() - started)
        finished = time.time()
        # Every request finished while the first attempt was still hanging (not even timed out yet) ...
        assert hung.ended_at is None and finished - hung.at < 8
        # ... and took about as long as with a healthy receiver (generous margin: CI machines are noisy).
        assert statistics.median(timings["dead"]) < statistics.median(timings["healthy"]) * 3 + 0.25, timings
        assert max(timings["dead"]) < 2.0, timings
        # A hanging receiver holds one delivery slot, not the deliveries to the others.
        receiver.wait_for("/fine", 6, timeout=5)
        assert hung.ended_at is None
    finally:
        dead.stop()
        healthy.stop()


def _metric(gw: Gateway, series: str) -> float:
    for line in httpx.get(f"{gw.url}/metrics").text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


# -- two replicas sharing Redis -------------------------------------------------------------------

@pytest.mark.long(seconds=10)
def test_two_replicas_deliver_each_event_exactly_once(receiver: WebhookReceiver) -> None:
    require_redis(REDIS_URL)
    redis.Redis.from_url(REDIS_URL).flushdb()
    text = config(hook(f"{receiver.url}/slow", "[paused, headless_denied]") + hook(f"{receiver.url}/replica"),
                  store_url=REDIS_URL)
    first, second = Gateway(text).start(), Gateway(text).start()
    try:
        rounds = 15
        for i in range(rounds):
            gw = first if i % 2 else second
            pause(gw)
            gw.client(HEADLESS_KEY).chat.completions.create(model="agent", messages=ASK)
        expected = rounds * 2
        slow = receiver.wait_for("/slow", expected, timeout=30)
        everything = receiver.wait_for("/replica", expected, timeout=30)
        time.sleep(2.5)  # longer than a poll interval of both workers: nothing more may arrive
        for path, found in (("/slow", receiver.at("/slow")), ("/replica", receiver.at("/replica"))):
            ids = [d.headers["X-Loopgate-Event-Id"] for d in found]
            assert len(ids) == expected and len(set(ids)) == expected, (path, len(ids), len(set(ids)))
            assert all(signed(d) for d in found)
        assert {d.json["id"] for d in slow} == {d.json["id"] for d in everything}  # the same events, each receiver once
        # Nothing left behind but the pauses' expiry checks (due near their TTL).
        client = redis.Redis.from_url(REDIS_URL)
        assert client.zcard("loopgate:{outbox:deliveries}:due") == client.hlen("loopgate:{outbox:deliveries}:jobs") == 0
        assert client.zcard("loopgate:{outbox:checks}:due") == rounds
        delivered = [_metric(gw, 'loopgate_webhook_deliveries_total{outcome="delivered"}') for gw in (first, second)]
        assert sum(delivered) == expected * 2, delivered
    finally:
        first.stop()
        second.stop()
        redis.Redis.from_url(REDIS_URL).flushdb()
