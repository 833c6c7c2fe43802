"""Failover fault matrix, circuit breaker and deadlines, against fake upstreams over real HTTP."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.e2e.conftest import PROVIDER_MODELS, Gateway, gateway_config
from tests.e2e.test_continuations import REDIS_URL, require_redis
from tests.fakes.stalling import StallingUpstream
from tests.fakes.upstream import FakeUpstream, Reply

USER = [{"role": "user", "content": "hi"}]
MODELS = {**PROVIDER_MODELS, "secondary": "gpt-y"}
PAIRS = [("primary", "secondary"), ("primary", "claude"), ("primary", "gemini"), ("claude", "primary")]
# fault -> (reply that fails, error class the gateway records)
FAULTS: dict[str, tuple[Reply, str]] = {
    "429": (Reply(status=429, headers={"retry-after": "1"}), "rate_limited"),
    "500": (Reply(status=500), "server_error"),
    "503": (Reply(status=503), "overloaded"),
    "529": (Reply(status=529), "overloaded"),
    "read-timeout": (Reply(text="late", delay_s=3), "timeout"),
    "connection-reset": (Reply(fault="reset"), "connection"),
    "invalid-json": (Reply(text="x", fault="invalid_json"), "invalid_response"),
    # JSON of the wrong shape (every event of a stream): fails over, never a 500 or an empty answer.
    "wrong-shape": (Reply(text="x", fault="wrong_shape"), "invalid_response"),
    # A Retry-After date the platform cannot represent (a ValueError inside the date parser).
    "absurd-retry-after": (Reply(status=429, headers={"retry-after": "Fri, 31 Dec 99999 23:59:59 GMT"}),
                           "rate_limited"),
    "200-then-error": (Reply(text="never", fault="error_event"), "overloaded"),
    "cut-after-first-chunk": (Reply(text="Partial answer that breaks", fault="cut"), "connection"),
    "stalled": (Reply(text="Partial answer that stalls", fault="stall"), "timeout"),
}
MID_STREAM = {"cut-after-first-chunk", "stalled"}


def sse_events(response: httpx.Response) -> list[Any]:
    events = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            payload = line[6:]
            events.append(payload if payload == "[DONE]" else orjson.loads(payload))
    return events


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
@pytest.mark.parametrize(("first", "second"), PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_fault_matrix(gateway: Gateway, fakes: dict[str, FakeUpstream], first: str, second: str, stream: bool,
                      fault: str) -> None:
    failing, error_class = FAULTS[fault]
    fakes[first].queue(failing)
    fakes[second].queue(Reply(text="Answer from the fallback.", tool_calls=[("lookup", {"q": "x"})]))
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    body: dict[str, Any] = {"model": f"chain_{first}_{second}", "messages": USER, "tools": tools, "stream": stream}
    if fault in MID_STREAM:  # today's behaviour without a rescue (tests/e2e/test_stream_rescue.py: with one)
        body["gateway"] = {"stream_rescue": "off"}
    with httpx.stream("POST", f"{gateway.url}/v1/chat/completions", json=body, timeout=20,
                      headers={"authorization": "Bearer test-key"}) as response:
        if not stream:
            response.read()
            assert response.status_code == 200, response.text
            payload = response.json()
            extension, text = payload["gateway"], payload["choices"][0]["message"]["content"]
            models = {payload["model"]}
            calls = [c["function"]["arguments"] for c in payload["choices"][0]["message"]["tool_calls"]]
        else:
            assert response.status_code == 200
            events = sse_events(response)
            assert events[-1] == "[DONE]"
            text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1]
                           if isinstance(e, dict) and e.get("choices"))
            errors = [e["error"] for e in events[:-1] if "error" in e]
            if fault in MID_STREAM:
                # Bytes already reached the client: no replay, no fallback, a clean error and [DONE].
                assert len(errors) == 1 and errors[0]["code"] == "stream_interrupted"
                assert error_class in errors[0]["message"]
                assert text == FAULTS[fault][0].text[: max(1, len(FAULTS[fault][0].text) // 2)]
                assert not fakes[second].requests, "a committed stream must not fail over"
                return
            assert not errors
            extension = next(e["gateway"] for e in events[:-1] if e.get("gateway", {}).get("status"))
            models = {e["model"] for e in events[:-1]}
            calls = [d["function"]["arguments"] for e in events[:-1] if e.get("choices")
                     for d in e["choices"][0]["delta"].get("tool_calls") or []]
    assert text == "Answer from the fallback."
    assert calls == ['{"q":"x"}'], "the fallback's tool call must not be lost"
    assert extension["answered_by"] == [f"{second}:{MODELS[second]}"]
    assert models == {MODELS[second]}, "model names the fallback that answered (every chunk of a stream)"
    assert extension["route"] == f"chain_{first}_{second}"
    assert [a["error_class"] for a in extension["attempts"]] == [error_class, None]
    assert extension["attempts"][0]["target"] == f"{first}:{MODELS[first]}"


def test_no_target_answers_gives_the_last_cause(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(status=500))
    fakes["secondary"].queue(Reply(status=503, headers={"retry-after": "2"}))
    response = gateway.post("/v1/chat/completions", {"model": "chain_primary_secondary", "messages": USER})
    assert response.status_code == 503
    assert "secondary:gpt-y" in response.json()["error"]["message"]
    assert response.headers["retry-after"] == "2"


def test_callers_bad_request_is_not_failed_over(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(status=400, error_body={"error": {"message": "bad temperature",
                                                                   "type": "invalid_request_error"}}))
    response = gateway.post("/v1/chat/completions", {"model": "chain_primary_secondary", "messages": USER})
    assert response.status_code == 400 and "bad temperature" in response.json()["error"]["message"]
    assert not fakes["secondary"].requests


def test_context_length_moves_to_the_next_target(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(status=400, error_body={"error": {
        "message": "This model's maximum context length is 8192 tokens", "code": "context_length_exceeded"}}))
    fakes["secondary"].queue(Reply(text="bigger window"))
    completion = gateway.client().chat.completions.create(model="chain_primary_secondary", messages=USER)
    assert completion.choices[0].message.content == "bigger window"
    assert completion.model_extra["gateway"]["attempts"][0]["error_class"] == "context_length_exceeded"


def test_retries_with_backoff_on_the_same_target(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(status=500))
    completion = gateway.client().chat.completions.create(model="failover", messages=USER)  # retries: 1
    extension = completion.model_extra["gateway"]
    assert extension["answered_by"] == ["primary:m1"]
    assert [a["error_class"] for a in extension["attempts"]] == ["server_error", None]
    assert not fakes["secondary"].requests


def test_retry_after_beyond_the_cap_moves_on(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(status=429, headers={"retry-after": "120"}))
    started = time.monotonic()
    completion = gateway.client().chat.completions.create(model="failover", messages=USER)
    assert time.monotonic() - started < 2
    assert completion.model_extra["gateway"]["answered_by"] == ["secondary:m2"]


#: long enough that the checks made while the circuit is open fit in it on a busy machine
COOLDOWN_S = 3
BREAKER = ("{backoff_base_s: 0.01, backoff_max_s: 0.05, breaker_failures: 2, "
           f"breaker_cooldown_s: {COOLDOWN_S}, request_timeout_s: 30}}")


def wait_half_open(gw: Gateway) -> None:
    """Until the primary's cooldown is over (its circuit no longer ``open``): polled, never a fixed sleep."""
    give_up = time.monotonic() + COOLDOWN_S + 15
    while httpx.get(f"{gw.url}/readyz").json()["circuits"]["primary:gpt-x"] == "open":
        assert time.monotonic() < give_up, "the circuit never left the open state"
        time.sleep(0.05)


