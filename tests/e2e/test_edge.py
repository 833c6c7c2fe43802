"""The gateway's edge against hostile callers, over raw sockets: bounded heads, read timeouts, duplicate headers.

The gateway under test runs with one-second header, body and keep-alive timeouts so stalls show
within seconds; the time bounds asserted are generous (several times the timeout).
"""

from __future__ import annotations

import contextlib
import re
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from gateway.config import ConfigError, parse_config
from tests.e2e.conftest import KEY, Gateway, gateway_config
from tests.fakes.tool_server import ToolServer
from tests.fakes.upstream import FakeUpstream, Reply

TIMEOUTS = "header_timeout_s: 1, body_timeout_s: 1, keepalive_timeout_s: 1"
CHAT = orjson.dumps({"model": "plain", "messages": [{"role": "user", "content": "hello"}]})


def _config(fakes: dict[str, FakeUpstream], tool_server: ToolServer, server_extra: str) -> str:
    text = gateway_config(fakes, tool_server=tool_server.url)
    marker = "max_body_bytes: 200000}"
    assert marker in text
    return text.replace(marker, f"max_body_bytes: 200000, {server_extra}}}")


@pytest.fixture(scope="module")
def edge(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> Iterator[Gateway]:
    gw = Gateway(_config(fakes, tool_server, TIMEOUTS)).start()
    yield gw
    gw.stop()


# Raw HTTP helpers

def _connect(gw: Gateway) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One response with a Content-Length body; raises if the connection closes before it.

    Bytes after it are dropped: use it only where one response is outstanding."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a response head; got {data[:200]!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed mid-body")
        rest += chunk
    return status, headers, rest[:length]


def _closed(sock: socket.socket, within_s: float) -> bool:
    """True when the peer closes the connection (after any bytes still in flight) within ``within_s``."""
    sock.settimeout(within_s)
    deadline = time.monotonic() + within_s
    try:
        while time.monotonic() < deadline:
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return False


def _error(body: bytes) -> dict[str, object]:
    payload = orjson.loads(body)
    assert set(payload["error"]) == {"message", "type", "param", "code"}
    return payload["error"]


def _post_head(path: str, length: int | None, extra: str = "") -> bytes:
    size = f"Content-Length: {length}\r\n" if length is not None else "Transfer-Encoding: chunked\r\n"
    return (f"POST {path} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\n{size}{extra}\r\n").encode()


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


# Bounded request heads

def test_head_over_limit_gets_431_before_any_work(edge: Gateway) -> None:
    # No API key: a 401 would mean the application ran; the 431 must come first.
    sock = _connect(edge)
    pad = "".join(f"X-Pad-{i}: {'a' * 1000}\r\n" for i in range(70))
    sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n{pad}Content-Length: 2\r\n\r\n{{}}".encode())
    status, headers, body = _read_response(sock)
    assert status == 431
    assert headers["content-type"] == "application/json"
    assert headers["x-request-id"].startswith("req_")  # a new id: the refused head is never echoed
    error = _error(body)
    assert error["code"] == "request_header_fields_too_large" and "65536" in str(error["message"])
    assert _closed(sock, 2)


def test_one_huge_header_line_and_a_huge_url_get_431(edge: Gateway) -> None:
    for request in (f"GET /healthz HTTP/1.1\r\nHost: gw\r\nX-Big: {'b' * 100_000}\r\n\r\n",
                    f"GET /healthz?{'q' * 100_000} HTTP/1.1\r\nHost: gw\r\n\r\n"):
        sock = _connect(edge)
        sock.sendall(request.encode())
        assert _read_response(sock)[0] == 431
        assert _closed(sock, 2)


