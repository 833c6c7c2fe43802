"""The shipper and its exporter process, without a gateway: frames split to fit, bad requests dropped alone."""

from __future__ import annotations

import os
import time

import orjson
import pytest

from gateway import metrics
from gateway.config.observability_section import ObservabilityConfig
from gateway.tracing_lean import SERVER
from gateway.tracing_ship import Shipper
from tests.fakes.otlp_receiver import OtlpReceiver


def record(span_id: int, text: str) -> list[object]:
    now = time.time_ns()
    return [f"GET /{span_id}", SERVER, span_id, 0, now, now + 1000, {"loopgate.text": text}, [], 0, ""]


def test_batches_are_split_to_the_frame_limit_and_oversized_or_unencodable_requests_dropped() -> None:
    receiver = OtlpReceiver().start()
    os.environ["OTEL_BSP_SCHEDULE_DELAY"] = "50"  # the exporter process inherits it
    try:
        config = ObservabilityConfig(otlp_endpoint=receiver.url, max_frame_bytes=64 << 10, shutdown_timeout_s=10)
        before = metrics.TRACE_SPANS_DROPPED.get("too_large")
        unencodable = metrics.TRACE_SPANS_DROPPED.get("unencodable")
        shipper = Shipper(config)
        trace_hex = os.urandom(16).hex()
        for span_id in range(1, 201):  # ~200 kB: at least four frames
            shipper.submit(trace_hex, [record(span_id, "x" * 1000)])
        shipper.submit(trace_hex, [record(999, "y" * (70 << 10))])  # alone over the limit
        huge = record(998, "z")
        huge[6]["gen_ai.request.max_tokens"] = 10 ** 30  # type: ignore[index]
        shipper.submit(trace_hex, [huge])  # not JSON-encodable: dropped alone, the rest of its batch goes
        shipper.close()
        assert shipper.process is not None and shipper.process.returncode == 0
        spans = receiver.trace(trace_hex, 200, timeout_s=5)
        assert sorted(int(span.span_id, 16) for span in spans) == list(range(1, 201))
        assert spans[0].kind == "server" and spans[0].attributes["loopgate.text"] == "x" * 1000
        assert metrics.TRACE_SPANS_DROPPED.get("too_large") == before + 1
        assert metrics.TRACE_SPANS_DROPPED.get("unencodable") == unencodable + 1
        assert shipper.buffered() == 0
    finally:
        os.environ.pop("OTEL_BSP_SCHEDULE_DELAY", None)
        receiver.stop()


def test_records_by_position_get_their_names_and_only_the_values_that_are_set() -> None:
    from gateway.tracing_lean import CHAT_ATTRIBUTES, SERVER_ATTRIBUTES, expand

    name, attributes = expand(None, [SERVER_ATTRIBUTES, "POST", "/v1/chat/completions", "smart", "req_1", None, 200,
                                     None, {"loopgate.extra": 1}])
    assert name == "POST /v1/chat/completions"
    assert attributes == {"http.request.method": "POST", "http.route": "/v1/chat/completions",
                          "loopgate.route": "smart", "loopgate.request_id": "req_1",
                          "http.response.status_code": 200, "loopgate.extra": 1}
    name, attributes = expand(None, [CHAT_ATTRIBUTES, "gemini", "m1", "p:m1", "m1-2025", "stop", 10, 3, None, 0,
                                     0.5, True, 100, 200, None])
    assert name == "chat m1"
    assert attributes == {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "gcp.gemini",
                          "gen_ai.request.model": "m1", "loopgate.target": "p:m1", "gen_ai.response.model": "m1-2025",
                          "gen_ai.response.finish_reasons": ["stop"], "gen_ai.usage.input_tokens": 10,
                          "gen_ai.usage.output_tokens": 3, "gen_ai.usage.cache_read.input_tokens": 0,
                          "gen_ai.request.temperature": 0.5, "gen_ai.request.max_tokens": 200}  # true: not a number
    _, attributes = expand(None, [CHAT_ATTRIBUTES, "brand-new", "m", "p:m", None, None, None, None, None, None,
                                  "0.5", None, 100, "x" * 9, {"error.type": "timeout"}])
    assert attributes["gen_ai.provider.name"] == "brand-new" and attributes["error.type"] == "timeout"
    assert "gen_ai.request.temperature" not in attributes and attributes["gen_ai.request.max_tokens"] == 100
    assert expand("GET /x", {"a": 1}) == ("GET /x", {"a": 1})  # by name: as it is
    for bad in ([], [99, "x", None], [SERVER_ATTRIBUTES, "POST"], ["1", *[None] * 8], [CHAT_ATTRIBUTES, *[None] * 11]):
        with pytest.raises(ValueError):
            expand(None, bad)
    with pytest.raises(ValueError):
        expand(None, {"a": 1})


