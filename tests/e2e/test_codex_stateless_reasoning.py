"""Codex CLI itself carrying its model's reasoning through the gateway's sealed reasoning items.

Codex asks for ``include: ["reasoning.encrypted_content"]`` and sends every item back. Here its
requests go through a balancer without affinity to two gateway replicas that share only
``responses.sealing_keys`` (each its own ``memory://`` store): the turn that calls Codex's
``exec_command`` is answered by one, the command's output goes to the other, which holds nothing
of the conversation. The model's provider artifacts of the first turn reach it again only if
Codex carried them back in the sealed ``encrypted_content`` and the second replica opened it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.e2e.codex import run_codex
from tests.e2e.conftest import KEY, Gateway, gateway_config
from tests.e2e.test_codex import DONE, EXEC, SMALL, finished, ran_exec
from tests.fakes.threaded import ThreadedApp
from tests.fakes.tool_server import ToolServer
from tests.fakes.upstream import FakeUpstream, Reply

THOUGHT = "Run the command the user asked for."
_HOP = frozenset({"host", "content-length", "transfer-encoding", "connection"})


class Balancer(ThreadedApp):
    """Forwards each request to a replica: ``POST /v1/responses`` to each in turn, anything else to the first."""

    def __init__(self, replicas: tuple[str, str]) -> None:
        super().__init__()
        self.replicas = replicas
        self.sent: list[str] = []

    def build(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        return app

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        base = self.replicas[0]
        if request.method == "POST" and request.path == "/v1/responses":
            base = self.replicas[len(self.sent) % 2]
            self.sent.append(base)
        headers = {name: value for name, value in request.headers.items() if name.lower() not in _HOP}
        async with aiohttp.ClientSession(auto_decompress=False) as session, session.request(
                request.method, base + request.path_qs, data=await request.read(), headers=headers) as upstream:
            response = web.StreamResponse(status=upstream.status, headers={
                name: value for name, value in upstream.headers.items() if name.lower() not in _HOP})
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response


@pytest.fixture(scope="module")
def balancer(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> Iterator[Balancer]:
    config = gateway_config(fakes, tool_server=tool_server.url) + \
        '\nresponses: {sealing_keys: ["codex-stateless-reasoning-key-0123456789abcdef"]}\n'
    first, second = Gateway(config).start(), Gateway(config).start()
    front = Balancer((first.url, second.url))
    front.start()
    try:
        yield front
    finally:
        front.stop()
        first.stop()
        second.stop()


def signed(provider: str, body: dict[str, Any]) -> Any:
    """The first turn's artifact in the second request, in the provider's own form."""
    if provider == "gemini":
        model = [content for content in body["contents"] if content["role"] == "model"][-1]
        return [part.get("thoughtSignature") for part in model["parts"] if "functionCall" in part]
    if provider == "claude":
        assistant = [message for message in body["messages"] if message["role"] == "assistant"][-1]
        return [block.get("signature") for block in assistant["content"] if block["type"] == "thinking"]
    assistant = [message for message in body["messages"] if message["role"] == "assistant"][-1]
    return assistant.get("reasoning_content")


@pytest.mark.parametrize(("provider", "issued"), [("gemini", ["gsig-1"]), ("claude", ["sig-1"]), ("primary", THOUGHT)])
def test_codex_carries_its_models_reasoning_to_a_replica_that_holds_nothing(
        balancer: Balancer, fakes: dict[str, FakeUpstream], provider: str, issued: Any, tmp_path: Path) -> None:
    fake = fakes[provider]
    fake.queue(Reply(reasoning=THOUGHT, tool_calls=[EXEC], usage=SMALL), Reply(text=DONE, usage=SMALL))
    balancer.sent.clear()
    run = run_codex(f"{balancer.url}/v1", "run echo loopgate-ok", api_key=KEY, cwd=tmp_path,
                    model=f"cc_{provider}", timeout=90)
    assert finished(run) == DONE
    ran_exec(run)
    assert balancer.sent == list(balancer.replicas), "each turn went to another replica"
    assert len(fake.requests) == 2
    assert signed(provider, fake.requests[1].body) == issued
