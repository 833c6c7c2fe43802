"""The exporter process of tracing: restarts, bounds, shutdown, secrets, and what a traceparent starts.

A real gateway exports to the OTLP/HTTP receiver of the tests through its exporter process
(``gateway/observability/exporter.py``), which is found as the gateway's child in ``/proc``.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import KEY, Gateway, gateway_config
from tests.e2e.test_observability import (
    COLLECTOR_TOKEN,
    by_name,
    caller_traceparent,
    opentelemetry_modules_after_start,
)
from tests.fakes.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.fakes.upstream import FakeUpstream
from tests.ports import free_port

BODY = {"model": "plain", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver().start()
    yield server  # type: ignore[misc]
    server.stop()


def config(fakes: dict[str, FakeUpstream], endpoint: str, extra: str = "") -> str:
    return gateway_config(fakes) + f"""
observability:
  otlp_endpoint: "{endpoint}"
  headers: {{authorization: "Bearer {COLLECTOR_TOKEN}"}}
  sample_ratio: 1
{extra}"""


def exporter_pid(gateway: Gateway, timeout_s: float = 10.0, not_pid: int | None = None) -> int:
    """The pid of the gateway's exporter process (waiting for one other than ``not_pid`` to appear)."""
    assert gateway.process is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for task in Path(f"/proc/{gateway.process.pid}/task").iterdir():
            for pid in (task / "children").read_text().split():
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                if b"gateway.observability.exporter" in cmdline and int(pid) != not_pid:
                    return int(pid)
        time.sleep(0.05)
    raise AssertionError("no exporter process")


def request_span(receiver: OtlpReceiver, request_id: str, timeout_s: float = 10.0) -> ReceivedSpan | None:
    """The server span of one request, found by its ``loopgate.request_id``."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = [s for s in list(receiver.spans) if s.attributes.get("loopgate.request_id") == request_id]
        if found or time.monotonic() > deadline:
            return found[0] if found else None
        time.sleep(0.05)


def dropped(gateway: Gateway) -> dict[str, float]:
    text = httpx.get(f"{gateway.url}/metrics").text
    return {reason: float(value) for reason, value in
            re.findall(r'^loopgate_trace_spans_dropped_total\{reason="(\w+)"\} (\S+)$', text, re.M)}


def test_a_killed_exporter_is_restarted_and_requests_never_notice(fakes: dict[str, FakeUpstream],
                                                                  receiver: OtlpReceiver) -> None:
    gw = Gateway(config(fakes, receiver.url), env={"OTEL_BSP_SCHEDULE_DELAY": "50"}).start()
    try:
        traceparent, trace_id, _ = caller_traceparent()
        assert gw.post("/v1/chat/completions", BODY, headers={"traceparent": traceparent}).status_code == 200
        assert len(receiver.trace(trace_id, 2)) == 2
        first = exporter_pid(gw)
        os.kill(first, signal.SIGKILL)
        for _ in range(10):  # while it is down and restarting
            started = time.monotonic()
            assert gw.post("/v1/chat/completions", BODY).status_code == 200
            assert time.monotonic() - started < 2
        second = exporter_pid(gw, not_pid=first)
        assert second != first
        traceparent, trace_id, _ = caller_traceparent()
        assert gw.post("/v1/chat/completions", BODY, headers={"traceparent": traceparent}).status_code == 200
        assert by_name(receiver.trace(trace_id, 1), "POST")
        assert "exited" in gw.logs() and "restarting" in gw.logs()
    finally:
        gw.stop()


def test_a_stalled_exporter_or_a_dead_receiver_leaves_requests_alone_and_the_buffer_bounded(
        fakes: dict[str, FakeUpstream], receiver: OtlpReceiver) -> None:
    # The receiver's port has nothing listening: the exporter's posts fail, the gateway does not care.
    dead = f"http://127.0.0.1:{free_port()}"
    bounds = "  max_buffered_spans: 40\n  shutdown_timeout_s: 1\n"
    gw = Gateway(config(fakes, dead, bounds), env={"OTEL_BSP_SCHEDULE_DELAY": "50"}).start()
    try:
        for _ in range(20):
            started = time.monotonic()
            assert gw.post("/v1/chat/completions", BODY).status_code == 200
            assert time.monotonic() - started < 2
        assert set(dropped(gw).values()) == {0}  # the exporter process took them all (and failed to post them)
        # An exporter that stops reading: the pipe fills, then the worker's buffer, then spans are dropped.
        child = exporter_pid(gw)
        os.kill(child, signal.SIGSTOP)
        try:
            headers = {"authorization": f"Bearer {KEY}", "x-request-id": "r" * 120}  # ~1 kB of spans a request
            with httpx.Client(base_url=gw.url, headers=headers, timeout=5) as client:
                for _ in range(300):  # well over the pipe's 64 kB and the 40 spans of the buffer
                    started = time.monotonic()
                    assert client.post("/v1/chat/completions", json=BODY).status_code == 200
                    assert time.monotonic() - started < 2
            counts = dropped(gw)
            assert counts.get("buffer_full", 0) > 0
        finally:
            os.kill(child, signal.SIGCONT)
    finally:
        gw.stop()


def test_shutdown_exports_the_last_spans(fakes: dict[str, FakeUpstream], receiver: OtlpReceiver) -> None:
    # The exporter's own batch delay is a minute: only the shutdown can have sent these.
    gw = Gateway(config(fakes, receiver.url), env={"OTEL_BSP_SCHEDULE_DELAY": "60000"}).start()
    child = exporter_pid(gw)
    trace_ids = []
    for _ in range(3):
        traceparent, trace_id, _ = caller_traceparent()
        assert gw.post("/v1/chat/completions", BODY, headers={"traceparent": traceparent}).status_code == 200
        trace_ids.append(trace_id)
    time.sleep(0.5)  # handed to the exporter process, held in its batch
    assert receiver.trace(trace_ids[0], 1, timeout_s=0.2) == []
    gw.stop()
    assert gw.process is not None and gw.process.returncode is not None
    for trace_id in trace_ids:
        assert len(receiver.trace(trace_id, 2, timeout_s=2)) == 2
    assert not Path(f"/proc/{child}").exists()  # it exited with the gateway


def test_the_exporter_exits_when_its_gateway_dies(fakes: dict[str, FakeUpstream], receiver: OtlpReceiver) -> None:
    gw = Gateway(config(fakes, receiver.url)).start()
    child = exporter_pid(gw)
    assert gw.process is not None
    gw.process.kill()  # no shutdown: the exporter sees its stdin end
    gw.process.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and alive(child):
        time.sleep(0.05)
    assert not alive(child)


def alive(pid: int) -> bool:
    """Running (not exited, not a zombie left to a parent that does not reap)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def test_the_collectors_headers_are_not_on_the_exporters_command_line_or_environment(
        fakes: dict[str, FakeUpstream], receiver: OtlpReceiver) -> None:
    gw = Gateway(config(fakes, receiver.url), env={"OTEL_BSP_SCHEDULE_DELAY": "50"}).start()
    try:
        child = exporter_pid(gw)
        cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        assert b"gateway.observability.exporter" in cmdline and COLLECTOR_TOKEN.encode() not in cmdline
        assert COLLECTOR_TOKEN.encode() not in Path(f"/proc/{child}/environ").read_bytes()
        traceparent, trace_id, _ = caller_traceparent()
        assert gw.post("/v1/chat/completions", BODY, headers={"traceparent": traceparent}).status_code == 200
        assert receiver.trace(trace_id, 2)  # the headers reached the exporter another way
        assert f"Bearer {COLLECTOR_TOKEN}" in receiver.authorizations
    finally:
        gw.stop()


