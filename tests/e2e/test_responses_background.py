"""Background responses end to end: real gateway processes sharing a real Redis, the official SDK.

Two replicas (``a`` and ``b``) share one Redis database: a run started on one is polled, followed
and cancelled through the other. A third process is killed mid-run to show that the run's lease
ends it as ``failed`` instead of leaving it ``in_progress`` forever. The slow server tool is an
HTTP endpoint of this test process, so the test sees the tool start and sees it cancelled.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import redis
from aiohttp import web

from tests.e2e.conftest import KEY, OTHER_KEY, Gateway, gateway_config, require_redis
from tests.fakes.threaded import ThreadedApp
from tests.fakes.upstream import FakeUpstream, Reply

REDIS_URL = os.environ["LOOPGATE_TEST_REDIS_URL"]  # the suite's own server (tests/conftest.py)
IN_CI = os.environ.get("CI", "").strip().lower() == "true"
LEASE_S = 2.0


class SlowTool(ThreadedApp):
    """``POST /slow``: answers after ``seconds``; records starts, finishes and cancellations."""

    def __init__(self) -> None:
        super().__init__()
        self.started: list[dict[str, Any]] = []
        self.finished = 0
        self.cancelled = 0
        self._lock = threading.Lock()

    def build(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/slow", self._slow)
        return app

    async def _slow(self, request: web.Request) -> web.Response:
        body = await request.json()
        with self._lock:
            self.started.append(body)
        try:
            await asyncio.sleep(float(body.get("seconds", 30)))
        except asyncio.CancelledError:  # the gateway closed the connection: the tool call was cancelled
            with self._lock:
                self.cancelled += 1
            raise
        with self._lock:
            self.finished += 1
        return web.Response(text="slow result")

    def reset(self) -> None:
        with self._lock:
            self.started.clear()
            self.finished = self.cancelled = 0


def _config(fakes: dict[str, FakeUpstream], slow_url: str) -> str:
    text = gateway_config(fakes, store_url=REDIS_URL, extra_models="""
  bg_agent:
    targets: [{provider: primary, model: up-model}]
    tools: [get_weather, sleepy, slow_http]
    max_tool_iterations: 6