def test_endless_head_is_not_buffered(edge: Gateway) -> None:
    """64 MiB of headers with no end: the connection is cut after ~64 KiB and memory does not grow."""
    assert edge.process is not None
    before = _peak_rss_kib(edge.process.pid)
    sock = _connect(edge)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
    line = b"X-Pad: " + b"a" * 8185 + b"\r\n"  # 8 KiB
    sent = 0
    failed = False
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n")
    try:
        while sent < 64 * 1024 * 1024:
            sock.sendall(line)
            sent += len(line)
    except (BrokenPipeError, ConnectionResetError):
        failed = True
    sock.close()
    assert failed, "the gateway read 64 MiB of request head without closing the connection"
    assert httpx.get(f"{edge.url}/healthz", timeout=5).status_code == 200
    grown_mib = (_peak_rss_kib(edge.process.pid) - before) / 1024
    assert grown_mib < 16, f"peak RSS grew by {grown_mib:.1f} MiB"


def test_head_just_under_the_limit_is_served(edge: Gateway) -> None:
    sock = _connect(edge)
    pad = "".join(f"X-Pad-{i}: {'a' * 1000}\r\n" for i in range(60))
    sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: gw\r\n{pad}\r\n".encode())
    assert _read_response(sock)[0] == 200
    sock.close()


def test_small_head_with_a_large_body_in_one_write(edge: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    """A read that crosses the head limit but holds a complete head is split, not rejected."""
    fakes["primary"].queue(Reply(text="big ok"))
    body = orjson.dumps({"model": "plain", "messages": [{"role": "user", "content": "x" * 150_000}]})
    sock = _connect(edge)
    sock.sendall(_post_head("/v1/chat/completions", len(body)) + body)
    status, _, answer = _read_response(sock)
    assert status == 200, answer
    assert orjson.loads(answer)["choices"][0]["message"]["content"] == "big ok"
    assert fakes["primary"].bodies[0]["messages"][0]["content"] == "x" * 150_000
    sock.close()


def test_pipelined_requests_are_all_answered(edge: Gateway) -> None:
    sock = _connect(edge)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n" * 3)
    answers = b""
    while answers.count(b"HTTP/1.1 ") < 3 and (chunk := sock.recv(65536)):  # until the keep-alive timeout
        answers += chunk
    assert answers.count(b"HTTP/1.1 200 OK\r\n") == 3, answers
    sock.close()


def _chat_request(extra: str = "", version: str = "1.1") -> bytes:
    return (_post_head("/v1/chat/completions", len(CHAT), extra).replace(b"HTTP/1.1", f"HTTP/{version}".encode(), 1)
            + CHAT)


# JSON answers written whole, in one write (gateway/http/server_protocol.py: write_whole_response)

def test_json_answer_written_whole_has_every_header_and_keeps_the_connection(
        edge: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="one"))
    fakes["primary"].queue(Reply(text="two"))
    sock = _connect(edge)
    for text, request_id in (("one", "caller-id-1"), ("two", None)):
        sock.sendall(_chat_request(f"X-Request-Id: {request_id}\r\n" if request_id else ""))
        status, headers, body = _read_response(sock)
        assert status == 200, body
        assert orjson.loads(body)["choices"][0]["message"]["content"] == text
        assert headers["content-type"] == "application/json"
        assert int(headers["content-length"]) == len(body)
        assert headers["date"].endswith(" GMT")  # the server's default header
        assert headers["x-request-id"] == (request_id or headers["x-request-id"]) and headers["x-request-id"]
        assert "connection" not in headers and "transfer-encoding" not in headers
    sock.close()


@pytest.mark.parametrize("hostile", ["x" * 129, 'a"b', "a b", "caf\u00e9", "a,b;c"])
def test_a_hostile_request_id_never_reaches_a_json_answer_written_whole(
        edge: Gateway, fakes: dict[str, FakeUpstream], hostile: str) -> None:
    """The head is written without uvicorn's checks: only a checked or generated id may be in it."""
    fakes["primary"].queue(Reply(text="ok"))
    sock = _connect(edge)
    sock.sendall(_chat_request(f"X-Request-Id: {hostile}\r\n".encode().decode("latin-1")))
    status, headers, body = _read_response(sock)
    assert status == 200, body
    assert re.fullmatch(r"req_[0-9a-f]{20}", headers["x-request-id"]), headers["x-request-id"]
    sock.close()


