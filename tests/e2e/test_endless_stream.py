"""An upstream stream that never ends (issue 45): the gateway keeps a bounded amount of it and ends the stream
with a clean error in the surface's own shape at ``max_response_bytes``, never rescuing it on another target.

The fake upstream (tests/fakes/endless.py) streams text as fast as the socket takes it, up to 320 MiB, with no
finish event. The gateway's resident memory is read from /proc (its high-water mark, reset before each stream).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.e2e.conftest import KEY, Gateway
from tests.fakes.endless import EndlessUpstream
from tests.fakes.upstream import FakeUpstream, Reply

MiB = 1024 * 1024
ENDLESS = 320 * MiB
SMALL = 4 * MiB  # a route's configured bound: the documented bound, at a size that keeps the tests quick
GROWTH_MB = 150  # what one such stream may add to the gateway's resident memory at most
WIRES = {"openai": "gpt-x", "anthropic": "claude-sonnet-4-5", "gemini": "gemini-2.5-pro"}


def config(endless: dict[str, EndlessUpstream], fallback: FakeUpstream, bound: int | None) -> str:
    limit = f", max_response_bytes: {bound}" if bound is not None else ""
    providers = "\n".join(f"  {wire}: {{type: {wire}, base_url: '{fake.url}', api_key: k, timeout_s: 60{limit}}}"
                          for wire, fake in endless.items())
    models = "\n".join(f"  endless_{wire}: {{targets: [{{provider: {wire}, model: {WIRES[wire]}}}, "
                       "{provider: fallback, model: gpt-y}]}" for wire in endless)
    return f"""
server: {{host: 127.0.0.1, port: __PORT__}}
auth: {{keys: [{{key: {KEY}, tenant: team-a}}]}}
routing: {{request_timeout_s: 120}}
providers:
{providers}
  fallback: {{type: openai, base_url: '{fallback.url}', api_key: k}}
models:
{models}
"""


@pytest.fixture(scope="module")
def endless() -> Iterator[dict[str, EndlessUpstream]]:
    fakes = {wire: EndlessUpstream(wire, ENDLESS).start() for wire in WIRES}
    yield fakes  # type: ignore[misc]
    for fake in fakes.values():
        fake.stop()


@pytest.fixture(scope="module")
def fallback() -> Iterator[FakeUpstream]:
    fake = FakeUpstream("openai")
    fake.default = Reply(text="a rescue nobody may ask for")
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def small_bound(endless: dict[str, EndlessUpstream], fallback: FakeUpstream) -> Iterator[Gateway]:
    gw = Gateway(config(endless, fallback, SMALL)).start()
    yield gw
    gw.stop()


def _status(pid: int, field: str) -> int:
    """A /proc/PID/status memory field, in MB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) // 1024
    raise AssertionError(f"{field} missing")


def _reset_peak(pid: int) -> None:
    with open(f"/proc/{pid}/clear_refs", "w") as refs:
        refs.write("5")  # VmHWM starts again from VmRSS