def test_encoded_requests_are_packed_into_frames_in_order_and_under_the_limit() -> None:
    from gateway.tracing_ship import packed

    entries = [(n % 3 + 1, orjson.dumps([f"{n:032x}", ["x" * (n * 7 % 50)]])) for n in range(200)]
    frames = list(packed(entries, 400))
    assert all(len(payload) <= 400 for _, payload in frames) and len(frames) > 10
    assert sum(count for count, _ in frames) == sum(count for count, _ in entries)
    decoded = [entry for _, payload in frames for entry in orjson.loads(payload)]
    assert decoded == [orjson.loads(encoded) for _, encoded in entries]
    assert list(packed([], 400)) == []
    ((count, payload),) = packed([(2, b"[1]")], 5)  # one entry alone, exactly at the limit
    assert (count, payload) == (2, b"[[1]]")


def test_the_exporters_resource_hashes_once_and_equals_the_sdks() -> None:
    from opentelemetry.sdk.resources import Resource

    from gateway.tracing_export import FixedResource, Rebuilder

    base = Resource.create({"service.name": "loopgate", "service.version": "9"})
    fixed = FixedResource(base)
    assert fixed == base and hash(fixed) == hash(base) and dict(fixed.attributes) == dict(base.attributes)
    assert {fixed: 1}[base] == 1  # the encoder's grouping finds it under either
    resource = Rebuilder("loopgate", "9").resource
    assert resource.attributes["service.name"] == "loopgate" and isinstance(resource, FixedResource)


def test_span_status_is_an_error_for_a_5xx_answer_and_a_failed_model_call_only() -> None:
    from types import SimpleNamespace

    from gateway.tracing_lean import ERROR, UNSET, LeanTracer, expand

    shipped: list[tuple[str, list[list[object]]]] = []
    tracer = LeanTracer(ObservabilityConfig(otlp_endpoint="http://127.0.0.1:9"),
                        lambda trace, spans: shipped.append((trace, spans)))
    for status, error, expected in [(200, None, (UNSET, "")), (400, "invalid_request_error", (UNSET, "")),
                                    (502, "upstream_error", (ERROR, "upstream_error")), (503, None, (ERROR, "503"))]:
        tracer.server("POST", "/v1/chat/completions", None).finish(status, error)
        record = shipped.pop()[1][-1]
        assert (record[8], record[9]) == expected
    span = tracer.server("POST", "/v1/chat/completions", None)
    target = SimpleNamespace(model="m1", label="p:m1", provider=SimpleNamespace(type="openai"))
    call = span.model_call([target], SimpleNamespace(params={}, messages=[]))
    call.failed(TimeoutError(), [{"target": "p:m1", "error_class": "timeout", "elapsed_ms": 5.0}])
    span.finish(504, "timeout")
    chat, server = shipped.pop()[1]
    name, attributes = expand(chat[0], chat[6])  # type: ignore[arg-type]
    assert name == "chat m1" and (chat[8], chat[9]) == (ERROR, "TimeoutError")
    assert attributes["error.type"] == "TimeoutError" and attributes["gen_ai.provider.name"] == "openai"
    assert chat[7][0][0] == "loopgate.attempt" and server[3] == 0 and chat[3] == server[2]  # type: ignore[index]
