"""Megabytes to tokenize never stall other tenants, and ``count_tokens`` is admitted like any request (issue 45).

Each stall test runs the heavy request on one tenant while another tenant's small requests are timed
against a generous bound: tokenizing a 12 MB tool result takes seconds of CPU, which on the event
loop would hold every other request of the process for that long. The bound is far above a small
request's latency on a busy machine and far below the stall the heavy work caused before the fix.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from aiohttp import web

from tests.e2e.conftest import E2E_ROUTING_HEAVY, KEY, OTHER_KEY, Gateway, gateway_config
from tests.e2e.sample_tools import big
from tests.fakes.threaded import ThreadedApp
from tests.fakes.upstream import FakeUpstream, Reply

#: another tenant's small request while the heavy one is processed: far above its latency on a busy
#: machine (tens of ms; a few hundred while a worker thread builds a 12 MB result's token list, which
#: holds the GIL), far below the stall of tokenizing these megabytes on the event loop (3.5-16 s)
STALL_BOUND_S = 2.0
HUGE_KB = 12 * 1024  # the 12 MB MCP/HTTP tool result of the finding
CLIENT_RESULT_KB = 4 * 1024  # the ~4 MB client tool result of a way-A resume
COUNT_BODY_KB = 6 * 1024  # a count_tokens body of several MB (the finding's 4 MB stalled 2.4 s; this ~3.5 s)
LOOKUP = [{"type": "function", "function": {"name": "lookup", "description": "client-side lookup",
                                            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]
EXTRA_KEYS = """auth:
  keys:
    - {key: rpm2-key, tenant: rpm2-t, rpm: 2}
    - {key: conc-key, tenant: conc-t, max_concurrent: 1}
"""
HUGE_TOOL = """  huge:
    description: Returns a 12 MB result
    http: {url: "__HUGE__/huge", timeout_s: 60}
models:
"""
ROUTES = """  huge_route:
    targets: [{provider: primary, model: up-model}]
    tools: [huge]
    context_window: 100000
  client_route:
    targets: [{provider: primary, model: up-model}]
    tools: [get_weather]
    context_window: 100000
  claude_local:
    targets: [{provider: claude, model: claude-sonnet-4-5}]
    count_tokens: local
