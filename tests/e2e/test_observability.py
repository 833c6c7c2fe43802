"""Traces, logs and request ids end to end: a real gateway exporting to an OTLP/HTTP receiver in the test.

The receiver decodes every export with the official protobuf definitions; the gateway's own log
file is parsed line by line (``logging.format: json``), uvicorn's lines included.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.e2e.conftest import KEY, Gateway, gateway_config
from tests.e2e.test_mcp import ThreadedMcp
from tests.fakes.header_tool import HeaderTool
from tests.fakes.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.fakes.upstream import FakeUpstream, Reply

SECRET_TEXT = "the-user-said-xyzzy-plugh"
COLLECTOR_TOKEN = "collector-token-4f9a2c"


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver().start()
    yield server  # type: ignore[misc]
    server.stop()


@pytest.fixture(scope="module")
def header_tool() -> Iterator[HeaderTool]:
    server = HeaderTool().start()
    yield server  # type: ignore[misc]
    server.stop()


def traced_config(fakes: dict[str, FakeUpstream], receiver: OtlpReceiver, header_tool: HeaderTool,
                  capture: bool = False) -> str:
    config = gateway_config(fakes, extra_models="""
  traced:
    targets: [{provider: primary, model: up-model}]
    tools: [lookup, get_weather]
  traced_failover:
    targets: [{provider: primary, model: m1}, {provider: secondary, model: m2}]
""")
    lookup = (f'  lookup:\n    description: Look a thing up\n    parameters: {{type: object, properties: '
              f'{{q: {{type: string}}}}}}\n    http: {{url: "{header_tool.url}/lookup", timeout_s: 5}}\n')
    config = config.replace("\nmodels:\n", f"\n{lookup}models:\n", 1)
    return config + f"""
observability:
  otlp_endpoint: "{receiver.url}"
  headers: {{authorization: "Bearer {COLLECTOR_TOKEN}"}}
  sample_ratio: 1
  capture_content: {str(capture).lower()}
  propagate_to_providers: {str(capture).lower()}