@pytest.mark.parametrize(("extra", "version"), [("Connection: close\r\n", "1.1"), ("", "1.0")])
def test_json_answer_written_whole_closes_when_the_caller_asked(
        edge: Gateway, fakes: dict[str, FakeUpstream], extra: str, version: str) -> None:
    fakes["primary"].queue(Reply(text="bye"))
    sock = _connect(edge)
    sock.sendall(_chat_request(extra, version))
    status, headers, body = _read_response(sock)
    assert status == 200, body
    assert orjson.loads(body)["choices"][0]["message"]["content"] == "bye"
    assert headers["connection"] == "close"
    assert _closed(sock, 5)
    sock.close()


def test_pipelined_json_answers_come_whole_and_in_order(edge: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    for text in ("first", "second", "third"):
        fakes["primary"].queue(Reply(text=text))
    sock = _connect(edge)
    sock.sendall(_chat_request() * 3)
    texts = []
    data = b""
    while len(texts) < 3:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, f"closed after {texts}"
            data += chunk
        head, _, data = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK\r\n"), head
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        while len(data) < length:
            data += sock.recv(65536)
        texts.append(orjson.loads(data[:length])["choices"][0]["message"]["content"])
        data = data[length:]
    assert texts == ["first", "second", "third"]
    sock.close()


def test_caller_gone_before_the_answer_leaves_the_server_serving(edge: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="late", delay_s=0.5))
    sock = _connect(edge)
    sock.sendall(_chat_request())
    sock.close()  # before the answer: it is written to nobody, and nothing else breaks
    time.sleep(1.0)
    fakes["primary"].queue(Reply(text="next"))
    sock = _connect(edge)
    sock.sendall(_chat_request())
    status, _, body = _read_response(sock)
    assert status == 200, body
    assert orjson.loads(body)["choices"][0]["message"]["content"] == "next"
    sock.close()


# Read timeouts

def test_head_sent_a_byte_at_a_time_gets_408(edge: Gateway) -> None:
    sock = _connect(edge)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n")
    started = time.monotonic()
    for byte in b"X-Slow: abcdefghijklmnopqrstuvwxyz":
        if select.select([sock], [], [], 0.25)[0]:
            break  # the gateway answered
        sock.sendall(bytes([byte]))
    status, headers, body = _read_response(sock)
    assert status == 408 and headers["x-request-id"].startswith("req_")
    error = _error(body)
    assert error["code"] == "request_timeout" and "header_timeout_s" in str(error["message"])
    assert time.monotonic() - started < 6
    assert _closed(sock, 2)


def test_partial_head_on_a_kept_alive_connection_gets_408(edge: Gateway) -> None:
    sock = _connect(edge)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
    assert _read_response(sock)[0] == 200
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\nX-Never: ends")
    started = time.monotonic()
    status, _, body = _read_response(sock)
    assert status == 408 and _error(body)["code"] == "request_timeout"
    assert time.monotonic() - started < 5
    assert _closed(sock, 2)


def test_connection_that_sends_nothing_is_closed(edge: Gateway) -> None:
    sock = _connect(edge)
    started = time.monotonic()
    assert _closed(sock, 5)
    assert time.monotonic() - started < 5


def test_stalled_body_gets_408(edge: Gateway) -> None:
    sock = _connect(edge)
    sock.sendall(_post_head("/v1/chat/completions", 1000, "X-Request-Id: stall-42\r\n") + b'{"model": "plain"')
    started = time.monotonic()
    status, headers, body = _read_response(sock)
    assert status == 408
    assert headers["connection"] == "close"
    assert headers["x-request-id"] == "stall-42"  # the head was whole: the caller's id, as the app logs it
    error = _error(body)
    assert error["code"] == "request_timeout" and "body_timeout_s" in str(error["message"])
    assert time.monotonic() - started < 5
    assert _closed(sock, 2)


