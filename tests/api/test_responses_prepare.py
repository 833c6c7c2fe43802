"""Each way a Responses request is prepared watches its loop once (gateway/api/responses/prepare.py).

A resume's loop is watched where it is claimed (``api/loop/resume.py``); the endpoint used to watch the
prepared loop again, so a Responses resume called ``Work.watch`` twice (issue 46). Here every
way in, JSON and stream, runs in process on the ``mock`` provider, with ``Work.watch`` recorded
as it runs: each request's work watches exactly one loop, and it is the loop whose usage the
response reports.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import orjson
import pytest

from gateway.api.app import create_app
from gateway.api.request.lifecycle import Work
from gateway.config import parse_config
from gateway.loop.engine import LoopRequest

CONFIG = """
providers:
  fake: {type: mock}
models:
  m: {targets: [{provider: fake, model: mock-1}]}
auth:
  keys:
    - {key: k1, tenant: t1}
"""
K1 = {"authorization": "Bearer k1"}
LOOKUP = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}
PAUSING = {"model": "m", "input": "use lookup", "tools": [LOOKUP]}


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(parse_config(CONFIG, env={}))
    async with app.app.router.lifespan_context(app.app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=30) as client:
            yield client


@pytest.fixture
def watched(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[Work, LoopRequest]]]:
    """Every ``Work.watch`` call, in order (the real one runs)."""
    calls: list[tuple[Work, LoopRequest]] = []
    watch = Work.watch

    def recorded(self: Work, loop_request: LoopRequest) -> None:
        calls.append((self, loop_request))
        watch(self, loop_request)

    monkeypatch.setattr(Work, "watch", recorded)
    yield calls


async def respond(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    """The Response object of ``body`` (the terminal event's, when it streams)."""
    answer = await client.post("/v1/responses", json=body, headers=K1)
    assert answer.status_code == 200, answer.text
    if not body.get("stream"):
        return answer.json()  # type: ignore[no-any-return]
    terminal = [line for line in answer.content.splitlines() if line.startswith(b'data: {"response"')][-1]
    event = orjson.loads(terminal.removeprefix(b"data: "))
    assert event["type"] == "response.completed", event
    return event["response"]  # type: ignore[no-any-return]


def once(watched: list[tuple[Work, LoopRequest]], response: dict[str, Any]) -> None:
    """One watch by one work since the last check, of the loop that produced ``response``."""
    assert len(watched) == 1, "the request watched its loop more than once (or never)"
    _, loop = watched.pop()
    assert loop.state.usage.prompt_tokens == response["usage"]["input_tokens"] > 0


@pytest.mark.parametrize("stream", [False, True])
async def test_every_way_in_watches_its_loop_once(client: httpx.AsyncClient, watched: list[tuple[Work, LoopRequest]],
                                                  stream: bool) -> None:
    new = await respond(client, {"model": "m", "input": "hi", "stream": stream})
    once(watched, new)
    continued = await respond(client, {"model": "m", "input": "again", "previous_response_id": new["id"],
                                       "stream": stream})
    once(watched, continued)

    paused = await respond(client, {**PAUSING, "stream": stream})
    once(watched, paused)
    call = paused["output"][-1]
    assert call["type"] == "function_call", paused["output"]
    answer = {"type": "function_call_output", "call_id": call["call_id"], "output": "42"}
    resumed = await respond(client, {"model": "m", "input": [answer], "previous_response_id": paused["id"],
                                     "stream": stream})
    once(watched, resumed)
    assert "42" in resumed["output"][-1]["content"][0]["text"]

    # The whole conversation sent again (store: false), ending in the answer: the paused loop it answers resumes.
    paused = await respond(client, {**PAUSING, "store": False, "stream": stream})
    once(watched, paused)
    call = paused["output"][-1]
    resent = [{"role": "user", "content": "use lookup"}, call,
              {"type": "function_call_output", "call_id": call["call_id"], "output": "43"}]
    resumed = await respond(client, {"model": "m", "input": resent, "tools": [LOOKUP], "store": False,
                                     "stream": stream})
    once(watched, resumed)
    assert "43" in resumed["output"][-1]["content"][0]["text"]