logging: {{format: json, level: info, access: true}}
"""


@pytest.fixture(scope="module")
def mcp() -> Iterator[ThreadedMcp]:
    server = ThreadedMcp()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def traced(fakes: dict[str, FakeUpstream], receiver: OtlpReceiver, header_tool: HeaderTool,
           mcp: ThreadedMcp) -> Iterator[Gateway]:
    config = traced_config(fakes, receiver, header_tool).replace(
        "\nmodels:\n", f"\nmcp_servers:\n  calc: {{url: '{mcp.server.url}', timeout_s: 5}}\nmodels:\n"
        "  traced_mcp: {targets: [{provider: primary, model: up-model}], tools: ['mcp:calc']}\n", 1)
    gw = Gateway(config, env={"OTEL_BSP_SCHEDULE_DELAY": "50"}).start()
    yield gw
    gw.stop()


def caller_traceparent() -> tuple[str, str, str]:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def by_name(spans: list[ReceivedSpan], prefix: str) -> list[ReceivedSpan]:
    return [span for span in spans if span.name.startswith(prefix)]


def tool_loop(gateway: Gateway, fakes: dict[str, FakeUpstream], stream: bool,
              traceparent: str) -> httpx.Response:
    fakes["primary"].queue(Reply(tool_calls=[("lookup", {"q": SECRET_TEXT})], usage=(11, 3)),
                           Reply(text=f"Answer: {SECRET_TEXT}", usage=(21, 7)))
    return gateway.post("/v1/chat/completions", {"model": "traced", "stream": stream, "messages": [
        {"role": "user", "content": f"Look up {SECRET_TEXT}"}]}, headers={"traceparent": traceparent})


@pytest.mark.parametrize("stream", [False, True])
def test_span_tree_attributes_and_propagation(traced: Gateway, fakes: dict[str, FakeUpstream],
                                              receiver: OtlpReceiver, header_tool: HeaderTool, stream: bool) -> None:
    header_tool.headers.clear()
    traceparent, trace_id, caller_span = caller_traceparent()
    response = tool_loop(traced, fakes, stream, traceparent)
    assert response.status_code == 200
    spans = receiver.trace(trace_id, 4)
    assert sorted(span.name for span in spans) == ["POST /v1/chat/completions", "chat up-model", "chat up-model",
                                                   "execute_tool lookup"]
    assert receiver.content_types and set(receiver.content_types) == {"application/x-protobuf"}
    (server,) = by_name(spans, "POST")
    assert server.kind == "server" and server.parent_span_id == caller_span  # the caller's trace is continued
    assert server.attributes["loopgate.route"] == "traced"
    assert server.attributes["http.response.status_code"] == 200
    assert server.resource["service.name"] == "loopgate"
    chats = by_name(spans, "chat ")
    for chat in chats:
        assert chat.parent_span_id == server.span_id and chat.kind == "client"
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.provider.name"] == "openai"
        assert chat.attributes["gen_ai.request.model"] == "up-model"
        assert chat.attributes["gen_ai.response.model"]
    usage = sorted((c.attributes["gen_ai.usage.input_tokens"], c.attributes["gen_ai.usage.output_tokens"])
                   for c in chats)
    assert usage == [(11, 3), (21, 7)]
    assert sorted(c.attributes["gen_ai.response.finish_reasons"][0] for c in chats) == ["stop", "tool_calls"]
    (tool,) = by_name(spans, "execute_tool")
    assert tool.parent_span_id == server.span_id
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "lookup"
    assert tool.attributes["gen_ai.tool.call.id"].startswith("call")
    assert tool.attributes["loopgate.tool.status"] == "ok"
    # The HTTP tool's request continued the trace, under the execute_tool span.
    (sent,) = header_tool.headers
    assert sent["traceparent"] == f"00-{trace_id}-{tool.span_id}-01"
    # Providers get no traceparent unless propagate_to_providers is on.
    assert all("traceparent" not in r.headers for r in fakes["primary"].requests)
    # capture_content is off: no prompt, completion, argument or result text in any span.
    assert SECRET_TEXT not in repr([(s.attributes, s.events) for s in spans])
    assert not any(key.startswith(("gen_ai.input", "gen_ai.output", "gen_ai.tool.call.arg", "gen_ai.tool.call.res"))
                   for span in spans for key in span.attributes)


def test_failover_attempt_event_and_error_type(traced: Gateway, fakes: dict[str, FakeUpstream],
                                               receiver: OtlpReceiver) -> None:
    fakes["primary"].queue(Reply(status=401, error_body={"error": {"message": "bad key", "type": "auth"}}))
    fakes["secondary"].queue(Reply(text="from m2", usage=(5, 2)))
    traceparent, trace_id, _ = caller_traceparent()
    response = traced.post("/v1/chat/completions", {"model": "traced_failover", "temperature": 0.25, "max_tokens": 40,
                                                    "max_completion_tokens": 50, "top_p": None, "messages": [
        {"role": "user", "content": "hi"}]}, headers={"traceparent": traceparent})
    assert response.status_code == 200
    spans = receiver.trace(trace_id, 2)
    (chat,) = by_name(spans, "chat ")
    assert chat.name == "chat m2" and chat.attributes["gen_ai.request.model"] == "m2"
    assert chat.attributes["gen_ai.request.temperature"] == 0.25 and chat.attributes["gen_ai.request.max_tokens"] == 50
    assert "gen_ai.request.top_p" not in chat.attributes and chat.attributes["loopgate.attempts"] == 2
    (attempt,) = [attrs for name, attrs in chat.events if name == "loopgate.attempt"]
    assert attempt["error.type"] == "auth" and attempt["http.response.status_code"] == 401
    # Every target failing: the chat span and the server span carry error.type.
    fakes["primary"].queue(Reply(status=400, error_body={"error": {"message": "no", "type": "invalid_request_error"}}))
    traceparent, trace_id, _ = caller_traceparent()
    response = traced.post("/v1/chat/completions", {"model": "traced_failover", "messages": [
        {"role": "user", "content": "hi"}]}, headers={"traceparent": traceparent})
    assert response.status_code == 400
    spans = receiver.trace(trace_id, 2)
    (chat,) = by_name(spans, "chat ")
    assert chat.attributes["error.type"] == "bad_request"
    (server,) = by_name(spans, "POST")
    assert server.attributes["http.response.status_code"] == 400 and "error.type" in server.attributes


def test_pause_and_resume_events_carry_the_continuation_id(traced: Gateway, fakes: dict[str, FakeUpstream],
                                                         receiver: OtlpReceiver) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("delete_record", {"id": "r1"})]), Reply(text="deleted"))
    traceparent, trace_id, _ = caller_traceparent()
    response = traced.post("/v1/chat/completions", {"model": "agent", "messages": [
        {"role": "user", "content": "delete r1"}]}, headers={"traceparent": traceparent})
    continuation_id = response.json()["gateway"]["continuation_id"]
    (server,) = by_name(receiver.trace(trace_id, 2), "POST")
    (pause,) = [attrs for name, attrs in server.events if name == "loopgate.pause"]
    assert pause["loopgate.continuation_id"] == continuation_id
    call_id = response.json()["gateway"]["pending"][0]["tool_call_id"]
    traceparent, trace_id, _ = caller_traceparent()
    resumed = traced.post(f"/v1/continuations/{continuation_id}", {"decisions": [
        {"tool_call_id": call_id, "approve": False}]}, headers={"traceparent": traceparent})
    assert resumed.status_code == 200
    spans = receiver.trace(trace_id, 2)
    (server,) = by_name(spans, "POST")
    assert server.name == "POST /v1/continuations"
    events = {name: attrs for name, attrs in server.events}
    assert events["loopgate.resume"]["loopgate.continuation_id"] == continuation_id
    assert events["loopgate.denial"]["loopgate.continuation_id"] == continuation_id


def log_records(gateway: Gateway, want: Callable[[list[dict[str, Any]]], bool] = bool,
                timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """The gateway's complete log lines, parsed, once ``want`` holds (failing after a generous ``timeout_s``):
    access lines wait up to 20 ms to be written together (``AccessLog.FLUSH_S``), so the last request's
    record may not be there at once, and a line being written is not complete until its newline."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = gateway.logs()
        complete = text[:text.rfind("\n") + 1]  # a line still being written is read on the next poll
        records = [orjson.loads(line) for line in complete.splitlines() if line.strip()]  # JSON, or this raises
        if want(records):
            return records
        assert time.monotonic() < deadline, f"the expected log records never came; the log ends:\n{text[-3000:]}"
        time.sleep(0.02)