def test_stalled_chunked_body_gets_408(edge: Gateway) -> None:
    sock = _connect(edge)
    sock.sendall(_post_head("/v1/chat/completions", None) + b"5\r\n{\"mod\r\n")
    started = time.monotonic()
    assert _read_response(sock)[0] == 408
    assert time.monotonic() - started < 5


def test_slow_but_moving_body_is_not_cut_off(edge: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    """body_timeout_s bounds the silence between reads, not the whole upload (~3 s here, at ~7 KB/s)."""
    fakes["primary"].queue(Reply(text="patient"))
    body = orjson.dumps({"model": "plain", "messages": [{"role": "user", "content": "y" * 20_000}]})
    sock = _connect(edge)
    sock.sendall(_post_head("/v1/chat/completions", len(body)))
    pieces = [body[i:i + 1000] for i in range(0, len(body), 1000)]
    for piece in pieces:
        time.sleep(3.0 / len(pieces))
        sock.sendall(piece)
    status, _, answer = _read_response(sock)
    assert status == 200, answer
    assert orjson.loads(answer)["choices"][0]["message"]["content"] == "patient"
    sock.close()


def test_body_dribbled_within_the_silence_timeout_gets_408(edge: Gateway) -> None:
    """A byte every 0.3 s never trips the 1 s silence timeout, but falls far below the 500 bytes/s floor."""
    sock = _connect(edge)
    sock.sendall(_post_head("/v1/chat/completions", 1000))
    started = time.monotonic()
    for _ in range(30):
        if select.select([sock], [], [], 0.3)[0]:
            break  # the gateway answered
        sock.sendall(b" ")
    status, _, body = _read_response(sock)
    assert status == 408 and "500 bytes/s" in str(_error(body)["message"])
    assert time.monotonic() - started < 5


def test_idle_keep_alive_connection_is_closed(edge: Gateway) -> None:
    sock = _connect(edge)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
    assert _read_response(sock)[0] == 200
    started = time.monotonic()
    assert _closed(sock, 5)
    assert time.monotonic() - started < 5


def test_a_keep_alive_connection_serves_requests_spaced_within_the_timeout(edge: Gateway) -> None:
    sock = _connect(edge)
    for _ in range(3):
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
        assert _read_response(sock)[0] == 200
        time.sleep(0.4)
    sock.close()


def test_slowloris_connections_do_not_starve_other_callers(edge: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    held = []
    for i in range(50):
        sock = _connect(edge)
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n" if i % 2 else
                     _post_head("/v1/chat/completions", 5000) + b'{"model"')
        held.append(sock)
    try:
        started = time.monotonic()
        assert httpx.get(f"{edge.url}/healthz", timeout=5).status_code == 200
        fakes["primary"].queue(Reply(text="still here"))
        completion = edge.client().chat.completions.create(model="plain",
                                                           messages=[{"role": "user", "content": "hi"}])
        assert completion.choices[0].message.content == "still here"
        assert time.monotonic() - started < 3
        # ...and every held connection is answered (408) and closed within a few timeouts.
        deadline = time.monotonic() + 6
        for sock in held:
            assert _closed(sock, max(0.1, deadline - time.monotonic()))
    finally:
        for sock in held:
            sock.close()


# Bodies: the size cap holds for chunked uploads too

def test_declared_body_over_the_limit_gets_413(edge: Gateway) -> None:
    sock = _connect(edge)
    sock.sendall(_post_head("/v1/chat/completions", 300_000))
    status, _, body = _read_response(sock)
    assert status == 413 and _error(body)["code"] == "request_too_large"
    sock.close()


def test_early_answer_then_a_stalled_body_closes_without_a_second_answer(edge: Gateway) -> None:
    sock = _connect(edge)
    sock.sendall(_post_head("/v1/chat/completions", 300_000) + b'{"model": "pla')
    assert _read_response(sock)[0] == 413
    sock.settimeout(5)
    rest = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            rest += chunk
    assert rest == b"", "a second response to one request"


def test_chunked_body_over_the_limit_gets_413(edge: Gateway) -> None:
    sock = _connect(edge)
    sock.sendall(_post_head("/v1/chat/completions", None))
    chunk = b"2800\r\n" + b"a" * 0x2800 + b"\r\n"  # 10 KiB chunks, 300 KiB in all

    def send() -> None:
        try:
            for _ in range(30):
                sock.sendall(chunk)
            sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the gateway may close once it has answered

    writer = threading.Thread(target=send)
    writer.start()
    status, _, body = _read_response(sock)
    writer.join(10)
    assert status == 413 and _error(body)["code"] == "request_too_large"
    sock.close()


# Duplicate headers

def _twice_authorized(method: str, path: str, body: bytes = b"") -> bytes:
    return (f"{method} {path} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {KEY}\r\n"
            f"Authorization: Bearer other-key\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/v1/chat/completions", CHAT),
    ("POST", "/chat/completions", CHAT),
    ("GET", "/v1/models", b""),
    ("GET", "/v1/continuations/cont_x", b""),
    ("DELETE", "/v1/continuations/cont_x", b""),
    ("POST", "/v1/continuations/cont_x", b'{"decisions": {}}'),
])
def test_two_authorization_headers_are_a_400(edge: Gateway, fakes: dict[str, FakeUpstream], method: str, path: str,
                                             body: bytes) -> None:
    sock = _connect(edge)
    sock.sendall(_twice_authorized(method, path, body))
    status, _, answer = _read_response(sock)
    assert status == 400, answer
    error = _error(answer)
    assert error["param"] is None and error["code"] == "duplicate_authorization"
    assert "more than one Authorization header" in str(error["message"])
    assert not fakes["primary"].requests
    sock.close()


