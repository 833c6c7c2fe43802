"""The shipper and its exporter process, without a gateway: frames split to fit, bad requests dropped alone."""

from __future__ import annotations

import os
import time

import orjson
import pytest

from gateway.config.observability_section import ObservabilityConfig
from gateway.observability import metrics
from gateway.observability.shipper import Shipper
from tests.fakes.otlp_receiver import OtlpReceiver


def record(trace_hex: str, span_id: int, text: str) -> list[object]:
    """A request's entry with its server span alone (``Entry`` in gateway/observability/span_entries.py)."""
    now = time.time_ns()
    return [trace_hex, 0, span_id, now, now + 1000, "GET", f"/{span_id}", None, None, None, 200, None, [],
            {"loopgate.text": text}, []]


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
            shipper.submit(record(trace_hex, span_id, "x" * 1000), 1)
        shipper.submit(record(trace_hex, 999, "y" * (70 << 10)), 1)  # alone over the limit
        huge = record(trace_hex, 998, "z")
        huge[13]["gen_ai.request.max_tokens"] = 10 ** 30  # type: ignore[index]
        shipper.submit(huge, 1)  # not JSON-encodable: dropped alone, the rest of its batch goes
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


def test_entries_are_rebuilt_with_the_conventions_names_and_only_the_values_that_are_set() -> None:
    from gateway.observability.span_entries import CHAT, CLIENT, INTERNAL, SERVER, TOOL, rebuild

    trace = "0af7651916cd43dd8448eb211c80319c"
    answered = [CHAT, 0, 10, 20, "", [], None, "gemini", "m1", "p:m1", "", "stop", 10, 3, "", 0, 0.5, True, 100,
                200]
    failed = [CHAT, 7, 11, 21, "timeout", [["loopgate.attempt", 12, {"error.type": "timeout"}]],
              {"error.type": "timeout"}, "brand-new", "m", "p:m", None, None, None, None, None, None, "0.5", None,
              100, "x" * 9]
    tool = [TOOL, 9, 12, 13, "", [], "get_weather", {"gen_ai.tool.name": "get_weather"}]
    entry = [trace, 0xB7AD6B7169203331, 5, 1, 30, "POST", "/v1/chat/completions", "smart", "req_1", None, 200, None,
             [], {"loopgate.extra": 1}, [answered, failed, tool]]
    server, chat, failure, ran = rebuild(entry)
    assert server == (trace, 5, 0xB7AD6B7169203331, True, SERVER, "POST /v1/chat/completions", 1, 30,
                      {"http.request.method": "POST", "http.route": "/v1/chat/completions", "loopgate.route": "smart",
                       "loopgate.request_id": "req_1", "http.response.status_code": 200, "loopgate.extra": 1}, [], "")
    assert chat[1] != 0 and chat[2:8] == (5, False, CLIENT, "chat m1", 10, 20)  # an id made here
    assert chat[8] == {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "gcp.gemini",
                       "gen_ai.request.model": "m1", "loopgate.target": "p:m1",
                       "gen_ai.response.model": "m1",  # the answer named none: the requested model
                       "gen_ai.response.finish_reasons": ["stop"], "gen_ai.usage.input_tokens": 10,
                       "gen_ai.usage.output_tokens": 3, "gen_ai.request.temperature": 0.5,
                       "gen_ai.request.max_tokens": 200}  # top_p true: not a number; max_completion_tokens wins
    assert failure[1] == 7 and failure[10] == "timeout" and failure[9] == failed[5]
    assert failure[8] == {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "brand-new",
                          "gen_ai.request.model": "m", "loopgate.target": "p:m", "gen_ai.request.max_tokens": 100,
                          "error.type": "timeout"}  # "0.5" is no number; no usage, no response model
    assert ran == (trace, 9, 5, False, INTERNAL, "execute_tool get_weather", 12, 13,
                   {"gen_ai.tool.name": "get_weather"}, [], "")
    ids = {span[1] for _ in range(200) for span in rebuild([trace, 5, [answered]])}  # a late child alone
    assert len(ids) == 200 and 0 not in ids
    for bad in ([], "x", [trace, 5], [trace, 5, [[99]]], [trace, 5, [answered[:-1]]], [trace, 5, [[*tool, 1]]],
                [trace, 5, "children"], [5, 5, []], [*entry[:-1]]):
        with pytest.raises(ValueError):
            list(rebuild(bad))


def test_encoded_requests_are_packed_into_frames_in_order_and_under_the_limit() -> None:
    from gateway.observability.shipper import packed

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

    from gateway.observability.exporter import FixedResource, Rebuilder

    base = Resource.create({"service.name": "loopgate", "service.version": "9"})
    fixed = FixedResource(base)
    assert fixed == base and hash(fixed) == hash(base) and dict(fixed.attributes) == dict(base.attributes)
    assert {fixed: 1}[base] == 1  # the encoder's grouping finds it under either
    resource = Rebuilder("loopgate", "9").resource
    assert resource.attributes["service.name"] == "loopgate" and isinstance(resource, FixedResource)