SURFACES: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    "responses": ("/v1/responses", {"input": "hi"}),
    "messages": ("/v1/messages", {"max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}),
}


def stream(gw: Gateway, surface: str, model: str) -> tuple[int, list[tuple[str, bytes]], Any]:
    """Read a whole stream: the bytes it carried, each event's name and first bytes, and the last data event."""
    path, body = SURFACES[surface]
    headers = {"authorization": f"Bearer {KEY}", "x-api-key": KEY}
    received = 0
    events: list[tuple[str, bytes]] = []
    last: bytes = b""
    buffer = bytearray()
    with httpx.stream("POST", f"{gw.url}{path}", json={"model": model, "stream": True, **body}, headers=headers,
                      timeout=60) as response:
        assert response.status_code == 200
        for chunk in response.iter_raw():
            received += len(chunk)
            # Linear in the stream: a Responses stream's closing events are each as large as the whole text, and
            # re-splitting the buffer on every chunk would make reading them quadratic.
            start = max(len(buffer) - 1, 0)
            buffer += chunk
            while (end := buffer.find(b"\n\n", start)) >= 0:
                event = bytes(buffer[:end])
                del buffer[:end + 2]
                start = 0
                name, data = b"", b""
                for line in event.split(b"\n", 2):
                    if line.startswith(b"event: "):
                        name = line[7:]
                    elif line.startswith(b"data: "):
                        data = line[6:]
                events.append((name.decode(), data[:200]))
                if data and data != b"[DONE]":
                    last = data
    return received, events, orjson.loads(last) if last else None


def assert_clean_end(surface: str, events: list[tuple[str, bytes]], last: Any, bound: int) -> None:
    """The stream ended with the surface's own error event naming the bound, and nothing after it."""
    if surface == "chat":
        assert events[-1][1] == b"[DONE]"
        error = last["error"]
        assert error["code"] == "stream_interrupted"
    elif surface == "responses":
        assert events[-1][0] == "response.failed"
        assert last["response"]["status"] == "failed"
        error = last["response"]["error"]
    else:
        assert events[-1][0] == "error"
        assert last["type"] == "error"
        error = last["error"]
    assert f"max_response_bytes ({bound})" in error["message"]


@pytest.mark.parametrize("surface", list(SURFACES))
@pytest.mark.parametrize("wire", list(WIRES))
def test_an_endless_stream_ends_cleanly_at_the_configured_bound(small_bound: Gateway, endless: dict[str,
                                                                EndlessUpstream], fallback: FakeUpstream,
                                                                wire: str, surface: str) -> None:
    fallback.reset()
    pid = small_bound.process.pid  # type: ignore[union-attr]
    _reset_peak(pid)
    before = _status(pid, "VmRSS")
    received, events, last = stream(small_bound, surface, f"endless_{wire}")
    assert_clean_end(surface, events, last, SMALL)
    assert received >= SMALL // 2, "the text up to the bound was streamed"
    assert not fallback.requests, "a stream past its bound is not rescued on the next target"
    assert _status(pid, "VmHWM") - before < GROWTH_MB
    # The gateway let go of the upstream at the bound: it did not read the 320 MiB.
    assert endless[wire].sent < 64 * MiB


@pytest.mark.parametrize(("wire", "surface"), [("openai", "chat"), ("anthropic", "chat"), ("openai", "responses")])
def test_an_endless_stream_at_the_default_bound_keeps_the_gateway_small(endless: dict[str, EndlessUpstream],
                                                                        fallback: FakeUpstream, wire: str,
                                                                        surface: str) -> None:
    """32 MiB (the default) of 320: the gateway grows by a bounded amount, and ends in well under a minute.

    On the Responses surface the closing events (``response.output_text.done``, ``response.content_part.done``,
    ``response.output_item.done``, ``response.failed``) each carry the whole text: joined into one write they
    held about fourteen copies of it (450 MB); they are now written a slice at a time (responses/spliced.py).
    """
    gw = Gateway(config({wire: endless[wire]}, fallback, None)).start()
    try:
        pid = gw.process.pid  # type: ignore[union-attr]
        stream(gw, "chat", f"endless_{wire}")  # warm: the first stream's imports and buffers are not its growth
        fallback.reset()
        _reset_peak(pid)
        before = _status(pid, "VmRSS")
        started = time.monotonic()
        received, events, last = stream(gw, surface, f"endless_{wire}")
        assert time.monotonic() - started < 60, "appending each delta to the whole text was quadratic"
        assert _status(pid, "VmHWM") - before < GROWTH_MB
        assert_clean_end(surface, events, last, 32 * MiB)
        assert received >= 16 * MiB, "the text up to the bound was streamed"
        assert not fallback.requests
        assert endless[wire].sent < 64 * MiB
    finally:
        gw.stop()
