"""The pieces of logs, request ids and shared metrics that need no gateway process."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from gateway import redact
from gateway.api.request.exchange import Exchange
from gateway.config.checks import ConfigError
from gateway.config.model import ApiKey
from gateway.config.validate import build_config
from gateway.http.request_id import request_id
from gateway.loop.engine import LoopState
from gateway.observability import access_log, metrics, startup
from gateway.observability.metrics_shared import SharedMetrics
from gateway.redact import Redactor


@pytest.mark.parametrize(("raw", "path"), [
    ({"logging": {"format": "xml"}}, "logging.format"),
    ({"logging": {"level": "loud"}}, "logging.level"),
    ({"logging": {"access": "yes"}}, "logging.access"),
    ({"logging": {"colour": True}}, "logging.colour"),
    ({"observability": {"otlp_endpoint": "collector:4318"}}, "observability.otlp_endpoint"),
    ({"observability": {"otlp_endpoint": "http://c:4318", "sample_ratio": 1.5}}, "observability.sample_ratio"),
    ({"observability": {"headers": {"x": "a\nb"}}}, "observability.headers.x"),
    ({"observability": {"capture": True}}, "observability.capture"),
])
def test_bad_keys_are_named(raw: dict[str, object], path: str) -> None:
    with pytest.raises(ConfigError) as raised:
        build_config(raw)
    assert raised.value.path == path


def test_defaults_and_an_empty_endpoint_mean_off() -> None:
    config = build_config({"observability": {"otlp_endpoint": ""}})
    assert config.logging.format == "text" and not config.logging.access and config.logging.level is None
    assert not config.observability.tracing and config.observability.sample_ratio == 1.0
    assert build_config({"observability": {"otlp_endpoint": "https://c:4318/"}}).observability.otlp_endpoint == \
        "https://c:4318"


def test_request_ids_kept_only_when_safe() -> None:
    assert request_id(b"abc-1.2_3:4@5/6+7=8") == b"abc-1.2_3:4@5/6+7=8"
    for bad in (b"", b"a" * 129, b"a b", b"a\nb", b'a"b', "é".encode(), b"<script>"):
        generated = request_id(bad)
        assert generated.startswith(b"req_") and generated != bad
    assert request_id(None) != request_id(None)


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, access_log.ACCESS)
    stream = io.StringIO()
    yield stream
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    access_log.install(saved[2])


def _configure(stream: io.StringIO, kind: str) -> None:
    startup.configure_logging("info", kind, access=True)
    logging.getLogger().handlers[0].setStream(stream)  # type: ignore[attr-defined]


def test_json_lines_are_one_object_each_and_scrubbed(captured: io.StringIO) -> None:
    redact.install(Redactor(["sk-secret-value-123"]))
    try:
        _configure(captured, "json")
        logging.getLogger("loopgate.x").warning("upstream said %s", "bad\nkey sk-secret-value-123")
        try:
            raise ValueError("boom sk-secret-value-123")
        except ValueError:
            logging.getLogger("loopgate.x").exception("failed")
        done = Exchange("POST", "/v1/chat/completions", b"rid-1", None)
        done.label = "smart"
        done.done(429)
    finally:
        redact.install(Redactor([]))
    lines = captured.getvalue().splitlines()
    records = [orjson.loads(line) for line in lines]
    assert len(records) == 3 and "sk-secret-value-123" not in captured.getvalue()
    assert records[0]["message"] == "upstream said bad\nkey [redacted]" and records[0]["level"] == "warning"
    assert "ValueError" in records[1]["exc"] and records[1]["pid"] == os.getpid()
    assert records[2]["request_id"] == "rid-1" and records[2]["status"] == 429 and records[2]["route"] == "smart"
    assert records[2]["logger"] == "loopgate.access" and records[2]["ts"].endswith("Z")


def test_json_access_record_fields_in_order_on_a_stream_that_is_not_line_buffered(tmp_path: Path) -> None:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, access_log.ACCESS)
    path = tmp_path / "log"
    try:
        with open(path, "w", buffering=8192) as stream:
            startup.configure_logging("info", "json", access=True)
            logging.getLogger().handlers[0].setStream(stream)  # type: ignore[attr-defined]
            done = Exchange("POST", "/v1/chat/completions", b"rid-3", None)
            done.label = "smart"
            done.key = ApiKey(key="", tenant="team", id="key_1", name="one")
            done.state = LoopState()
            done.state.iterations = 2
            done.state.answered_by.extend(["p:m1", "p:m2"])
            done.done(200)
            written = path.read_text()  # before the file is closed: the line was flushed
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        access_log.install(saved[2])
    (line,) = written.splitlines()
    record = orjson.loads(line)
    assert list(record) == ["ts", "level", "logger", "pid", "message", "request_id", "method", "path", "route",
                            "tenant", "key_id", "status", "latency_ms", "iterations", "answered_by", "prompt_tokens",
                            "completion_tokens", "tool_calls"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", record["ts"])
    assert record["key_id"] == "key_1" and record["tenant"] == "team" and record["answered_by"] == ["p:m1", "p:m2"]
    assert record["latency_ms"] == round(record["latency_ms"], 2) and record["message"] == "access"


@pytest.mark.parametrize("encoding", ["utf-8", "latin-1"])
def test_json_access_records_on_a_line_buffered_stream_are_whole_lines_in_order(tmp_path: Path, encoding: str) -> None:
    """UTF-8 and line-buffered (stderr): each record is one write of its own; other lines stay in order."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, access_log.ACCESS)
    path = tmp_path / "log"
    try:
        with open(path, "w", buffering=1, encoding=encoding) as stream:
            startup.configure_logging("info", "json", access=True)
            logging.getLogger().handlers[0].setStream(stream)  # type: ignore[attr-defined]
            for rid in (b"rid-a", b"rid-b"):
                done = Exchange("POST", "/v1/chat/completions", rid, None)
                done.key = ApiKey(key="", tenant="t\u00e9am \"q\"", id="key_1", name="one")
                done.done(200)
                logging.getLogger("loopgate.test").warning("between %s", rid.decode())
            written = path.read_bytes()  # before the file is closed: every line is out
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        access_log.install(saved[2])
    records = [orjson.loads(line) for line in written.decode(encoding).splitlines()]
    assert [r.get("request_id") or r["message"] for r in records] == ["rid-a", "between rid-a", "rid-b",
                                                                       "between rid-b"]
    assert records[0]["tenant"] == "t\u00e9am \"q\"" and records[0]["logger"] == "loopgate.access"