def test_the_same_key_twice_is_still_a_400(edge: Gateway) -> None:
    response = httpx.post(f"{edge.url}/v1/chat/completions", content=CHAT,
                          headers=[("authorization", f"Bearer {KEY}"), ("authorization", f"Bearer {KEY}"),
                                   ("content-type", "application/json")], timeout=10)
    assert response.status_code == 400 and response.json()["error"]["code"] == "duplicate_authorization"


def test_other_repeated_headers_do_not_disturb_authentication(edge: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="fine"))
    response = httpx.post(f"{edge.url}/v1/chat/completions", content=CHAT,
                          headers=[("authorization", f"Bearer {KEY}"), ("x-tag", "a"), ("x-tag", "b"),
                                   ("content-type", "application/json")], timeout=10)
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("sizes", ["Content-Length: 2\r\nContent-Length: 2\r\n",
                                   "Content-Length: 2\r\nContent-Length: 3\r\n",
                                   "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n"])
def test_ambiguous_body_length_is_an_openai_shaped_400(edge: Gateway, sizes: str) -> None:
    sock = _connect(edge)
    sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {KEY}\r\n"
                 f"{sizes}\r\n{{}}".encode())
    status, headers, body = _read_response(sock)
    assert status == 400 and headers["content-type"] == "application/json"
    error = _error(body)
    assert error["code"] == "invalid_http_request" and "Content-Length" in str(error["message"])
    assert _closed(sock, 2)


# Configuration and workers

