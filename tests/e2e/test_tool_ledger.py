"""An approved tool runs at most once, even when the resume that ran it never recorded its result.

The Sentinel chaos run found it (seed 20261203: ``soak_delete`` ran twice for one call): a resume ran
the approved HTTP tool, the result's ledger write was lost with the Redis master, and the retry found
no record and ran the tool again. Here the same hole without a failover: the resume is cut off by its
client while the tool is in flight (the claim is released, the result never recorded), then retried.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from aiohttp import web

from gateway.loop.ledger import OUTCOME_UNKNOWN
from tests.e2e.conftest import KEY, Gateway, gateway_config
from tests.fakes.tool_server import ToolServer
from tests.fakes.upstream import FakeUpstream, Reply

HEADERS = {"authorization": f"Bearer {KEY}"}
USER = [{"role": "user", "content": "Delete record 7."}]


class HeldToolServer(ToolServer):
    """The recording ``/delete`` endpoint, answering only once ``release`` is set (bounded)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    async def _delete(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        self.calls.append(body)
        await asyncio.to_thread(self.release.wait, 30)
        return web.Response(text=f"deleted {body.get('id')}")


@pytest.fixture
def held() -> Iterator[HeldToolServer]:
    server = HeldToolServer().start()
    yield server
    server.release.set()
    server.stop()


def _until(check: Any, what: str, timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (found := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.02)
    return found


def _status(gw: Gateway, continuation_id: str) -> str:
    response = httpx.get(f"{gw.url}/v1/continuations/{continuation_id}", headers=HEADERS, timeout=10)
    return str(response.json().get("status"))


def test_a_resume_cut_off_while_its_approved_tool_runs_never_runs_it_again(fakes: dict[str, FakeUpstream],
                                                                           held: HeldToolServer) -> None:
    gw = Gateway(gateway_config(fakes, tool_server=held.url)).start()
    try:
        fakes["primary"].queue(Reply(tool_calls=[("delete_remote", {"id": "7"})]))
        paused = httpx.post(f"{gw.url}/v1/chat/completions", headers=HEADERS, timeout=30,
                            json={"model": "agent", "messages": USER}).json()
        continuation_id = paused["gateway"]["continuation_id"]
        call_id = paused["gateway"]["pending"][0]["tool_call_id"]
        decisions = {"decisions": [{"tool_call_id": call_id, "approve": True}], "stream": True}
        # The approved call is in flight at the tool server when the client goes away.
        with httpx.Client(timeout=30) as client, client.stream(
                "POST", f"{gw.url}/v1/continuations/{continuation_id}", json=decisions, headers=HEADERS) as first:
            assert first.status_code == 200
            _until(lambda: held.calls, "the approved tool was never called")
        # The cut-off resume released its claim: the continuation is resumable again, its result unrecorded.
        _until(lambda: _status(gw, continuation_id) == "pending", "the cut-off resume kept its claim")
        held.release.set()
        fakes["primary"].queue(Reply(text="Done."))
        retry = httpx.post(f"{gw.url}/v1/continuations/{continuation_id}", headers=HEADERS, timeout=30,
                           json={**decisions, "stream": False})
        assert retry.status_code == 200, retry.text
        assert retry.json()["choices"][0]["message"]["content"] == "Done."
        # Ran once (before the fix: twice); the model is told its outcome is unknown, not a made-up result.
        assert held.calls == [{"id": "7"}]
        shown = [m for m in fakes["primary"].bodies[-1]["messages"] if m.get("role") == "tool"]
        assert len(shown) == 1 and shown[0]["tool_call_id"] == call_id
        assert OUTCOME_UNKNOWN in shown[0]["content"] and "delete_remote" in shown[0]["content"]
        assert [r["status"] for r in retry.json()["gateway"]["tool_calls"]] == ["error"]
        # And the resume was accepted once: a replay is refused.
        again = httpx.post(f"{gw.url}/v1/continuations/{continuation_id}", headers=HEADERS, timeout=30,
                           json={**decisions, "stream": False})
        assert again.status_code == 409
        assert held.calls == [{"id": "7"}]
    finally:
        gw.stop()