def _open_like_stderr(path: Path, kind: str) -> io.TextIOWrapper:
    """A text stream as Python makes ``sys.stderr``: line-buffered on a terminal, write-through over
    an unbuffered file elsewhere (a pipe, a file); or write-through over a buffered layer."""
    if kind == "line-buffered":
        return open(path, "w", buffering=1, encoding="utf-8")
    raw = io.FileIO(path, "w")
    layer: io.RawIOBase | io.BufferedWriter = raw if kind == "write-through" else io.BufferedWriter(raw)
    return io.TextIOWrapper(layer, encoding="utf-8", write_through=True)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["line-buffered", "write-through", "write-through-buffered"])
async def test_json_access_records_wait_a_moment_and_go_out_together(tmp_path: Path, kind: str) -> None:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, access_log.ACCESS)
    path = tmp_path / "log"
    try:
        with _open_like_stderr(path, kind) as stream:
            startup.configure_logging("info", "json", access=True)
            logging.getLogger().handlers[0].setStream(stream)  # type: ignore[attr-defined]
            for rid in (b"rid-1", b"rid-2", b"rid-3"):
                Exchange("POST", "/v1/chat/completions", rid, None).done(200)
            await asyncio.sleep(0)
            assert path.read_bytes() == b""  # waiting for the next ones
            await asyncio.sleep(access_log.AccessLog.FLUSH_S + 0.05)
            first_batch = path.read_bytes()
            many = access_log.AccessLog.FLUSH_LINES + 1  # past the bound
            for n in range(many):
                Exchange("POST", "/v1/chat/completions", b"rid-x%d" % n, None).done(500)
            bounded = path.read_bytes()  # written without waiting for the timer
            await asyncio.sleep(access_log.AccessLog.FLUSH_S + 0.05)
            written = path.read_bytes()
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        access_log.install(saved[2])
    assert [orjson.loads(line)["request_id"] for line in first_batch.splitlines()] == ["rid-1", "rid-2", "rid-3"]
    assert len(bounded.splitlines()) - len(first_batch.splitlines()) == access_log.AccessLog.FLUSH_LINES
    statuses = [orjson.loads(line)["status"] for line in written.splitlines()]
    assert statuses == [200] * 3 + [500] * many


