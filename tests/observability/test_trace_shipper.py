"""The shipper and its exporter process, without a gateway: frames split to fit, bad requests dropped alone."""

from __future__ import annotations

import os
import time

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