def test_json_logs_every_line_access_records_and_no_secrets(traced: Gateway, fakes: dict[str, FakeUpstream]
                                                              ) -> None:
    traceparent, _, _ = caller_traceparent()
    response = tool_loop(traced, fakes, False, traceparent)
    request_id = response.headers["x-request-id"]
    traced.post("/v1/chat/completions", {"model": "traced", "messages": []})  # a 400
    records = log_records(traced, lambda found: any(r.get("message") == "access" and r["status"] == 400
                                                    for r in found)
                          and any(r.get("request_id") == request_id for r in found))
    assert any(r["logger"].startswith("uvicorn") for r in records), "uvicorn's own lines are JSON too"
    assert all({"ts", "level", "logger", "message"} <= set(r) for r in records)
    (access,) = [r for r in records if r.get("request_id") == request_id]
    assert access["message"] == "access" and access["logger"] == "loopgate.access"
    assert access["status"] == 200 and access["route"] == "traced" and access["tenant"] == "team-a"
    assert access["iterations"] == 2 and access["tool_calls"] == 1 and access["answered_by"] == ["primary:up-model"] * 2
    assert access["prompt_tokens"] == 32 and access["completion_tokens"] == 10 and access["latency_ms"] > 0
    errors = [r for r in records if r.get("message") == "access" and r["status"] == 400]
    assert errors and errors[-1]["error"] == "invalid_request_error"
    text = traced.logs()
    for secret in (KEY, "upstream-primary", COLLECTOR_TOKEN, SECRET_TEXT):
        assert secret not in text