def test_a_log_line_held_by_a_buffered_layer_goes_out_before_the_batch(tmp_path: Path) -> None:
    """Write-through over a buffered layer: the batch's own write comes after what that layer holds."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, access_log.ACCESS)
    path = tmp_path / "log"
    try:
        with _open_like_stderr(path, "write-through-buffered") as stream:
            startup.configure_logging("info", "json", access=True)
            logging.getLogger().handlers[0].setStream(stream)  # type: ignore[attr-defined]
            logging.getLogger("loopgate.test").warning("before")
            Exchange("POST", "/v1/chat/completions", b"rid-1", None).done(200)  # no loop: written at once
            written = path.read_bytes()
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        access_log.install(saved[2])
    records = [orjson.loads(line) for line in written.splitlines()]
    assert [r.get("request_id") or r["message"] for r in records] == ["before", "rid-1"]


def test_a_worker_whose_stderr_is_a_file_batches_its_access_lines(tmp_path: Path) -> None:
    """Where a service's logs go (a pipe, a file), Python's stderr is write-through, not line-buffered:
    the batched path must hold there too, not only on a terminal."""
    script = """
import asyncio, logging, sys
from gateway.api.request import exchange
from gateway.api.request.exchange import Exchange
from gateway.observability import access_log, startup
startup.configure_logging("info", "json", access=True)
assert not sys.stderr.line_buffering and sys.stderr.write_through
async def main():
    for n in range(3):
        Exchange("POST", "/v1/chat/completions", b"rid-%d" % n, None).done(200)
    print(len(exchange.ACCESS._pending), flush=True)  # waiting for the batch's write
    await asyncio.sleep(access_log.AccessLog.FLUSH_S + 0.05)
    print(len(exchange.ACCESS._pending), flush=True)
    Exchange("POST", "/v1/chat/completions", b"rid-last", None).done(204)  # flushed at exit