@pytest.fixture
def breaker_gateway(fakes: dict[str, FakeUpstream]) -> Iterator[Gateway]:
    gw = Gateway(gateway_config(fakes, routing=BREAKER)).start()
    yield gw
    gw.stop()


def test_breaker_opens_skips_and_recovers(breaker_gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    client = breaker_gateway.client()
    fakes["primary"].queue(Reply(status=500), Reply(status=500))
    for _ in range(2):
        client.chat.completions.create(model="chain_primary_secondary", messages=USER)
    assert len(fakes["primary"].requests) == 2
    skipped = client.chat.completions.create(model="chain_primary_secondary", messages=USER)
    assert len(fakes["primary"].requests) == 2, "an open circuit must not be tried"
    assert skipped.model_extra["gateway"]["attempts"][0]["error_class"] == "circuit_open"
    ready = httpx.get(f"{breaker_gateway.url}/readyz").json()
    assert ready["circuits"]["primary:gpt-x"] == "open"
    metrics = httpx.get(f"{breaker_gateway.url}/metrics").text
    assert 'loopgate_circuit_open{target="primary:gpt-x"} 1' in metrics
    assert 'loopgate_failovers_total{from_target="primary:gpt-x",error_class="server_error"}' in metrics
    wait_half_open(breaker_gateway)
    # Half-open: one probe goes to the primary; its success closes the circuit.
    probe = client.chat.completions.create(model="chain_primary_secondary", messages=USER)
    assert probe.model_extra["gateway"]["answered_by"] == ["primary:gpt-x"]
    assert httpx.get(f"{breaker_gateway.url}/readyz").json()["circuits"]["primary:gpt-x"] == "closed"


def test_failed_probe_reopens_at_once(breaker_gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    client = breaker_gateway.client()
    fakes["primary"].queue(Reply(status=500), Reply(status=500), Reply(status=500))
    for _ in range(2):
        client.chat.completions.create(model="chain_primary_secondary", messages=USER)
    wait_half_open(breaker_gateway)
    client.chat.completions.create(model="chain_primary_secondary", messages=USER)  # the probe fails
    assert len(fakes["primary"].requests) == 3
    client.chat.completions.create(model="chain_primary_secondary", messages=USER)
    assert len(fakes["primary"].requests) == 3, "one failed probe re-opens the circuit"


def test_replicas_share_a_dead_target_through_redis(fakes: dict[str, FakeUpstream]) -> None:
    require_redis(REDIS_URL)
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()
    config = gateway_config(fakes, store_url=REDIS_URL, routing=BREAKER.replace(f"breaker_cooldown_s: {COOLDOWN_S}",
                                                                                "breaker_cooldown_s: 30"))
    first, second = Gateway(config).start(), Gateway(config).start()
    try:
        fakes["primary"].queue(Reply(status=500), Reply(status=500))
        for _ in range(2):
            first.client().chat.completions.create(model="chain_primary_secondary", messages=USER)
        assert len(fakes["primary"].requests) == 2
        # The second replica's background refresher brings the shared open circuit (within ~1 s).
        deadline = time.monotonic() + 15
        while httpx.get(f"{second.url}/readyz").json()["circuits"].get("primary:gpt-x") != "open":
            assert time.monotonic() < deadline, "the second replica never saw the shared open circuit"
            time.sleep(0.05)
        answer = second.client().chat.completions.create(model="chain_primary_secondary", messages=USER)
        assert len(fakes["primary"].requests) == 2, "the second replica learned from the first one's failures"
        assert answer.model_extra["gateway"]["attempts"][0]["error_class"] == "circuit_open"
    finally:
        first.stop()
        second.stop()


def test_request_deadline(fakes: dict[str, FakeUpstream]) -> None:
    routing = "{backoff_base_s: 0.01, breaker_failures: 1000, request_timeout_s: 1}"
    gw = Gateway(gateway_config(fakes, routing=routing)).start()
    try:
        fakes["primary"].queue(Reply(text="slow", delay_s=20))
        fakes["secondary"].queue(Reply(text="never asked"))
        started = time.monotonic()
        response = gw.post("/v1/chat/completions", {"model": "chain_primary_secondary", "messages": USER})
        assert response.status_code == 504
        assert time.monotonic() - started < 10  # the 1 s deadline, never the 20 s answer (generous: a busy machine)
    finally:
        gw.stop()


def test_context_overflow_skips_targets_without_a_larger_window(fakes: dict[str, FakeUpstream]) -> None:
    extra = ("  window_chain:\n    targets: [{provider: primary, model: gpt-4o}, "
             "{provider: secondary, model: gpt-4o-mini}, {provider: claude, model: claude-sonnet-4-5}]\n")
    gw = Gateway(gateway_config(fakes, extra_models=extra)).start()
    try:
        fakes["primary"].queue(Reply(status=400, error_body={"error": {
            "message": "maximum context length exceeded", "code": "context_length_exceeded"}}))
        fakes["claude"].queue(Reply(text="200K window"))
        completion = gw.client().chat.completions.create(model="window_chain", messages=USER)
        assert completion.choices[0].message.content == "200K window"
        classes = [a["error_class"] for a in completion.model_extra["gateway"]["attempts"]]
        assert classes == ["context_length_exceeded", "window_too_small", None]
        assert not fakes["secondary"].requests, "a target with the same 128K window cannot help"
    finally:
        gw.stop()


STALLING_ROUTES = ("  via_silent: {targets: [{provider: silent, model: s}, {provider: secondary, model: gpt-y}], "
                   "retries: 3}\n"
                   "  via_drip: {targets: [{provider: drip, model: d}, {provider: secondary, model: gpt-y}]}\n")


@pytest.fixture(scope="module")
def stalling(fakes: dict[str, FakeUpstream]) -> Iterator[tuple[Gateway, dict[str, StallingUpstream]]]:
    """Providers that hold requests (see tests/fakes/stalling.py) behind a 2.5 s request deadline;
    every provider's per-read timeout is 1.5 s."""
    held = {"silent": StallingUpstream("silent").start(),
            "drip": StallingUpstream("drip", interval_s=0.2, for_s=10).start()}
    routing = "{backoff_base_s: 0.01, backoff_max_s: 0.05, breaker_failures: 1000, request_timeout_s: 2.5}"
    gw = Gateway(gateway_config({**fakes, **held}, routing=routing, extra_models=STALLING_ROUTES)).start()
    yield gw, held
    gw.stop()
    for upstream in held.values():
        upstream.stop()


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
def test_a_target_that_never_answers_is_left_at_once(stalling: tuple[Gateway, dict[str, StallingUpstream]],
                                                      fakes: dict[str, FakeUpstream], stream: bool) -> None:
    gw, held = stalling
    held["silent"].reset()
    fakes["secondary"].queue(Reply(text="from the fallback"))
    started = time.monotonic()
    if stream:
        chunks = list(gw.client().chat.completions.create(model="via_silent", messages=USER, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        extension = next(c.model_extra["gateway"] for c in chunks if (c.model_extra or {}).get("gateway"))
    else:
        completion = gw.client().chat.completions.create(model="via_silent", messages=USER)
        text, extension = completion.choices[0].message.content, completion.model_extra["gateway"]
    elapsed = time.monotonic() - started
    assert text == "from the fallback"
    # One head timeout (1.5 s), then the fallback: `retries: 3` is not spent on a silent target.
    assert [(a["target"], a["error_class"]) for a in extension["attempts"]] == [("silent:s", "timeout"),
                                                                               ("secondary:gpt-y", None)]
    # One request, so `retries: 3` was not spent on it (counted, not timed: a busy machine is slow, not retrying).
    assert held["silent"].requests == 1
    assert elapsed >= 1.4, "it was left after its head timeout, not before"


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
def test_a_dripping_upstream_is_cut_off_at_the_request_deadline(
        stalling: tuple[Gateway, dict[str, StallingUpstream]], fakes: dict[str, FakeUpstream], stream: bool) -> None:
    gw, held = stalling
    held["drip"].reset()
    started = time.monotonic()
    response = gw.post("/v1/chat/completions", {"model": "via_drip", "messages": USER, "stream": stream})
    elapsed = time.monotonic() - started
    # Each drip resets the 1.5 s per-read timeout for 10 s: only the 2.5 s request deadline ends it.
    assert response.status_code == 504, response.text
    error = response.json()["error"]
    assert error["code"] == "upstream_timeout"
    assert "drip:d" in error["message"] and "secondary" not in error["message"], "blame the target that timed out"
    assert not fakes["secondary"].requests, "no time was left for the fallback: it is not called"
    assert 2.4 < elapsed < 5


def test_a_probe_whose_client_disconnected_is_released(breaker_gateway: Gateway,
                                                       fakes: dict[str, FakeUpstream]) -> None:
    client = breaker_gateway.client()
    fakes["primary"].queue(Reply(status=500), Reply(status=500))
    for _ in range(2):
        client.chat.completions.create(model="chain_primary_secondary", messages=USER)
    wait_half_open(breaker_gateway)
    # The half-open probe streams a first piece, then stalls; the client hangs up mid-stream.
    fakes["primary"].queue(Reply(text="Partial answer that stalls", fault="stall"))
    body = {"model": "chain_primary_secondary", "messages": USER, "stream": True}
    with httpx.stream("POST", f"{breaker_gateway.url}/v1/chat/completions", json=body, timeout=20,
                      headers={"authorization": "Bearer test-key"}) as response:
        assert any("Partial" in line for line in response.iter_lines())
    # The gateway learns of the hang-up asynchronously (on a loaded machine, a moment later): until
    # then the probe is rightly held and requests go to the secondary. Released, the next one probes.
    answered_by: list[str] = []
    give_up = time.monotonic() + 5.0
    while answered_by != ["primary:gpt-x"] and time.monotonic() < give_up:
        probe = client.chat.completions.create(model="chain_primary_secondary", messages=USER)
        answered_by = probe.model_extra["gateway"]["answered_by"]
        if answered_by != ["primary:gpt-x"]:
            time.sleep(0.1)
    assert answered_by == ["primary:gpt-x"], "the probe was released, not stuck"
    assert httpx.get(f"{breaker_gateway.url}/readyz").json()["circuits"]["primary:gpt-x"] == "closed"
