"""The exporter process holds back rather than dropping spans, and reports those never delivered.

The real ``python -m gateway.observability.exporter`` is fed frames on stdin, as the gateway's shipper
does, and exports to a local OTLP/HTTP collector that is slow (its queue fills: it stops reading
its stdin until an export makes room, and every span arrives) or refuses every export (batches
not delivered: counted, and the log says how many in a few lines rather than one per span).
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
import time

import orjson
import pytest

from tests.fakes.otlp_receiver import OtlpReceiver

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_REPORT = re.compile(r"(\d+) span\(s\) not delivered .*?; (\d+) in all")


def _frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def _requests(count: int) -> list[list[object]]:
    now = time.time_ns()
    out: list[list[object]] = []
    for n in range(count):
        span_id = n + 1
        out.append([os.urandom(16).hex(), 0, span_id, now, now + 1000, "POST", "/v1/chat/completions", "r", None,
                    None, 200, None, [], None, []])
    return out


def _run_exporter(receiver: OtlpReceiver, spans: int, env: dict[str, str]) -> list[str]:
    settings = {"endpoint": receiver.url, "headers": {}, "service_name": "loopgate", "service_version": "test",
                "frame_max": 8 << 20, "log_format": "text", "log_level": "INFO"}
    requests = _requests(spans)
    data = _frame(orjson.dumps(settings)) + b"".join(
        _frame(orjson.dumps(requests[i:i + 500])) for i in range(0, spans, 500))
    done = subprocess.run([sys.executable, "-m", "gateway.observability.exporter"], input=data, capture_output=True,
                          cwd=ROOT, env={**os.environ, **env}, timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return done.stderr.decode().splitlines()


def _reports(lines: list[str]) -> list[tuple[int, int, int, int]]:
    found = [_REPORT.search(line) for line in lines if "trace exporter:" in line]
    return [tuple(int(g) for g in match.groups()) for match in found if match]  # type: ignore[misc]


@pytest.mark.slow
def test_a_full_queue_holds_the_input_back_and_loses_nothing() -> None:
    receiver = OtlpReceiver(delay_s=0.1).start()
    try:
        start = time.monotonic()
        lines = _run_exporter(receiver, 600, {"OTEL_BSP_MAX_QUEUE_SIZE": "100", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "50",
                                              "OTEL_BSP_SCHEDULE_DELAY": "50"})
        elapsed = time.monotonic() - start
        assert len(receiver.spans) == 600  # all of them, though 600 never fit in a queue of 100
        assert elapsed >= 11 * 0.1  # 12 exports of 50 spans, each held 0.1 s by the collector, one at a time
        assert _reports(lines) == [] and not any("Queue full" in line or "dropped" in line for line in lines)
    finally:
        receiver.stop()


def test_a_collector_that_refuses_every_export_is_reported_as_not_delivered() -> None:
    receiver = OtlpReceiver(refuse=True).start()
    try:
        lines = _run_exporter(receiver, 120, {"OTEL_BSP_SCHEDULE_DELAY": "50"})
        reports = _reports(lines)
        assert reports and reports[-1][1] == 120 and sum(r[0] for r in reports) == 120, lines
        assert receiver.spans == []
    finally:
        receiver.stop()


@pytest.mark.slow
def test_nothing_lost_means_nothing_reported() -> None:
    receiver = OtlpReceiver().start()
    try:
        lines = _run_exporter(receiver, 200, {"OTEL_BSP_SCHEDULE_DELAY": "50"})
        assert _reports(lines) == [] and not any("trace exporter:" in line for line in lines), lines
        assert len(receiver.spans) == 200
    finally:
        receiver.stop()
