"""An embeddings request's trace (``embeddings {model}`` span, failed attempts as events) and access record."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.conftest import Gateway, gateway_config
from tests.e2e.test_observability import COLLECTOR_TOKEN, by_name, caller_traceparent, log_records
from tests.fakes.otlp_receiver import OtlpReceiver
from tests.fakes.upstream import FakeUpstream, Reply

MODELS = """
  vectors:
    kind: embeddings
    targets:
      - {provider: primary, model: emb-a, dimensions: 8, price: {input_per_mtok: 10}}
      - {provider: secondary, model: emb-b, dimensions: 8, price: {input_per_mtok: 10}}
"""


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver().start()
    yield server  # type: ignore[misc]
    server.stop()


@pytest.fixture(scope="module")
def traced(fakes: dict[str, FakeUpstream], receiver: OtlpReceiver) -> Iterator[Gateway]:
    config = gateway_config(fakes, extra_models=MODELS) + f"""
observability:
  otlp_endpoint: "{receiver.url}"
  headers: {{authorization: "Bearer {COLLECTOR_TOKEN}"}}
  sample_ratio: 1
logging: {{format: json, level: info, access: true}}
"""
    gw = Gateway(config, env={"OTEL_BSP_SCHEDULE_DELAY": "50"}).start()
    yield gw
    gw.stop()


def test_embeddings_span_and_access_record(traced: Gateway, fakes: dict[str, FakeUpstream],
                                           receiver: OtlpReceiver) -> None:
    fakes["primary"].queue(Reply(status=503))
    traceparent, trace_id, _ = caller_traceparent()
    response = traced.post("/v1/embeddings", {"model": "vectors", "input": ["a", "b"]},
                           headers={"traceparent": traceparent})
    assert response.status_code == 200, response.text
    tokens = response.json()["usage"]["prompt_tokens"]
    spans = receiver.trace(trace_id, 2)
    assert sorted(span.name for span in spans) == ["POST /v1/embeddings", "embeddings emb-a"]
    (server,) = by_name(spans, "POST")
    (call,) = by_name(spans, "embeddings ")
    assert call.parent_span_id == server.span_id and call.kind == "client"
    assert call.attributes["gen_ai.operation.name"] == "embeddings"
    assert call.attributes["loopgate.target"] == "secondary:emb-b"
    assert call.attributes["gen_ai.usage.input_tokens"] == tokens
    assert call.attributes["gen_ai.provider.name"] == "openai" and call.attributes["loopgate.attempts"] == 2
    (attempt,) = [attrs for name, attrs in call.events if name == "loopgate.attempt"]
    assert attempt["loopgate.target"] == "primary:emb-a" and attempt["error.type"] == "overloaded"
    assert attempt["http.response.status_code"] == 503
    assert server.attributes["loopgate.route"] == "vectors"
    request_id = response.headers["x-request-id"]
    records = log_records(traced, lambda found: any(r.get("request_id") == request_id for r in found))
    (access,) = [r for r in records if r.get("request_id") == request_id and r.get("message") == "access"]
    assert access["path"] == "/v1/embeddings" and access["route"] == "vectors" and access["status"] == 200
    assert access["answered_by"] == ["secondary:emb-b"] and access["prompt_tokens"] == tokens
    assert access["cost_usd"] == pytest.approx(tokens * 10 / 1_000_000)


def test_a_failed_embeddings_call_is_an_error_span(traced: Gateway, fakes: dict[str, FakeUpstream],
                                                   receiver: OtlpReceiver) -> None:
    fakes["primary"].queue(Reply(status=500))
    fakes["secondary"].queue(Reply(status=500))
    traceparent, trace_id, _ = caller_traceparent()
    response = traced.post("/v1/embeddings", {"model": "vectors", "input": "a"}, headers={"traceparent": traceparent})
    assert response.status_code == 502
    spans = receiver.trace(trace_id, 2)
    (call,) = by_name(spans, "embeddings ")
    assert call.attributes["error.type"] == "server_error"
    assert [attrs["loopgate.target"] for name, attrs in call.events if name == "loopgate.attempt"] == [
        "primary:emb-a", "secondary:emb-b"]
