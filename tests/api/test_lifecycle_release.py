"""Every holder gives back what it holds on every exit, a ``BaseException`` included (issue 45, item 1).

A native library's panic (tiktoken's, pyo3's ``PanicException``) is a ``BaseException``; a surface that
caught only ``Exception`` never settled its admission, so the key (``max_concurrent: 1``) and its
tenant were 429 for good. Here the work a path calls raises a custom ``BaseException`` (the
``mock`` provider's calls are patched), in process on ``memory://``: the request gets a clean
error in its surface's shape, and the next request of the key is served. The real panic, over
HTTP on memory and Redis, is tests/e2e/test_hostile_whitespace.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from gateway.api.app import create_app
from gateway.api.request.lifecycle import Work
from gateway.api.runtime import Runtime
from gateway.background.runner import BackgroundRunner
from gateway.config import parse_config
from gateway.config.model import BackgroundConfig
from gateway.governance.admission import Admission
from gateway.http.incoming import Incoming
from gateway.providers.mock import MockAdapter
from gateway.store.background.memory import MemoryBackground

CONFIG = """
providers:
  fake: {type: mock}
  up: {type: openai, api_key: k, base_url: "http://127.0.0.1:9"}
models:
  m: {targets: [{provider: fake, model: mock-1}]}
  e: {kind: embeddings, targets: [{provider: up, model: text-embedding-3-small, dimensions: 8}]}
auth:
  keys:
    - {key: k1, tenant: t1, max_concurrent: 1}
    - {key: k2, tenant: t1}
tenants:
  t1: {max_concurrent: 1}