def test_request_id_echoed_generated_and_bounded(traced: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    url = traced.url
    fakes["primary"].queue(Reply(text="a"), Reply(text="b"))
    body = {"model": "plain", "messages": [{"role": "user", "content": "hi"}]}
    assert traced.post("/v1/chat/completions", body, headers={"x-request-id": "abc-123_Z.9"}
                       ).headers["x-request-id"] == "abc-123_Z.9"
    with httpx.stream("POST", f"{url}/v1/chat/completions", json={**body, "stream": True},
                      headers={"authorization": f"Bearer {KEY}", "x-request-id": "stream-1"}) as streamed:
        assert streamed.headers["x-request-id"] == "stream-1"
        streamed.read()
    generated = {traced.post("/v1/chat/completions", {"model": "nope", "messages": []}).headers["x-request-id"]
                 for _ in range(3)}
    assert len(generated) == 3  # a fresh id per request, errors included
    bad: str | bytes
    for bad in ("x" * 129, "has space", "new\\nline", "quote\"", "ünïcode".encode()):
        got = httpx.get(f"{url}/healthz", headers={"x-request-id": bad}).headers["x-request-id"]
        assert got != (bad if isinstance(bad, str) else bad.decode("latin-1")) and got.startswith("req_")
    assert httpx.get(f"{url}/healthz", headers={"x-request-id": "h" * 128}).headers["x-request-id"] == "h" * 128
    for response in (httpx.get(f"{url}/v1/models", headers={"authorization": f"Bearer {KEY}"}),
                     httpx.get(f"{url}/v1/models"),  # 401
                     httpx.get(f"{url}/no/such/path"),
                     httpx.get(f"{url}/metrics"),
                     httpx.get(f"{url}/v1/continuations/nope", headers={"authorization": f"Bearer {KEY}",
                                                                         "x-request-id": "cont-1"})):
        assert response.headers["x-request-id"]
        assert len(response.headers.get_list("x-request-id")) == 1
    assert response.headers["x-request-id"] == "cont-1"
    def logged(found: list[dict[str, Any]]) -> bool:
        return any(r.get("request_id") == "cont-1" and r["status"] == 404 for r in found)

    assert logged(log_records(traced, logged))


def test_capture_content_and_propagation_to_providers(fakes: dict[str, FakeUpstream], receiver: OtlpReceiver,
                                            header_tool: HeaderTool) -> None:
    gw = Gateway(traced_config(fakes, receiver, header_tool, capture=True),
                 env={"OTEL_BSP_SCHEDULE_DELAY": "50"}).start()
    try:
        traceparent, trace_id, _ = caller_traceparent()
        assert tool_loop(gw, fakes, False, traceparent).status_code == 200
        spans = receiver.trace(trace_id, 4)
        chats = by_name(spans, "chat ")
        assert all(SECRET_TEXT in chat.attributes["gen_ai.input.messages"] for chat in chats)
        assert any(SECRET_TEXT in chat.attributes["gen_ai.output.messages"] for chat in chats)
        (tool,) = by_name(spans, "execute_tool")
        assert SECRET_TEXT in tool.attributes["gen_ai.tool.call.arguments"]
        assert tool.attributes["gen_ai.tool.call.result"] == "found 42"
        # propagate_to_providers: each model call's request names its chat span.
        sent = sorted(r.headers["traceparent"] for r in fakes["primary"].requests)
        assert sent == sorted(f"00-{trace_id}-{chat.span_id}-01" for chat in chats)
        # Each captured attribute is cut at 64 KiB, with a marker: a 110 KB prompt and a 3 MB answer (whole, they
        # made the request's spans megabytes: held in the shipper's buffer, or dropped as too large).
        long_text = "lorem ipsum ✓ " * 200_000
        fakes["primary"].queue(Reply(text=long_text))
        traceparent, trace_id, _ = caller_traceparent()
        response = gw.post("/v1/chat/completions", {"model": "traced", "messages": [
            {"role": "user", "content": long_text[:100_000]}]}, headers={"traceparent": traceparent})
        assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"] == long_text
        (chat,) = by_name(receiver.trace(trace_id, 2), "chat ")
        for key in ("gen_ai.input.messages", "gen_ai.output.messages"):
            value = chat.attributes[key]
            assert len(value.encode()) <= 64 * 1024 and value.endswith("longer than 64 KiB]")
            assert "lorem ipsum ✓ lorem" in value
    finally:
        gw.stop()



def opentelemetry_modules_after_start(config: str, check: str = "pass") -> None:
    """Start the app's lifespan in a fresh interpreter with ``config`` (a Python literal) and assert
    that no ``opentelemetry`` module was imported (``check``: a statement run inside the lifespan)."""
    import subprocess
    import sys

    from tests.e2e.conftest import ROOT

    code = ("import asyncio, sys\n"
            "from gateway.api.app import create_app\n"
            "from gateway.config.validate import build_config\n"
            f"app = create_app(build_config({config}))\n"
            "async def main():\n"
            "    async with app.app.router.lifespan_context(app.app):\n"
            f"        {check}\n"
            "asyncio.run(main())\n"
            "loaded = sorted(m for m in sys.modules if m.startswith('opentelemetry'))\n"
            "assert not loaded, loaded\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_nothing_from_opentelemetry_is_imported_when_not_configured() -> None:
    opentelemetry_modules_after_start("{}")


def test_a_caller_unsampled_trace_records_nothing(traced: Gateway, fakes: dict[str, FakeUpstream],
                                                  receiver: OtlpReceiver, header_tool: HeaderTool) -> None:
    header_tool.headers.clear()
    _, trace_id, span_id = caller_traceparent()
    assert tool_loop(traced, fakes, False, f"00-{trace_id}-{span_id}-00").status_code == 200  # flags 00
    traceparent, sampled_id, _ = caller_traceparent()  # a sampled request after it: its spans prove the export ran
    assert tool_loop(traced, fakes, False, traceparent).status_code == 200
    assert len(receiver.trace(sampled_id, 4)) == 4
    assert receiver.trace(trace_id, 1, timeout_s=0.5) == []
    assert "traceparent" not in header_tool.headers[0] and "traceparent" in header_tool.headers[1]


def test_mcp_server_requests_continue_the_trace(traced: Gateway, fakes: dict[str, FakeUpstream],
                                              receiver: OtlpReceiver, mcp: ThreadedMcp) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("mixed", {})]), Reply(text="a chart"))
    traceparent, trace_id, _ = caller_traceparent()
    response = traced.post("/v1/chat/completions", {"model": "traced_mcp", "messages": [
        {"role": "user", "content": "draw"}]}, headers={"traceparent": traceparent})
    assert response.status_code == 200
    (tool,) = by_name(receiver.trace(trace_id, 4), "execute_tool")
    assert tool.name == "execute_tool mixed" and tool.attributes["loopgate.tool.status"] == "ok"
    calls = [r for r in mcp.server.requests if r.rpc_method == "tools/call"]
    assert calls[-1].traceparent == f"00-{trace_id}-{tool.span_id}-01"
    # The refresher's own requests (listing tools) belong to no request's trace.
    assert all(r.traceparent is None for r in mcp.server.requests if r.rpc_method == "tools/list")