""")
    tool = (f"  slow_http:\n    description: A slow remote tool\n"
            f"    parameters: {{type: object, properties: {{seconds: {{type: number}}}}}}\n"
            f"    http: {{url: '{slow_url}/slow', timeout_s: 60}}\n")
    text = text.replace("\nmodels:\n", "\n" + tool + "models:\n", 1)
    return text + f"background: {{lease_s: {LEASE_S}, heartbeat_s: 0.2, poll_s: 0.05}}\n"


@pytest.fixture(scope="module")
def slow_tool() -> Iterator[SlowTool]:
    server = SlowTool()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def replicas(fakes: dict[str, FakeUpstream], slow_tool: SlowTool) -> Iterator[tuple[Gateway, Gateway]]:
    require_redis(REDIS_URL)
    redis.Redis.from_url(REDIS_URL).flushdb()
    config = _config(fakes, slow_tool.url)
    a, b = Gateway(config).start(), Gateway(config).start()
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture(autouse=True)
def _reset_slow(slow_tool: SlowTool) -> None:
    slow_tool.reset()


def _wait(predicate: Any, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _poll(client: openai.OpenAI, response_id: str, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        response = client.responses.retrieve(response_id)
        if response.status not in ("queued", "in_progress"):
            return response
        assert time.monotonic() < deadline, f"still {response.status}"
        time.sleep(0.05)


def test_poll_to_completion_from_another_replica(replicas: tuple[Gateway, Gateway],
                                                 fakes: dict[str, FakeUpstream]) -> None:
    a, b = replicas
    fakes["primary"].queue(Reply(tool_calls=[("sleepy", {"ms": 1500})]), Reply(text="All done."))
    created = a.client().responses.create(model="bg_agent", input="take your time", background=True)
    assert created.status in ("queued", "in_progress")
    assert created.background is True
    assert created.id.startswith("resp_")
    seen = b.client().responses.retrieve(created.id)  # the other replica knows it at once
    assert seen.status in ("queued", "in_progress")
    final = _poll(b.client(), created.id)
    assert final.status == "completed"
    assert final.output_text == "All done."
    assert [item.type for item in final.output] == ["mcp_call", "message"]
    assert final.background is True
    # Another tenant cannot see it.
    with pytest.raises(openai.NotFoundError):
        b.client(OTHER_KEY).responses.retrieve(created.id)


def test_cancel_from_another_replica_stops_the_running_tool(replicas: tuple[Gateway, Gateway],
                                                           fakes: dict[str, FakeUpstream],
                                                           slow_tool: SlowTool) -> None:
    a, b = replicas
    fakes["primary"].queue(Reply(tool_calls=[("slow_http", {"seconds": 30})]), Reply(text="never"))
    created = a.client().responses.create(model="bg_agent", input="go slow", background=True)
    _wait(lambda: len(slow_tool.started) == 1, what="the slow tool to start")
    # A poll shows the loop's progress: the running tool as an in-progress mcp_call item.
    _wait(lambda: [(i.type, i.name, i.status) for i in b.client().responses.retrieve(created.id).output]
          == [("mcp_call", "slow_http", "in_progress")], what="the running tool in a poll")
    items = b.client().responses.input_items.list(created.id)  # listed while it runs
    assert [item.type for item in items.data] == ["message"]
    with pytest.raises(openai.NotFoundError):  # another tenant can neither see nor cancel it
        b.client(OTHER_KEY).responses.cancel(created.id)
    started = time.monotonic()
    cancelled = b.client().responses.cancel(created.id)
    assert cancelled.status == "cancelled"
    assert time.monotonic() - started < 5
    _wait(lambda: slow_tool.cancelled == 1, what="the tool call to be cancelled")
    assert slow_tool.finished == 0
    assert a.client().responses.retrieve(created.id).status == "cancelled"
    # Cancelling twice is idempotent; the model was never asked again.
    assert a.client().responses.cancel(created.id).status == "cancelled"
    assert len(fakes["primary"].requests) == 1


def test_delete_stops_a_running_response_from_another_replica(replicas: tuple[Gateway, Gateway],
                                                              fakes: dict[str, FakeUpstream],
                                                              slow_tool: SlowTool) -> None:
    a, b = replicas
    fakes["primary"].queue(Reply(tool_calls=[("slow_http", {"seconds": 30})]), Reply(text="never"))
    created = a.client().responses.create(model="bg_agent", input="go slow", background=True)
    _wait(lambda: len(slow_tool.started) == 1, what="the slow tool to start")
    b.client().responses.delete(created.id)
    # The running replica's next heartbeat finds the run gone: it stops, cancelling the tool.
    _wait(lambda: slow_tool.cancelled == 1, what="the tool call to be cancelled")
    for gw in (a, b):
        with pytest.raises(openai.NotFoundError):
            gw.client().responses.retrieve(created.id)
    assert len(fakes["primary"].requests) == 1


def test_cancel_a_finished_response_is_refused(replicas: tuple[Gateway, Gateway],
                                               fakes: dict[str, FakeUpstream]) -> None:
    a, _ = replicas
    fakes["primary"].queue(Reply(text="quick"))
    created = a.client().responses.create(model="bg_agent", input="hi", background=True)
    assert _poll(a.client(), created.id).status == "completed"
    with pytest.raises(openai.BadRequestError):
        a.client().responses.cancel(created.id)


def test_stream_resume_with_starting_after_on_another_replica(replicas: tuple[Gateway, Gateway],
                                                             fakes: dict[str, FakeUpstream]) -> None:
    a, b = replicas
    fakes["primary"].queue(Reply(tool_calls=[("sleepy", {"ms": 600})]), Reply(text="The streamed final answer."))
    first: list[Any] = []
    with a.client().responses.create(model="bg_agent", input="stream it", background=True, stream=True) as stream:
        for event in stream:
            first.append(event)
            if event.type == "response.in_progress":
                break  # the client goes away; the run goes on
    response_id = first[0].response.id
    last = first[-1].sequence_number
    assert [e.sequence_number for e in first] == list(range(len(first)))
    rest = list(b.client().responses.retrieve(response_id, stream=True, starting_after=last))
    assert [e.sequence_number for e in rest] == list(range(last + 1, last + 1 + len(rest)))
    assert rest[-1].type == "response.completed"
    assert rest[-1].response.output_text == "The streamed final answer."
    text = "".join(e.delta for e in [*first, *rest] if e.type == "response.output_text.delta")
    assert text == "The streamed final answer."
    # A replay from the start (starting_after omitted) gives the whole stream, identical.
    whole = list(a.client().responses.retrieve(response_id, stream=True))
    assert [e.sequence_number for e in whole] == list(range(len(whole)))
    assert [e.model_dump() for e in whole[last + 1:]] == [e.model_dump() for e in rest]
    # The SDK's accumulating stream helper accepts the replayed stream unchanged.
    assert whole[0].type == "response.created"


def test_stream_needs_a_background_stream_response(replicas: tuple[Gateway, Gateway],
                                                   fakes: dict[str, FakeUpstream]) -> None:
    a, _ = replicas
    fakes["primary"].queue(Reply(text="plain"))
    created = a.client().responses.create(model="bg_agent", input="hi", background=True)
    _poll(a.client(), created.id)
    reply = httpx.get(f"{a.url}/v1/responses/{created.id}", params={"stream": "true"},
                      headers={"authorization": f"Bearer {KEY}"})
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "stream"
    reply = httpx.get(f"{a.url}/v1/responses/{created.id}", params={"stream": "true", "starting_after": "x"},
                      headers={"authorization": f"Bearer {KEY}"})
    assert reply.status_code == 400


def test_background_needs_store(replicas: tuple[Gateway, Gateway]) -> None:
    a, _ = replicas
    with pytest.raises(openai.BadRequestError) as info:
        a.client().responses.create(model="bg_agent", input="hi", background=True, store=False)
    assert info.value.body["param"] == "background"  # type: ignore[index]


def test_a_dead_replica_s_run_fails_after_its_lease(replicas: tuple[Gateway, Gateway],
                                                     fakes: dict[str, FakeUpstream], slow_tool: SlowTool) -> None:
    _, b = replicas
    doomed = Gateway(_config(fakes, slow_tool.url)).start()
    try:
        fakes["primary"].queue(Reply(tool_calls=[("slow_http", {"seconds": 30})]), Reply(text="never"))
        with doomed.client().responses.create(model="bg_agent", input="go", background=True, stream=True) as stream:
            first = next(iter(stream))
        response_id, seen = first.response.id, first.sequence_number
        _wait(lambda: len(slow_tool.started) == 1, what="the slow tool to start")
        assert doomed.process is not None
        doomed.process.send_signal(signal.SIGKILL)  # no shutdown code runs: a crash
        doomed.process.wait(10)
        assert b.client().responses.retrieve(response_id).status == "in_progress"  # the lease still runs
        # A follower on the surviving replica waits, then itself ends the run once the lease is over.
        rest = list(b.client().responses.retrieve(response_id, stream=True, starting_after=seen))
        assert rest[-1].type == "response.failed"
        assert [e.sequence_number for e in rest] == list(range(seen + 1, seen + 1 + len(rest)))
        failed = b.client().responses.retrieve(response_id)
        assert failed.status == "failed"
        assert failed.error is not None and failed.error.code == "server_error"
        assert rest[-1].response.status == "failed"
        assert b.client().responses.retrieve(response_id).status == "failed"  # stays so
    finally:
        doomed.stop()


def test_a_replica_that_shuts_down_ends_its_runs_at_once(replicas: tuple[Gateway, Gateway],
                                                         fakes: dict[str, FakeUpstream],
                                                         slow_tool: SlowTool) -> None:
    _, b = replicas
    # A lease far longer than the test: only the graceful path can end the run in time.
    # A store deadline a loaded machine cannot miss: this test is about the graceful path, not store timeouts.
    text = _config(fakes, slow_tool.url).replace(f"lease_s: {LEASE_S}", "lease_s: 600")
    text = text.replace("fail_open_ms: ", "timeout_ms: 10000, fail_open_ms: ", 1)
    assert "timeout_ms: 10000" in text
    leaving = Gateway(text).start()
    try:
        fakes["primary"].queue(Reply(tool_calls=[("slow_http", {"seconds": 30})]), Reply(text="never"))
        with leaving.client().responses.create(model="bg_agent", input="go", background=True, stream=True) as stream:
            first = next(iter(stream))
        response_id = first.response.id
        _wait(lambda: len(slow_tool.started) == 1, what="the slow tool to start")
        assert leaving.process is not None
        leaving.process.terminate()  # SIGTERM: uvicorn's graceful shutdown runs the lifespan's end
        leaving.process.wait(60)  # exited by itself (Gateway.stop would SIGKILL a slow one after 10 s)
        failed = b.client().responses.retrieve(response_id)
        assert failed.status == "failed"
        assert failed.error is not None and "shut down" in failed.error.message
        _wait(lambda: slow_tool.cancelled == 1, what="the tool call to be cancelled")
        events = list(b.client().responses.retrieve(response_id, stream=True))
        assert events[-1].type == "response.failed"
    finally:
        leaving.stop()


@pytest.fixture(scope="module")
def limited(fakes: dict[str, FakeUpstream], slow_tool: SlowTool) -> Iterator[Gateway]:
    """One process, the embedded store, one background run at a time and at most 16 stored events."""
    config = _config(fakes, slow_tool.url).replace(f'url: "{REDIS_URL}"', 'url: "memory://"')
    config = config.replace("background: {", "background: {max_concurrent: 1, max_events: 16, ")
    gw = Gateway(config).start()
    yield gw
    gw.stop()


def test_memory_store_runs_background_in_one_process(limited: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("get_weather", {"city": "Oslo"})]), Reply(text="Cold."))
    client = limited.client()
    created = client.responses.create(model="bg_agent", input="weather?", background=True)
    final = _poll(client, created.id)
    assert (final.status, final.output_text) == ("completed", "Cold.")
    client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)


def test_concurrency_cap_answers_429(limited: Gateway, fakes: dict[str, FakeUpstream], slow_tool: SlowTool) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("slow_http", {"seconds": 30})]), Reply(text="never"))
    client = limited.client()
    running = client.responses.create(model="bg_agent", input="slow", background=True)
    _wait(lambda: len(slow_tool.started) == 1, what="the slow tool to start")
    with pytest.raises(openai.RateLimitError) as info:
        client.responses.create(model="bg_agent", input="another", background=True)
    assert info.value.code == "too_many_background_responses"
    assert client.responses.cancel(running.id).status == "cancelled"
    _wait(lambda: slow_tool.cancelled == 1, what="the tool call to be cancelled")
    fakes["primary"].queue(Reply(text="room again"))
    assert _poll(client, client.responses.create(model="bg_agent", input="x", background=True).id).status == "completed"


def test_stored_events_cap_fails_the_run(limited: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(*[Reply(tool_calls=[("get_weather", {"city": f"C{i}"})]) for i in range(4)],
                           Reply(text="too late"))
    client = limited.client()
    with client.responses.create(model="bg_agent", input="many", background=True, stream=True) as stream:
        events = list(stream)
    response_id = events[0].response.id
    assert len(events) <= 16  # the last one, response.failed, included
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type == "response.failed"
    final = _poll(client, response_id)
    assert final.status == "failed"
    assert final.error is not None and "background.max_events" in final.error.message
    assert final.error.code == "events_limit_exceeded"
    assert final.model_dump() == events[-1].response.model_dump()


def test_stored_event_bytes_cap_ends_every_stream_with_response_failed(
        replicas: tuple[Gateway, Gateway], fakes: dict[str, FakeUpstream], slow_tool: SlowTool) -> None:
    """Past ``background.max_event_bytes`` the run fails, and every stream following it, on any replica,
    ends with that ``response.failed`` event instead of just stopping; nothing of the run stays held."""
    _, b = replicas
    config = _config(fakes, slow_tool.url).replace("background: {", "background: {max_concurrent: 1, "
                                                   "max_event_bytes: 8192, ")
    capped = Gateway(config).start()
    try:
        fakes["primary"].queue(Reply(tool_calls=[("slow_http", {"seconds": 1.5})]),
                               Reply(text="far too long " * 1000, pieces=20))
        with capped.client().responses.create(model="bg_agent", input="go", background=True, stream=True) as stream:
            events = iter(stream)
            own = [next(events)]
            response_id = own[0].response.id
            _wait(lambda: len(slow_tool.started) == 1, what="the slow tool to start")
            followers: dict[str, list[Any]] = {}

            def follow(name: str, gateway: Gateway) -> None:
                followers[name] = list(gateway.client().responses.retrieve(response_id, stream=True))

            threads = [threading.Thread(target=follow, args=(name, gw)) for name, gw in
                       (("same replica", capped), ("other replica", b))]
            for thread in threads:
                thread.start()
            own.extend(events)
        for thread in threads:
            thread.join(30)
        for name, seen in {"own stream": own, **followers}.items():
            assert [e.sequence_number for e in seen] == list(range(len(seen))), name
            assert seen[-1].type == "response.failed", name
            assert seen[-1].response.error.code == "events_limit_exceeded", name
        final = b.client().responses.retrieve(response_id)
        assert final.status == "failed"
        assert final.error is not None and final.error.code == "events_limit_exceeded"
        assert "background.max_event_bytes (8192)" in final.error.message
        assert final.model_dump() == own[-1].response.model_dump()
        run = redis.Redis.from_url(REDIS_URL).hgetall(f"loopgate:{{bg:{response_id}}}:run")
        assert (run[b"s"], run[b"lu"]) == (b"failed", b"0")  # ended: its lease is over
        # Its slot (background.max_concurrent: 1) was given back: the next run starts and completes.
        fakes["primary"].queue(Reply(text="room again"))
        again = capped.client().responses.create(model="bg_agent", input="x", background=True)
        assert _poll(capped.client(), again.id).status == "completed"
    finally:
        capped.stop()
