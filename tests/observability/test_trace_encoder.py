"""The exporter's cached span encoder gives the official OTLP encoder's message, for every span.

Compared as parsed messages of the official protobuf definitions (field order inside the bytes is
free in protobuf; the message is what a collector sees): the SDK's own shapes, the spans the
gateway ships, a few thousand random attribute sets (each encoded twice: cold, then from the
cache), and what the real exporter process posts to a collector against what the official encoder
makes of the same input.
"""

from __future__ import annotations

import logging
import os
import random
import struct
import subprocess
import sys
import types
from typing import Any

import orjson
import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind

from gateway.observability import otlp_encoder
from gateway.observability.exporter import Rebuilder
from gateway.observability.otlp_encoder import SpanEncoder, equivalent, install, sample_spans, varint
from gateway.observability.span_entries import CHAT, TOOL
from tests.fakes.otlp_receiver import OtlpReceiver

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_NOW = 1_796_397_698_086_414_623


def _parsed(encoder: SpanEncoder, spans: list[ReadableSpan]) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest.FromString(encoder(spans).SerializePartialToString())


def _shipped(trace_hex: str = "363ac4763424bacf3fdf8f658424c2d8") -> list[Any]:
    """One request's entry as the gateway ships it (values by position, events, errors, a tool)."""
    chat = [CHAT, 11, _NOW, _NOW + 900, "", [["loopgate.attempt", _NOW + 5, {"error.type": "timeout"}]],
            {"extra.flag": True}, "openai", "gpt-4o", "openai:gpt-4o", "gpt-4o-2024", "stop", 24, 8, "chatcmpl-1", 3,
            0.5, None, 100, None]
    failed = [CHAT, 13, _NOW, _NOW + 100, "upstream_error", [], {"error.type": "upstream_error"}, "anthropic",
              "claude", "a:claude", None, None, None, None, None, None, None, None, None, None]
    tool = [TOOL, 14, _NOW + 1, _NOW + 2, "", [], "get_weather",
            {"gen_ai.tool.name": "get_weather", "gen_ai.operation.name": "execute_tool"}]
    return [trace_hex, 0xABCDEF, 12, _NOW - 5, _NOW + 1000, "POST", "/v1/chat/completions", "bench", "req_1", "acme",
            200, None, [["loopgate.pause", _NOW + 950, {"loopgate.continuation_id": "cont_1"}]], None,
            [chat, failed, tool]]


def test_the_samples_every_shape_encode_as_the_official_encoder_does() -> None:
    encoder = SpanEncoder()
    spans = sample_spans()
    assert _parsed(encoder, spans) == encode_spans(spans)
    assert _parsed(encoder, spans) == encode_spans(spans)  # again, from the cache


def test_the_gateways_spans_encode_as_the_official_encoder_does() -> None:
    rebuilt = list(Rebuilder("loopgate", "1.0").spans([_shipped(), _shipped("0" * 31 + "1")]))
    encoder = SpanEncoder()
    for _ in range(2):
        assert _parsed(encoder, rebuilt) == encode_spans(rebuilt)
    assert encode_spans(rebuilt).resource_spans[0].scope_spans[0].spans[0].attributes  # not vacuous


def _random_value(rng: random.Random) -> Any:
    pick = rng.randrange(9)
    scalars: list[Any] = [rng.choice([True, False]), rng.randrange(-3, 4), rng.choice([0.0, 1.0, -2.5, 1e300]),
                          rng.choice(["", "x", "chat", "é", "a" * 300]), rng.choice([b"", b"\x00\xff"])]
    if pick < 5:
        return scalars[pick]
    if pick == 5:
        return [rng.choice(["stop", "length", "tool_calls"]) for _ in range(rng.randrange(3))]
    if pick == 6:
        return tuple(rng.randrange(5) for _ in range(rng.randrange(3)))
    if pick == 7:
        return None
    return rng.choice([2**63 - 1, -(2**63), 2**64])  # the last is outside int64: left out by both


def test_random_attribute_sets_encode_as_the_official_encoder_does(caplog: pytest.LogCaptureFixture) -> None:
    rng = random.Random(15)
    resource = Resource.create({"service.name": "loopgate"})
    scope = InstrumentationScope("loopgate", "1")
    keys = ["a", "b", "gen_ai.request.model", "loopgate.route", "é"]
    spans = [ReadableSpan(name=f"s{n}", context=SpanContext(n + 1, n + 1, is_remote=False), resource=resource,
                          attributes={rng.choice(keys): _random_value(rng) for _ in range(rng.randrange(6))},
                          kind=rng.choice(list(SpanKind)), start_time=n, end_time=n + 1, instrumentation_scope=scope)
             for n in range(2000)]
    encoder = SpanEncoder(entries=64)  # small: the cache starts over many times
    caplog.set_level(logging.CRITICAL)  # 2**64 is logged by both encoders
    for batch in (spans[i:i + 512] for i in range(0, len(spans), 512)):
        official = encode_spans(batch)
        assert _parsed(encoder, batch) == official
        assert _parsed(encoder, batch) == official
    assert len(encoder._attributes) <= 64


def test_true_one_and_one_point_zero_stay_three_values() -> None:
    """``True == 1 == 1.0`` in Python, and equal keys share a dict slot: the cache keys by type too."""
    resource, scope = Resource.create({}), InstrumentationScope("x")
    spans = [ReadableSpan(name="s", context=SpanContext(1, n + 1, is_remote=False), resource=resource,
                          attributes={"v": value}, instrumentation_scope=scope)
             for n, value in enumerate([True, 1, 1.0])]
    received = _parsed(SpanEncoder(), spans).resource_spans[0].scope_spans[0].spans
    assert [span.attributes[0].value.WhichOneof("value") for span in received] == ["bool_value", "int_value",
                                                                                   "double_value"]