"""


def log_lines(kb: int) -> str:
    """About ``kb`` KB of hashes, a log's worth: text that splits into many short pieces, slow to tokenize."""
    return "\n".join(f"{i} {hashlib.sha256(str(i).encode()).hexdigest()}" for i in range(kb * 1024 // 72))


class HugeTool(ThreadedApp):
    """An HTTP tool whose answer is 12 MB of text."""

    def __init__(self) -> None:
        super().__init__()
        self.body = big(HUGE_KB, "huge").encode()

    def build(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/huge", self._huge)
        return app

    async def _huge(self, request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=self.body, content_type="text/plain")


@pytest.fixture(scope="module")
def huge_tool() -> Iterator[HugeTool]:
    server = HugeTool()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gw(fakes: dict[str, FakeUpstream], huge_tool: HugeTool) -> Iterator[Gateway]:
    config = gateway_config(fakes, extra_models=ROUTES, routing=E2E_ROUTING_HEAVY)
    config = config.replace("max_body_bytes: 200000", "max_body_bytes: 16000000", 1)
    config = config.replace("auth:\n  keys:\n", EXTRA_KEYS, 1)
    config = config.replace("models:\n", HUGE_TOOL.replace("__HUGE__", huge_tool.url), 1)
    gateway = Gateway(config).start()
    yield gateway
    gateway.stop()


def timed_beside(gw: Gateway, heavy: Callable[[], Any]) -> tuple[Any, list[float]]:
    """Run ``heavy`` (one tenant) while the other tenant's small requests are timed; (its result, their latencies).

    The small requests go on back to back until ``heavy`` returns, so one is in flight at every moment of it;
    they go to the secondary fake, so they never take a reply the heavy request's script queued on the primary.
    """
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = heavy()
        except BaseException as exc:  # re-raised in the test's thread
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    latencies: list[float] = []
    with httpx.Client(base_url=gw.url, headers={"authorization": f"Bearer {OTHER_KEY}"}, timeout=60) as small:
        worker.start()
        while worker.is_alive():
            started = time.monotonic()
            answer = small.post("/v1/chat/completions",
                                json={"model": "summarizer", "messages": [{"role": "user", "content": "hi"}]})
            latencies.append(time.monotonic() - started)
            assert answer.status_code == 200, answer.text
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"], latencies


def post(gw: Gateway, path: str, body: Any, key: str = KEY) -> httpx.Response:
    return httpx.post(f"{gw.url}{path}", json=body, headers={"authorization": f"Bearer {key}"}, timeout=120)


def test_a_12_mb_http_tool_result_does_not_stall_another_tenant(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("huge", {})]), Reply(text="summarised"))
    answer, latencies = timed_beside(gw, lambda: post(gw, "/v1/chat/completions", {
        "model": "huge_route", "messages": [{"role": "user", "content": "fetch it"}]}))
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == "summarised"
    sent = [r.body for r in fakes["primary"].requests if r.body.get("model") == "up-model"]
    tool_messages = [m for body in sent for m in body["messages"] if m.get("role") == "tool"]
    assert tool_messages and all(len(m["content"]) < 1_000_000 for m in tool_messages), "cut to the window"
    assert latencies and max(latencies) < STALL_BOUND_S, latencies


def test_a_4_mb_client_tool_result_on_a_way_a_resume_does_not_stall_another_tenant(
        gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    ask = [{"role": "user", "content": "look it up"}]
    fakes["primary"].queue(Reply(text="Looking.", tool_calls=[("lookup", {"q": "all"})]))
    paused = post(gw, "/v1/chat/completions", {"model": "client_route", "messages": ask, "tools": LOOKUP}).json()
    assert paused["gateway"]["status"] == "paused"
    message = paused["choices"][0]["message"]
    result = log_lines(CLIENT_RESULT_KB)
    history = [*ask, {k: v for k, v in message.items() if v is not None},
               *[{"role": "tool", "tool_call_id": call["id"], "content": result} for call in message["tool_calls"]]]
    fakes["primary"].queue(Reply(text="done"))
    answer, latencies = timed_beside(gw, lambda: post(gw, "/v1/chat/completions", {
        "model": "client_route", "messages": history, "tools": LOOKUP}))
    assert answer.status_code == 200, answer.text
    assert answer.json()["gateway"]["status"] == "completed", "resumed (way A), not a new loop"
    assert latencies and max(latencies) < STALL_BOUND_S, latencies


def count(gw: Gateway, key: str, model: str = "solo_primary", content: str = "Hello") -> httpx.Response:
    return post(gw, "/v1/messages/count_tokens", {"model": model, "messages": [{"role": "user", "content": content}]},
                key)


def test_count_tokens_is_under_the_keys_rpm_with_an_anthropic_429(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    first = count(gw, "rpm2-key", "solo_claude")  # an upstream count is one request of the key, like any other
    second = count(gw, "rpm2-key")
    third = count(gw, "rpm2-key", "solo_claude")
    assert [first.status_code, second.status_code] == [200, 200]
    assert first.json()["gateway"]["method"] == "exact" and second.json()["gateway"]["method"] == "estimate"
    assert third.status_code == 429, third.text
    body = third.json()
    assert body["type"] == "error" and body["error"]["type"] == "rate_limit_error", body
    assert third.headers.get("retry-after")
    counted_upstream = [r for r in fakes["claude"].requests if r.path.endswith("/count_tokens")]
    assert len(counted_upstream) == 1, "the refused call never reached Anthropic"


def test_count_tokens_takes_and_frees_a_concurrency_slot(gw: Gateway, fakes: dict[str, FakeUpstream],
                                                         slow_primary: Callable[..., None]) -> None:
    for _ in range(3):  # each call's slot is freed: a max_concurrent: 1 key is admitted again and again
        assert count(gw, "conc-key").status_code == 200
    hold = threading.Event()
    slow_primary(hold=hold)
    busy = threading.Thread(target=lambda: post(gw, "/v1/chat/completions", {
        "model": "plain", "messages": [{"role": "user", "content": "hi"}]}, "conc-key"), daemon=True)
    busy.start()
    deadline = time.monotonic() + 20
    while not fakes["primary"].requests and time.monotonic() < deadline:
        time.sleep(0.02)
    assert fakes["primary"].requests, "the held request reached the upstream"
    refused = count(gw, "conc-key")
    hold.set()
    busy.join(30)
    assert refused.status_code == 429 and refused.json()["error"]["type"] == "rate_limit_error", refused.text
    assert count(gw, "conc-key").status_code == 200


def test_a_route_may_count_locally_instead_of_asking_anthropic(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    answer = count(gw, KEY, "claude_local")
    assert answer.status_code == 200 and answer.json()["gateway"]["method"] == "estimate", answer.text
    assert answer.json()["input_tokens"] > 0
    assert not [r for r in fakes["claude"].requests if r.path.endswith("/count_tokens")]


def test_a_6_mb_count_tokens_body_does_not_stall_another_tenant(gw: Gateway) -> None:
    text = log_lines(COUNT_BODY_KB)
    answer, latencies = timed_beside(gw, lambda: count(gw, KEY, content=text))
    assert answer.status_code == 200, answer.text
    assert answer.json()["input_tokens"] > 500_000
    assert latencies and max(latencies) < STALL_BOUND_S, latencies