asyncio.run(main())
"""
    err = tmp_path / "stderr"
    with open(err, "wb") as sink:
        done = subprocess.run([sys.executable, "-c", script], stderr=sink, stdout=subprocess.PIPE, timeout=60,
                              cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, err.read_text()
    assert done.stdout.split() == [b"3", b"0"]
    ids = [orjson.loads(line)["request_id"] for line in err.read_bytes().splitlines()]
    assert ids == ["rid-0", "rid-1", "rid-2", "rid-last"]


def test_text_access_record_is_one_line(captured: io.StringIO) -> None:
    _configure(captured, "text")
    done = Exchange("GET", "/v1/continuations", b"rid-2", None, echo=False, metered=False)
    done.done(404)
    (line,) = captured.getvalue().splitlines()
    assert "loopgate.access: access request_id=rid-2 method=GET path=/v1/continuations route=unknown" in line
    assert "status=404" in line


def test_shared_metrics_sum_counters_and_take_the_max_circuit(tmp_path: Path) -> None:
    dead_pid = 2 ** 22 + 12345  # above the default pid_max: no such process
    other = {metrics.REQUESTS.name: [[["/v1/chat/completions", "m", "200"], 5.0]],
             metrics.CIRCUIT_STATE.name: [[["p:m"], 1.0]],
             metrics.LATENCY.name: [[["/v1/chat/completions"], [1.0] + [0.0] * (len(metrics.LATENCY.buckets) + 1)]]}
    (tmp_path / f"{os.getppid()}.json").write_bytes(orjson.dumps(other))  # a live process
    (tmp_path / f"{dead_pid}.json").write_bytes(orjson.dumps(other))  # an exited worker
    before = metrics.REQUESTS.get("/v1/chat/completions", "m", "200")
    merged = SharedMetrics(str(tmp_path), lambda: None)
    import asyncio

    text = asyncio.run(merged.render())
    assert f'loopgate_requests_total{{path="/v1/chat/completions",model="m",status="200"}} {int(before + 10)}' in text
    assert 'loopgate_circuit_open{target="p:m"} 1' in text.splitlines()  # the dead worker's gauge is dropped, max kept
    asyncio.run(merged.publish())
    assert orjson.loads((tmp_path / f"{os.getpid()}.json").read_bytes())[metrics.REQUESTS.name] is not None


def test_sampling_roots_by_ratio_and_following_the_callers_flags() -> None:
    from gateway.config.observability_section import ObservabilityConfig
    from gateway.observability.recorder import LeanTracer
    from gateway.observability.span_entries import rebuild
    from gateway.observability.tracing import NOOP

    shipped: list[list[object]] = []
    config = ObservabilityConfig(otlp_endpoint="http://127.0.0.1:9", sample_ratio=0.25)
    tracer = LeanTracer(config, lambda entry, count: shipped.append(entry))
    share = sum(tracer.server("POST", "/v1/chat/completions", None) is not NOOP for _ in range(4000)) / 4000
    assert 0.18 < share < 0.32
    sampled = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert all(tracer.server("POST", "/x", sampled).recording for _ in range(50))
    assert all(tracer.server("POST", "/x", sampled[:-1] + b"0") is NOOP for _ in range(50))
    never = LeanTracer(ObservabilityConfig(otlp_endpoint="http://127.0.0.1:9", sample_ratio=0.0),
                       lambda entry, count: shipped.append(entry))
    assert all(never.server("POST", "/x", b"not-a-traceparent") is NOOP for _ in range(50))
    continued = tracer.server("POST", "/x", sampled)
    assert continued.traceparent() is not None
    assert continued.traceparent().startswith("00-0af7651916cd43dd8448eb211c80319c-")  # type: ignore[union-attr]
    assert not shipped  # nothing is shipped before a server span ends
    continued.finish(200, None)
    ((trace, _, parent, remote, _, name, *_, attributes, _, _),) = rebuild(shipped.pop())
    assert trace == "0af7651916cd43dd8448eb211c80319c" and name == "POST /x"
    assert parent == 0xb7ad6b7169203331 and remote and attributes["http.response.status_code"] == 200


VALID = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.mark.parametrize("value", [
    b"", b"00", VALID[:-1], VALID + b"-", VALID + b"0", VALID.upper(), b" " + VALID, VALID + b" ",
    b"ff" + VALID[2:],  # version ff is forbidden
    b"0g" + VALID[2:], b"00-" + b"0" * 32 + VALID[35:],  # an all-zero trace id
    VALID[:36] + b"0" * 16 + VALID[52:],  # an all-zero parent id
    VALID.replace(b"-", b"_"), VALID[:-2] + b"1", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-001",
    b"01-" + VALID[3:] + b"x",  # a later version may append fields, but only after a dash
    VALID + b"\n", b"x" * 600,
])
def test_a_malformed_traceparent_starts_a_new_trace(value: bytes) -> None:
    from gateway.config.observability_section import ObservabilityConfig
    from gateway.observability.recorder import LeanTracer, parse_traceparent

    assert parse_traceparent(value) is None
    shipped: list[list[object]] = []
    tracer = LeanTracer(ObservabilityConfig(otlp_endpoint="http://127.0.0.1:9"),
                        lambda entry, count: shipped.append(entry))
    span = tracer.server("GET", "/x", value)
    assert span.recording and "0af7651916cd43dd8448eb211c80319c" not in (span.traceparent() or "")
    span.finish(200, None)
    (entry,) = shipped
    trace = entry[0]
    assert entry[1] == 0 and isinstance(trace, str) and len(trace) == 32 and int(trace, 16) != 0  # a root


def test_valid_traceparents_including_a_later_version() -> None:
    from gateway.observability.recorder import parse_traceparent

    assert parse_traceparent(VALID) == ("0af7651916cd43dd8448eb211c80319c", 0xb7ad6b7169203331, True)
    assert parse_traceparent(b"01" + VALID[2:] + b"-what-comes-next") is not None
    assert parse_traceparent(VALID[:-2] + b"02") == ("0af7651916cd43dd8448eb211c80319c", 0xb7ad6b7169203331, False)


def test_captured_content_is_cut_per_attribute() -> None:
    """capture_content: a multi-megabyte prompt, answer, tool arguments and tool result are each cut at 64 KiB
    (with a marker), so the request's spans stay small enough to ship (whole, they were dropped as too large)."""
    from types import SimpleNamespace

    from gateway.config.observability_section import ObservabilityConfig
    from gateway.observability.captured import CUT, MAX_CAPTURED_BYTES, captured
    from gateway.observability.recorder import LeanTracer
    from gateway.observability.span_entries import rebuild

    big = "é" + "the answer, ünïcode ✓ 🙂 " * 150_000  # ~4 MB of UTF-8
    shipped: list[list[object]] = []
    tracer = LeanTracer(ObservabilityConfig(otlp_endpoint="http://127.0.0.1:9", capture_content=True),
                        lambda entry, count: shipped.append(entry))
    server = tracer.server("POST", "/v1/chat/completions", None)
    target = SimpleNamespace(provider=SimpleNamespace(type="openai"), model="m", label="p:m")
    chat = server.model_call([target], SimpleNamespace(messages=[{"role": "user", "content": big}], params={}))
    usage = SimpleNamespace(prompt_tokens=1, completion_tokens=2, cached_tokens=0)
    chat.answered(target, SimpleNamespace(message={"role": "assistant", "content": big}, usage=usage, model="m",
                                          finish_reason="stop", id="r"), [{"target": "p:m"}])
    tool = server.tool({"id": "c1", "function": {"name": "lookup", "arguments": big}}, SimpleNamespace(spec=None))
    tool.tool_done("ok", big)
    server.finish(200, None)
    spans = list(rebuild(shipped.pop()))
    values = {key: value for span in spans for key, value in span[8].items() if key.startswith("gen_ai.") and
              key.endswith(("messages", "arguments", "result"))}
    assert sorted(values) == ["gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments",
                              "gen_ai.tool.call.result"]
    sizes = {key: len(value.encode()) for key, value in values.items()}
    assert all(MAX_CAPTURED_BYTES - 8 < size <= MAX_CAPTURED_BYTES for size in sizes.values()), sizes
    assert all(value.endswith(CUT) for value in values.values())
    assert values["gen_ai.tool.call.result"].startswith(big[:1000])
    assert values["gen_ai.output.messages"].startswith('[{"role":"assistant","content":"é')
    # Short text is kept as it is, up to the bound in bytes (not characters).
    assert captured("é" * 30_000) == "é" * 30_000 and captured("x" * MAX_CAPTURED_BYTES) == "x" * MAX_CAPTURED_BYTES
    assert captured("é" * 40_000).endswith(CUT) and len(captured("é" * 40_000).encode()) <= MAX_CAPTURED_BYTES