def test_context_actions_are_span_events(traced: Gateway, fakes: dict[str, FakeUpstream],
                                         receiver: OtlpReceiver) -> None:
    from tests.e2e.test_context import long_history

    fakes["secondary"].queue(Reply(text="User asked four old questions; all answered."))
    fakes["primary"].queue(Reply(text="Here is what now."))
    traceparent, trace_id, _ = caller_traceparent()
    response = traced.post("/v1/chat/completions", {"model": "ctx_compress", "messages": long_history(),
                                                    "max_tokens": 300}, headers={"traceparent": traceparent})
    assert response.status_code == 200 and response.json()["gateway"]["context"]["compressions"] == 1
    spans = receiver.trace(trace_id, 3)
    (server,) = by_name(spans, "POST")
    assert "loopgate.context.context_compressed" in [name for name, _ in server.events]
    # The summary is a model call too: its own ``chat`` span under the request's, with its usage.
    chats = {span.name: span for span in by_name(spans, "chat ")}
    assert set(chats) == {"chat sum-model", "chat ctx-model"}
    summary = chats["chat sum-model"]
    assert summary.parent_span_id == server.span_id and summary.kind == "client"
    assert summary.attributes["gen_ai.request.model"] == "sum-model"
    assert summary.attributes["gen_ai.response.finish_reasons"] == ["stop"]
    assert "gen_ai.usage.input_tokens" in summary.attributes