def _niceness(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[16])  # field 19 of proc(5): nice


def _policy(pid: int) -> int:
    return os.sched_getscheduler(pid)


@pytest.mark.parametrize(("env", "idle", "lower_by"), [({"LOOPGATE_TRACE_EXPORTER_NICE": ""}, True, 0),
                                                       ({"LOOPGATE_TRACE_EXPORTER_NICE": "5"}, False, 5),
                                                       ({"LOOPGATE_TRACE_EXPORTER_NICE": "0"}, False, 0)])
def test_the_exporter_runs_below_the_gateways_cpu_priority(fakes: dict[str, FakeUpstream], receiver: OtlpReceiver,
                                                          env: dict[str, str], idle: bool, lower_by: int) -> None:
    """By default (the variable unset or empty) in the idle scheduling class, the gateway's staying
    normal; a nice step when asked for one. (tests/conftest.py sets +10 for the other tests.)"""
    gw = Gateway(config(fakes, receiver.url), env=env).start()
    try:
        assert gw.process is not None
        child = exporter_pid(gw)
        want = (os.SCHED_IDLE if idle else os.SCHED_OTHER, min(19, _niceness(gw.process.pid) + lower_by))
        deadline = time.monotonic() + 10  # set by the child itself as it starts
        while (_policy(child), _niceness(child)) != want and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (_policy(child), _niceness(child)) == want
        assert _policy(gw.process.pid) == os.SCHED_OTHER
        traceparent, trace_id, _ = caller_traceparent()
        assert gw.post("/v1/chat/completions", BODY, headers={"traceparent": traceparent}).status_code == 200
        if not idle:
            assert receiver.trace(trace_id, 2)
        # The idle class runs only on a CPU nobody else wants: on a saturated machine (CI beside other jobs)
        # it may not run at all within any bound, which is the point of it; what it exports when it does run
        # is every other test's subject.
    finally:
        gw.stop()


@pytest.mark.parametrize("traceparent", [
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",  # no flags
    "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # all-zero trace id
    "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # all-zero parent
    "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # forbidden version
    "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",  # upper case
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",  # version 00 has four fields
])
def test_a_malformed_traceparent_starts_a_new_trace(fakes: dict[str, FakeUpstream], receiver: OtlpReceiver,
                                                    traced_plain: Gateway, traceparent: str) -> None:
    response = traced_plain.post("/v1/chat/completions", BODY, headers={"traceparent": traceparent})
    assert response.status_code == 200
    span = request_span(receiver, response.headers["x-request-id"])
    assert span is not None and span.parent_span_id == ""
    assert span.trace_id not in traceparent.lower() and int(span.trace_id, 16) != 0


@pytest.fixture(scope="module")
def traced_plain(fakes: dict[str, FakeUpstream], receiver: OtlpReceiver) -> Iterator[Gateway]:
    gw = Gateway(config(fakes, receiver.url), env={"OTEL_BSP_SCHEDULE_DELAY": "50"}).start()
    yield gw
    gw.stop()


def test_the_gateway_process_never_imports_opentelemetry(receiver: OtlpReceiver) -> None:
    # Tracing is on, yet only the exporter process loads the SDK.
    config = f"{{'observability': {{'otlp_endpoint': '{receiver.url}'}}}}"
    opentelemetry_modules_after_start(config, "from gateway.observability import tracing; "
                                              "assert tracing.TRACER.enabled")