def test_limits_are_configurable_and_hold_in_every_worker(fakes: dict[str, FakeUpstream],
                                                          tool_server: ToolServer) -> None:
    gw = Gateway(_config(fakes, tool_server, "max_header_bytes: 4096, keepalive_timeout_s: 1")).start("--workers", "2")
    try:
        for _ in range(4):  # connections spread over both workers
            sock = _connect(gw)
            sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: gw\r\nX-Pad: {'a' * 5000}\r\n\r\n".encode())
            status, _, body = _read_response(sock)
            assert status == 431 and "4096" in str(_error(body)["message"])
            sock.close()
        sock = _connect(gw)
        sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: gw\r\nX-Pad: {'a' * 3000}\r\n\r\n".encode())
        assert _read_response(sock)[0] == 200
        assert _closed(sock, 5)
    finally:
        gw.stop()


def test_server_limits_config() -> None:
    base = "providers: {p: {type: openai, api_key: k}}\nmodels: {m: {targets: [{provider: p, model: x}]}}\n"
    defaults = parse_config(base).server
    assert (defaults.max_header_bytes, defaults.header_timeout_s, defaults.body_timeout_s,
            defaults.keepalive_timeout_s) == (65536, 10.0, 30.0, 5.0)
    tuned = parse_config("server: {max_header_bytes: 8192, header_timeout_s: 2.5, body_timeout_s: 60, "
                         "keepalive_timeout_s: 1}\n" + base).server
    assert (tuned.max_header_bytes, tuned.header_timeout_s, tuned.body_timeout_s, tuned.keepalive_timeout_s) == (
        8192, 2.5, 60.0, 1.0)
    for bad, path in [("max_header_bytes: 0", "server.max_header_bytes"), ("header_timeout_s: -1",
                      "server.header_timeout_s"), ("body_timeout_s: .inf", "server.body_timeout_s"),
                      ("keepalive_timeout_s: fast", "server.keepalive_timeout_s"),
                      ("header_timout_s: 3", "server.header_timout_s")]:
        with pytest.raises(ConfigError) as caught:
            parse_config(f"server: {{{bad}}}\n" + base)
        assert caught.value.path == path


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/embeddings"])
def test_a_refused_request_dribbling_its_body_is_closed_after_its_401(gateway: Gateway, path: str) -> None:
    """A bad key with a large declared body: the 401 comes before the body, says ``Connection: close`` and the
    connection closes, instead of staying open while the rest of the body dribbles in (the default
    ``server.body_timeout_s``, 30 s, and the 500 bytes/s floor would have allowed minutes)."""
    sock = _connect(gateway)
    head = _post_head(path, 150_000).replace(f"Bearer {KEY}".encode(), b"Bearer not-a-key")
    sock.sendall(head + b'{"model": "pl')
    for _ in range(25):  # a byte every 0.2 s until the answer is there
        if select.select([sock], [], [], 0.2)[0]:
            break
        sock.sendall(b" ")
    status, headers, body = _read_response(sock)
    assert status == 401 and headers["connection"] == "close"
    assert "error" in orjson.loads(body)  # in the surface's shape (OpenAI's, or Anthropic's for /v1/messages)
    with contextlib.suppress(OSError):  # the caller goes on dribbling; the server is gone
        sock.sendall(b" ")
    assert _closed(sock, 5), "the connection stayed open for the rest of a refused request's body"
    sock.close()


def test_a_body_sent_after_its_head_keeps_the_connection(gateway: Gateway) -> None:
    """The other side of closing early answers: a request whose body arrives after its head (apart, a moment
    later, as clients write them) is answered after the body, without ``Connection: close``, and the same
    connection serves the next request."""
    sock = _connect(gateway)
    body = orjson.dumps({"model": "plain", "messages": [{"role": "user", "content": "hi"}]})
    for _ in range(2):
        sock.sendall(_post_head("/v1/chat/completions", len(body)))
        time.sleep(0.05)  # the head is parsed on its own before the body comes (not a wait for a condition)
        sock.sendall(body)
        status, headers, _ = _read_response(sock)
        assert status == 200 and "connection" not in headers
    sock.close()