def test_the_cache_is_bounded_in_entries_and_in_value_size() -> None:
    encoder = SpanEncoder(entries=8, value_bytes=64)
    resource, scope = Resource.create({}), InstrumentationScope("x")
    for n in range(100):
        encoder.encode([ReadableSpan(name="s", context=SpanContext(1, 1, is_remote=False), resource=resource,
                                     attributes={"id": f"req_{n}", "big": "x" * 100}, instrumentation_scope=scope)])
        assert len(encoder._attributes) <= 8
    assert all(len(encoded) <= 64 for encoded in encoder._attributes.values())
    assert not any(key == "big" for key, _, _ in encoder._attributes)


def test_an_unencodable_attribute_is_left_out_and_logged_the_rest_kept(caplog: pytest.LogCaptureFixture) -> None:
    span = ReadableSpan(name="s", context=SpanContext(1, 1, is_remote=False), resource=Resource.create({}),
                        attributes={"ok": "yes", "huge": 2**64, "also": 3},
                        instrumentation_scope=InstrumentationScope("x"))
    with caplog.at_level(logging.ERROR, logger="loopgate.tracing"):
        received = _parsed(SpanEncoder(), [span])
    assert [kv.key for kv in received.resource_spans[0].scope_spans[0].spans[0].attributes] == ["ok", "also"]
    assert any("'huge' left out" in record.getMessage() for record in caplog.records)


def test_lengths_past_one_byte_are_varints() -> None:
    assert [varint(n) for n in (0, 127, 128, 300, 2**21)] == [b"\x00", b"\x7f", b"\x80\x01", b"\xac\x02",
                                                              b"\x80\x80\x80\x01"]
    long_name = ReadableSpan(name="n" * 70_000, context=SpanContext(1, 1, is_remote=False),
                             resource=Resource.create({}), attributes={"k": "v" * 20_000},
                             instrumentation_scope=InstrumentationScope("x"))
    assert _parsed(SpanEncoder(), [long_name]) == encode_spans([long_name])


class _Disagreeing(SpanEncoder):
    def span(self, span: ReadableSpan) -> bytes:
        return super().span(span)[:-3]  # loses the end of the last attribute


def _module() -> types.SimpleNamespace:
    return types.SimpleNamespace(encode_spans=encode_spans)


def test_install_hands_the_encoder_to_the_exporter_module(caplog: pytest.LogCaptureFixture) -> None:
    module = _module()
    with caplog.at_level(logging.INFO):
        assert install(module) is True
    assert isinstance(module.encode_spans, SpanEncoder)
    assert not caplog.records  # the samples' unencodable attributes log nothing at start
    assert not module.encode_spans._attributes  # nor stay in the cache


def test_the_environment_keeps_the_official_encoder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(otlp_encoder.ENCODER_ENV, "official")
    module = _module()
    assert install(module) is False and module.encode_spans is encode_spans


def test_an_encoder_that_disagrees_is_not_installed(caplog: pytest.LogCaptureFixture) -> None:
    assert equivalent(_Disagreeing(), sample_spans()) is False
    module = _module()
    with caplog.at_level(logging.WARNING, logger="loopgate.tracing"):
        assert install(module, _Disagreeing()) is False
    assert module.encode_spans is encode_spans
    assert any("disagrees" in record.getMessage() for record in caplog.records)


def test_an_exporter_release_that_encodes_otherwise_keeps_its_own(caplog: pytest.LogCaptureFixture) -> None:
    def other(spans: Any) -> Any:
        raise AssertionError("not called")

    module = types.SimpleNamespace(encode_spans=other)
    with caplog.at_level(logging.WARNING, logger="loopgate.tracing"):
        assert install(module) is False
    assert module.encode_spans is other and "its own way" in caplog.text


def _frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def _spans(bodies: list[Any]) -> dict[tuple[bytes, bytes], Any]:
    """Every span of these export requests, by trace and span id, with its resource and scope.

    The resource's ``service.instance.id`` (random per process) is left out of the comparison."""
    found = {}
    for body in bodies:
        for resource_spans in body.resource_spans:
            resource = [kv for kv in resource_spans.resource.attributes if kv.key != "service.instance.id"]
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found[(span.trace_id, span.span_id)] = (resource, scope_spans.scope, span)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("encoder", ["cached", "official"])
def test_the_exporter_process_posts_what_the_official_encoder_makes(encoder: str) -> None:
    requests = [_shipped(f"{n + 1:032x}") for n in range(50)]
    settings = {"endpoint": "", "headers": {}, "service_name": "loopgate", "service_version": "9",
                "frame_max": 8 << 20, "log_format": "text", "log_level": "INFO"}
    receiver = OtlpReceiver().start()
    try:
        settings["endpoint"] = receiver.url
        data = _frame(orjson.dumps(settings)) + _frame(orjson.dumps(requests))
        done = subprocess.run([sys.executable, "-m", "gateway.observability.exporter"], input=data, capture_output=True,
                              cwd=ROOT, env={**os.environ, "OTEL_BSP_SCHEDULE_DELAY": "50",
                                             otlp_encoder.ENCODER_ENV: encoder}, timeout=60)
    finally:
        receiver.stop()
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert "slower" not in done.stderr.decode()  # no fallback warning: the cached encoder was installed
    posted = _spans([ExportTraceServiceRequest.FromString(body) for body in receiver.bodies])
    official = _spans([encode_spans(list(Rebuilder("loopgate", "9").spans(requests)))])
    assert len(posted) == len(official) == 200
    assert posted == official

