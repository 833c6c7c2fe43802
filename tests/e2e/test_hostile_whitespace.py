"""A million spaces never lock a key or a tenant out (issue 45, item 1), against the real gateway.

tiktoken's o200k encoder (every default model's) panicked on a run of ~1M spaces: a
``BaseException`` that the surfaces' ``except Exception`` let through, so the request's admission
was never settled and every later request of its key (and tenant) was 429 "too many concurrent
requests" for good; a background run hit the same way stayed ``in_progress`` holding a process slot.

Each test sends 1M spaces on one surface (or makes a tool return them) for a key with
``max_concurrent: 1`` in a tenant with ``max_concurrent: 1``, then a normal request of that key and
one of another key of the tenant: both must be served. On memory, and on two replicas sharing a
real Redis (the hostile request on one, the next ones on both).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from aiohttp import web
from mcp.server.mcpserver import MCPServer

from tests.e2e.conftest import Gateway, gateway_config, require_redis
from tests.fakes.sdk_mcp import _Served
from tests.fakes.threaded import ThreadedApp
from tests.fakes.upstream import FakeUpstream, Reply

REDIS_URL = os.environ["LOOPGATE_TEST_REDIS_URL"]  # the suite's own server (tests/conftest.py)
SPACES = " " * 1_000_000
KEY = "ws-key"  # max_concurrent 1, in a tenant with max_concurrent 1
TENANT_KEY = "ws-other"  # the same tenant, no limit of its own
AUTH = f"""auth:
  keys:
    - {{key: {KEY}, tenant: ws-t, max_concurrent: 1}}
    - {{key: {TENANT_KEY}, tenant: ws-t}}