background: {lease_s: 5, heartbeat_s: 0.05, poll_s: 0.05}
"""
K1 = {"authorization": "Bearer k1", "anthropic-version": "2023-06-01"}
K2 = {"authorization": "Bearer k2", "anthropic-version": "2023-06-01"}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {"model": "m", "max_tokens": 32, "messages": [{"role": "user", "content": "hi"}]}
RESPONSES = {"model": "m", "input": "hi"}


class FakePanic(BaseException):
    """Stands in for ``pyo3_runtime.PanicException``: not an ``Exception``."""


@pytest.fixture
async def gateway() -> AsyncIterator[tuple[httpx.AsyncClient, Runtime]]:
    app = create_app(parse_config(CONFIG, env={}))
    async with app.app.router.lifespan_context(app.app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=30) as client:
            yield client, app.state.runtime


@pytest.fixture
def panics(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, bool]]:
    """While ``on`` is set, every model call panics (a stream after its first piece when ``mid_stream``)."""
    state = {"on": True, "mid_stream": False}
    complete, stream = MockAdapter.complete, MockAdapter.stream

    async def panicking_complete(self: MockAdapter, *args: Any, **kwargs: Any) -> Any:
        if state["on"]:
            raise FakePanic("called `Result::unwrap()` on an `Err` value")
        return await complete(self, *args, **kwargs)

    async def panicking_stream(self: MockAdapter, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        pieces = 0
        async for item in stream(self, *args, **kwargs):
            if state["on"] and (not state["mid_stream"] or pieces):
                raise FakePanic("called `Result::unwrap()` on an `Err` value")
            pieces += 1
            yield item

    monkeypatch.setattr(MockAdapter, "complete", panicking_complete)
    monkeypatch.setattr(MockAdapter, "stream", panicking_stream)
    yield state
    state["on"] = False


async def served_after(client: httpx.AsyncClient, panics: dict[str, bool]) -> None:
    """The key and another key of its tenant are served again: nothing of the failed request is held."""
    panics["on"] = False
    for headers in (K1, K2):
        answer = await client.post("/v1/chat/completions", json=CHAT, headers=headers)
        assert answer.status_code == 200, answer.text


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", CHAT), ("/v1/chat/completions", {**CHAT, "stream": True}),
    ("/v1/messages", MESSAGES), ("/v1/messages", {**MESSAGES, "stream": True}),
    ("/v1/responses", RESPONSES), ("/v1/responses", {**RESPONSES, "stream": True}),
])
async def test_a_panic_before_any_output_is_a_500_in_the_surfaces_shape(
        gateway: tuple[httpx.AsyncClient, Runtime], panics: dict[str, bool], path: str, body: dict[str, Any]) -> None:
    client, _ = gateway
    answer = await client.post(path, json=body, headers=K1)
    assert answer.status_code == 500, answer.text
    error = answer.json()
    if path == "/v1/messages":
        assert error["type"] == "error" and error["error"]["type"] == "api_error", error
    else:
        assert error["error"]["code"] == "internal_error", error
    assert "unwrap" not in answer.text  # the panic's own words stay in the log
    await served_after(client, panics)


@pytest.mark.parametrize(("path", "body", "failure"), [
    ("/v1/chat/completions", {**CHAT, "stream": True}, b'"internal_error"'),
    ("/v1/messages", {**MESSAGES, "stream": True}, b"event: error"),
    ("/v1/responses", {**RESPONSES, "stream": True}, b"event: response.failed"),
])
async def test_a_panic_mid_stream_ends_the_stream_with_an_error_event(
        gateway: tuple[httpx.AsyncClient, Runtime], panics: dict[str, bool], path: str, body: dict[str, Any],
        failure: bytes) -> None:
    client, _ = gateway
    panics["mid_stream"] = True
    answer = await client.post(path, json=body, headers=K1)
    assert answer.status_code == 200
    assert failure in answer.content, answer.text
    await served_after(client, panics)


async def test_a_background_response_that_panics_ends_failed_and_frees_its_slots(
        gateway: tuple[httpx.AsyncClient, Runtime], panics: dict[str, bool]) -> None:
    client, runtime = gateway
    started = await client.post("/v1/responses", json={**RESPONSES, "background": True}, headers=K1)
    assert started.status_code == 200, started.text
    response_id = started.json()["id"]
    await runtime.background.wait_local(response_id, 10.0)
    polled = await client.get(f"/v1/responses/{response_id}", headers=K1)
    assert polled.json()["status"] == "failed", polled.text
    assert runtime.background.running == 0  # the process-wide slot
    await served_after(client, panics)
    again = await client.post("/v1/responses", json={**RESPONSES, "background": True}, headers=K1)
    assert again.status_code == 200, again.text
    await runtime.background.wait_local(again.json()["id"], 10.0)


@pytest.mark.parametrize("path", ["/v1/embeddings", "/embeddings"])  # its own path; lifecycle.endpoint's
async def test_an_embeddings_panic_is_given_back(gateway: tuple[httpx.AsyncClient, Runtime], panics: dict[str, bool],
                                                 monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    client, runtime = gateway

    async def panic(*args: Any, **kwargs: Any) -> Any:
        raise FakePanic("called `Result::unwrap()` on an `Err` value")

    monkeypatch.setattr(runtime.embedder, "embed", panic)
    answer = await client.post(path, json={"model": "e", "input": "hi"}, headers=K1)
    assert answer.status_code == 500 and answer.json()["error"]["code"] == "internal_error", answer.text
    await served_after(client, panics)


def _work(runtime: Runtime) -> Work:
    """A work of key k1, as the MCP sampling path makes one (no HTTP request)."""
    async def no_body() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    incoming = Incoming({"type": "http", "headers": [(b"authorization", b"Bearer k1")]}, no_body)
    return runtime.lifecycle.begin("POST", "/v1/chat/completions", incoming)


@pytest.mark.parametrize("exit_", [asyncio.CancelledError(), KeyboardInterrupt(), SystemExit(3)])
async def test_an_exit_is_given_back_then_raised_again(gateway: tuple[httpx.AsyncClient, Runtime],
                                                       exit_: BaseException) -> None:
    _, runtime = gateway
    work = _work(runtime)
    await work.authenticate()
    await work.admit(100)
    with pytest.raises(type(exit_)):
        await work.failed(exit_)
    again = _work(runtime)  # max_concurrent 1: only admitted if the first was given back
    await again.authenticate()
    await again.admit(100)
    await again.settle(None)


async def test_a_failure_settling_the_admission_still_frees_the_background_slot(
        gateway: tuple[httpx.AsyncClient, Runtime], monkeypatch: pytest.MonkeyPatch) -> None:
    _, runtime = gateway
    work = _work(runtime)
    work.background = True
    await work.authenticate()
    await work.admit(100)
    admission, slot = work.admission, work.slot
    assert admission is not None and slot is not None
    finish = Admission.finish

    def panicking(self: Admission, usage: Any) -> Any:
        if self is admission:
            raise FakePanic("settling")
        return finish(self, usage)

    monkeypatch.setattr(Admission, "finish", panicking)
    with pytest.raises(FakePanic):
        await work.settle(None)
    assert slot._done  # given back all the same


async def _panicking_run(rid: str, closed: list[str], exit_: BaseException) -> AsyncIterator[dict[str, Any]]:
    try:
        yield {"type": "response.created", "sequence_number": 0,
               "response": {"id": rid, "object": "response", "status": "in_progress", "output": []}}
        yield {"type": "response.output_text.delta", "sequence_number": 1, "delta": "partial"}
        raise exit_
    finally:
        closed.append(rid)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_background_run_whose_events_panic_ends_failed_and_frees_its_process_slot(stream: bool) -> None:
    """The runner itself, fed a stream that raises a ``BaseException`` (no renderer in between to catch it)."""
    store = MemoryBackground()
    config = BackgroundConfig(max_concurrent=1, max_events=16, max_event_bytes=1 << 20, lease_s=5.0,
                              heartbeat_s=0.05, poll_s=0.05)
    runner = BackgroundRunner(store, config, 60)
    closed: list[str] = []
    await runner.launch("t1", _panicking_run("resp_p", closed, FakePanic("unwrap")), stream=stream)
    await runner.wait_local("resp_p", 10.0)
    assert not runner.is_local("resp_p") and runner.running == 0
    stored = await store.get("resp_p", "t1")
    assert (stored.status, stored.response["error"]["code"]) == ("failed", "server_error")
    if stream:
        frames = await store.events("resp_p", "t1", -1, 10)
        assert frames[-1].startswith(b"event: response.failed")
    assert closed == ["resp_p"]
    runner.check_capacity()  # max_concurrent 1: the slot is free again