def test_span_status_is_an_error_for_a_5xx_answer_and_a_failed_model_call_only() -> None:
    from types import SimpleNamespace

    from gateway.observability.recorder import LeanTracer
    from gateway.observability.span_entries import rebuild

    shipped: list[tuple[list[object], int]] = []
    tracer = LeanTracer(ObservabilityConfig(otlp_endpoint="http://127.0.0.1:9"),
                        lambda entry, count: shipped.append((entry, count)))
    for status, error, expected in [(200, None, ""), (400, "invalid_request_error", ""),
                                    (502, "upstream_error", "upstream_error"), (503, None, "503")]:
        tracer.server("POST", "/v1/chat/completions", None).finish(status, error)
        entry, count = shipped.pop()
        assert count == 1 and next(rebuild(entry))[10] == expected
    span = tracer.server("POST", "/v1/chat/completions", None)
    target = SimpleNamespace(model="m1", label="p:m1", provider=SimpleNamespace(type="openai"))
    call = span.model_call([target], SimpleNamespace(params={}, messages=[]))
    call.event("loopgate.note", {"a": 1})
    call.failed(TimeoutError(), [{"target": "p:m1", "error_class": "timeout", "elapsed_ms": 5.0}])
    span.finish(504, "timeout")
    entry, count = shipped.pop()
    server, chat = rebuild(entry)
    assert count == 2 and server[10] == "timeout"
    assert chat[5] == "chat m1" and chat[10] == "TimeoutError" and chat[2] == server[1]  # a child of the server span
    assert chat[8]["error.type"] == "TimeoutError" and chat[8]["gen_ai.provider.name"] == "openai"
    assert [event[0] for event in chat[9]] == ["loopgate.note", "loopgate.attempt"]
    late = span.model_call([target], SimpleNamespace(params={"temperature": 1}, messages=[]))
    late.answered(target, SimpleNamespace(usage=SimpleNamespace(prompt_tokens=1, completion_tokens=2, cached_tokens=0),
                                          model="m1-x", finish_reason="stop", id="r1", message={}), [])
    entry, count = shipped.pop()  # ended after its request's span: shipped alone, still its child
    (chat,) = rebuild(entry)
    assert count == 1 and chat[0] == server[0] and chat[2] == server[1] and chat[8]["gen_ai.response.id"] == "r1"
    assert chat[8]["gen_ai.request.temperature"] == 1 and chat[8]["gen_ai.response.model"] == "m1-x"


def test_an_operation_span_records_its_walks_failed_attempts_as_a_model_call_span_does() -> None:
    from types import SimpleNamespace

    from gateway.observability.recorder import LeanTracer
    from gateway.observability.span_entries import rebuild

    shipped: list[tuple[list[object], int]] = []
    tracer = LeanTracer(ObservabilityConfig(otlp_endpoint="http://127.0.0.1:9"),
                        lambda entry, count: shipped.append((entry, count)))
    attempts = [{"target": "a:e", "error_class": "upstream_error", "status": 503, "elapsed_ms": 4.0},
                {"target": "b:e", "error_class": "timeout", "status": None, "elapsed_ms": 7.0},
                {"target": "c:e", "error_class": None, "status": None, "elapsed_ms": 2.0}]
    span = tracer.server("POST", "/v1/embeddings", None)
    span.operation("embeddings e", {"gen_ai.operation.name": "embeddings", "gen_ai.provider.name": "openai"}
                   ).operation_done("", attempts)
    target = SimpleNamespace(model="m", label="c:e", provider=SimpleNamespace(type="openai"))
    span.model_call([target], SimpleNamespace(params={}, messages=[])).answered(target, SimpleNamespace(
        usage=SimpleNamespace(prompt_tokens=1, completion_tokens=2, cached_tokens=0), model="m", finish_reason="stop",
        id="", message={}), attempts)
    span.operation("embeddings e", {}).operation_done("timeout", attempts[:2])
    span.finish(200, None)
    (entry, count) = shipped.pop()
    _, operation, chat, failed = rebuild(entry)
    assert count == 4 and operation[5] == "embeddings e" and operation[10] == "" and failed[10] == "timeout"
    assert [event[2] for event in operation[9]] == [event[2] for event in chat[9]] == [
        {"loopgate.target": "a:e", "error.type": "upstream_error", "loopgate.elapsed_ms": 4.0,
         "http.response.status_code": 503},
        {"loopgate.target": "b:e", "error.type": "timeout", "loopgate.elapsed_ms": 7.0}]
    assert {event[0] for event in operation[9]} == {"loopgate.attempt"}
    assert operation[8]["loopgate.attempts"] == chat[8]["loopgate.attempts"] == 3
    assert operation[8]["gen_ai.provider.name"] == "openai" and failed[8]["error.type"] == "timeout"