"""
ANTHROPIC = {"anthropic-version": "2023-06-01"}


class SpacesTool(ThreadedApp):
    """An HTTP tool whose result is a million spaces."""

    def build(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/spaces", self._spaces)
        return app

    async def _spaces(self, request: web.Request) -> web.Response:
        await request.read()
        return web.Response(text=SPACES)


class SpacesMcp(_Served):
    """An MCP server whose ``blank`` tool returns a million spaces."""

    def __init__(self) -> None:
        server = MCPServer("spaces-test")

        @server.tool()
        def blank() -> str:
            """A blank page."""
            return SPACES

        super().__init__(server.streamable_http_app(stateless_http=True, json_response=True))


@pytest.fixture(scope="module")
def tool_servers() -> Iterator[tuple[SpacesTool, SpacesMcp]]:
    http_tool, mcp = SpacesTool(), SpacesMcp()
    http_tool.start()
    yield http_tool, mcp
    http_tool.stop()
    mcp.stop()


def config(fakes: dict[str, FakeUpstream], servers: tuple[SpacesTool, SpacesMcp], store_url: str) -> str:
    http_tool, mcp = servers
    routes = ("  ws_plain: {targets: [{provider: primary, model: gpt-4o}]}\n"
              "  ws_tools:\n    targets: [{provider: primary, model: gpt-4o}]\n"
              "    tools: [spaces, 'mcp:blanks']\n")
    text = gateway_config(fakes, store_url=store_url, extra_models=routes)
    text = text.replace("max_body_bytes: 200000", "max_body_bytes: 4000000")
    text = text.replace("auth:\n  keys:\n", AUTH, 1)
    text = text.replace("tools:\n", f"tools:\n  spaces:\n    description: A blank page\n"
                        f"    http: {{url: '{http_tool.url}/spaces', timeout_s: 20}}\n", 1)
    text = text.replace("models:\n", f"mcp_servers:\n  blanks: {{url: '{mcp.url}', timeout_s: 20}}\nmodels:\n", 1)
    return text + "tenants:\n  ws-t: {max_concurrent: 1}\n" \
        "background: {lease_s: 5, heartbeat_s: 0.2, poll_s: 0.05}\n"


@pytest.fixture(scope="module")
def memory_gateway(fakes: dict[str, FakeUpstream],
                   tool_servers: tuple[SpacesTool, SpacesMcp]) -> Iterator[tuple[Gateway, Gateway]]:
    gw = Gateway(config(fakes, tool_servers, "memory://")).start()
    yield gw, gw
    gw.stop()


@pytest.fixture(scope="module")
def redis_pair(fakes: dict[str, FakeUpstream],
               tool_servers: tuple[SpacesTool, SpacesMcp]) -> Iterator[tuple[Gateway, Gateway]]:
    require_redis(REDIS_URL)
    text = config(fakes, tool_servers, REDIS_URL)
    first, second = Gateway(text).start(), Gateway(text).start()
    yield first, second
    first.stop()
    second.stop()


@pytest.fixture(params=["memory", "redis"])
def gateways(request: pytest.FixtureRequest) -> tuple[Gateway, Gateway]:
    return request.getfixturevalue("memory_gateway" if request.param == "memory" else "redis_pair")


def post(gw: Gateway, path: str, body: dict[str, Any], key: str = KEY, **kwargs: Any) -> httpx.Response:
    return httpx.post(f"{gw.url}{path}", json=body, headers={"authorization": f"Bearer {key}", **ANTHROPIC},
                      timeout=120, **kwargs)


def served_after(pair: tuple[Gateway, Gateway]) -> None:
    """The next normal requests of the key and of its tenant, on both replicas, are served (not 429)."""
    for gw in pair:
        for key in (KEY, TENANT_KEY):
            answer = post(gw, "/v1/chat/completions", {"model": "ws_plain", "messages": [
                {"role": "user", "content": "hi"}]}, key=key)
            assert answer.status_code == 200, f"{key} after the hostile request: {answer.text}"


def not_a_server_error(answer: httpx.Response) -> None:
    assert answer.status_code < 500, answer.text


CHAT = {"model": "ws_plain", "messages": [{"role": "user", "content": SPACES}]}
MESSAGES = {"model": "ws_plain", "max_tokens": 64, "messages": [{"role": "user", "content": SPACES}]}


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", CHAT),
    ("/v1/chat/completions", {**CHAT, "stream": True}),
    ("/v1/responses", {"model": "ws_plain", "input": SPACES}),
    ("/v1/responses", {"model": "ws_plain", "input": SPACES, "stream": True}),
    ("/v1/messages", MESSAGES),
    ("/v1/messages", {**MESSAGES, "stream": True}),
    ("/v1/messages/count_tokens", {"model": "ws_plain", "messages": [{"role": "user", "content": SPACES}]}),
], ids=["chat", "chat-stream", "responses", "responses-stream", "messages", "messages-stream", "count-tokens"])
def test_a_million_spaces_on_a_surface(gateways: tuple[Gateway, Gateway], path: str, body: dict[str, Any]) -> None:
    answer = post(gateways[0], path, body)
    not_a_server_error(answer)
    if path.endswith("count_tokens"):
        assert 1_000 < answer.json()["input_tokens"] < 1_000_000  # counted, not sized by bytes
    served_after(gateways)


def finished(gw: Gateway, response_id: str) -> str:
    """The status of background response ``response_id`` once it has stopped running."""
    deadline = time.monotonic() + 60  # a bound: a run ends at once once it is counted
    while (status := gw.client(KEY).responses.retrieve(response_id).status) in ("queued", "in_progress"):
        assert time.monotonic() < deadline, f"background response {response_id} is still {status}"
        time.sleep(0.05)
    return status


def test_a_million_spaces_in_a_background_response(gateways: tuple[Gateway, Gateway]) -> None:
    first, second = gateways
    started = post(first, "/v1/responses", {"model": "ws_plain", "input": SPACES, "background": True})
    not_a_server_error(started)
    if started.status_code == 200:
        assert finished(first, started.json()["id"]) in ("completed", "failed")
    served_after(gateways)
    again = post(second, "/v1/responses", {"model": "ws_plain", "input": "hi", "background": True})
    assert again.status_code == 200, again.text
    # Served to the end, and over before the next test: a run still queued then would take that test's
    # scripted answers from the shared fake (its model call answered "ok" instead of "A blank page.").
    assert finished(second, again.json()["id"]) == "completed"


@pytest.mark.parametrize("tool", ["spaces", "blank"], ids=["http-tool", "mcp-tool"])
def test_a_tool_returning_a_million_spaces(gateways: tuple[Gateway, Gateway], fakes: dict[str, FakeUpstream],
                                           tool: str) -> None:
    fakes["primary"].queue(Reply(tool_calls=[(tool, {})]), Reply(text="A blank page."))
    answer = post(gateways[0], "/v1/chat/completions", {"model": "ws_tools", "messages": [
        {"role": "user", "content": "Read the page."}]})
    not_a_server_error(answer)
    assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"] == "A blank page."
    served_after(gateways)
