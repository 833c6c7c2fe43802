"""The WebSocket mode's governance and bounds end to end: the key, limits and budgets of ``POST /v1/responses``
checked at the upgrade and per turn, the slot of a turn whose client left given back at once, the connection caps,
and every bound a client controls, tested with hostile values (small configured bounds, waits on conditions)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from websockets.sync.client import connect

from tests.e2e.conftest import KEY, Gateway, gateway_config, with_keys
from tests.e2e.websocket_client import (
    closed_with,
    events_until_end,
    final,
    next_error,
    next_event,
    open_socket,
    refused_status,
    send,
    send_frame_head,
    turn,
)
from tests.fakes.tool_server import ToolServer
from tests.fakes.upstream import FakeUpstream, Reply

ADMIN = "ws-admin"
RPM_KEY, ONE_SLOT_KEY, BUDGET_KEY, APPROVER_KEY, CAPPED_KEY = "ws-rpm", "ws-one", "ws-budget", "ws-approver", "ws-cap"
KEYS = (f"{{key: {RPM_KEY}, tenant: ws-rpm, rpm: 2}}", f"{{key: {ONE_SLOT_KEY}, tenant: ws-one, max_concurrent: 1}}",
        f"{{key: {BUDGET_KEY}, tenant: ws-budget, budget: {{limit: 1000, unit: tokens, period: day}}}}",
        f"{{key: {APPROVER_KEY}, tenant: team-a, role: approver}}", f"{{key: {CAPPED_KEY}, tenant: ws-cap}}")
BOUNDS = "websocket: {max_connections_per_key: 2, max_message_bytes: 4096, max_messages: 12}\n"


@pytest.fixture(scope="module")
def limited(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> Iterator[Gateway]:
    config = with_keys(gateway_config(fakes, tool_server=tool_server.url), *KEYS, admin=ADMIN) + BOUNDS
    gateway = Gateway(config).start()
    yield gateway
    gateway.stop()


@pytest.fixture
def released() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # never leave a fake waiting on a test that failed


def metric(gateway: Gateway, line: str) -> float:
    """The value of a metric's series (``name{labels}``), or the sum of every series of ``name``."""
    total = 0.0
    for row in httpx.get(f"{gateway.url}/metrics", timeout=10).text.splitlines():
        if row.startswith(line + " ") or ("{" not in line and row.startswith(line + "{")):
            total += float(row.rsplit(" ", 1)[1])
    return total


def test_the_upgrade_checks_the_key_before_accepting(limited: Gateway) -> None:
    status, body = refused_status(limited, None)
    assert status == 401 and body["error"]["type"] == "invalid_request_error"
    assert refused_status(limited, "not-a-key")[0] == 401
    status, body = refused_status(limited, APPROVER_KEY)
    assert status == 403 and body["error"]["code"] == "approver_key"


def test_a_key_revoked_mid_connection_is_refused_on_its_next_turn(limited: Gateway,
                                                                   fakes: dict[str, FakeUpstream]) -> None:
    admin = {"authorization": f"Bearer {ADMIN}"}
    created = httpx.post(f"{limited.url}/admin/keys", json={"tenant": "ws-managed"}, headers=admin, timeout=10).json()
    fakes["primary"].queue(Reply(text="Before."))
    with open_socket(limited, created["key"]) as socket:
        assert final(turn(socket, model="plain", input="Hi"))["output"][0]["content"][0]["text"] == "Before."
        revoked = httpx.delete(f"{limited.url}/admin/keys/{created['id']}", headers=admin, timeout=10)
        assert revoked.status_code == 200
        refused = turn(socket, model="plain", input="Hi again")[-1]
        assert refused["type"] == "error" and refused["status"] == 401
        assert closed_with(socket) == (1008, "the key was refused")
    assert len(fakes["primary"].requests) == 1


def test_rate_limits_apply_per_turn_and_the_socket_stays_usable(limited: Gateway) -> None:
    with open_socket(limited, RPM_KEY) as socket:
        final(turn(socket, model="plain", input="1"))
        final(turn(socket, model="plain", input="2"))
        refused = turn(socket, model="plain", input="3")[-1]
        assert refused["type"] == "error" and refused["status"] == 429
        assert refused["error"]["code"] == "rate_limit_exceeded"
        assert int(refused["headers"]["retry-after"]) >= 1
        assert refused["error"]["headers"]["x-ratelimit-limit-requests"] == "2"
        socket.send("not json")  # still open, still answering
        assert next_event(socket)["error"]["code"] == "invalid_json"


def test_a_budget_spent_mid_connection_refuses_the_next_turn_and_upgrade(limited: Gateway,
                                                                         fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="Expensive.", usage=(1190, 10)))
    with open_socket(limited, BUDGET_KEY) as socket:
        assert final(turn(socket, model="plain", input="Spend."))["usage"]["total_tokens"] == 1200
        refused = turn(socket, model="plain", input="More.")[-1]
        assert refused["status"] == 429 and refused["error"]["code"] == "insufficient_quota"
    status, body = refused_status(limited, BUDGET_KEY)
    assert status == 429 and body["error"]["code"] == "insufficient_quota"
    assert len(fakes["primary"].requests) == 1  # refused before any upstream call


def test_connections_per_key_are_capped(limited: Gateway) -> None:
    first, second = open_socket(limited, CAPPED_KEY), open_socket(limited, CAPPED_KEY)
    status, body = refused_status(limited, CAPPED_KEY)
    assert status == 429 and body["error"]["code"] == "too_many_connections"
    open_socket(limited, KEY).close()  # other keys are not affected
    first.close()
    second.close()
    deadline = time.monotonic() + 10
    while metric(limited, "loopgate_websocket_connections") and time.monotonic() < deadline:
        time.sleep(0.02)
    open_socket(limited, CAPPED_KEY).close()


def _slot_is_free(gateway: Gateway) -> bool:
    """Whether the one-slot key can start a request now (a 429 while its slot is still held)."""
    answer = gateway.post("/v1/responses", {"model": "plain", "input": "Is the slot free?"}, key=ONE_SLOT_KEY)
    assert answer.status_code in (200, 429), answer.text
    return answer.status_code == 200


def _until_slot_free(gateway: Gateway) -> None:
    deadline = time.monotonic() + 10
    while not _slot_is_free(gateway):
        assert time.monotonic() < deadline, "the dropped turn still holds its concurrency slot"
        time.sleep(0.05)


def test_a_client_leaving_before_the_answer_gives_the_turns_slot_back(limited: Gateway, fakes: dict[str, FakeUpstream],
                                                                      released: threading.Event) -> None:
    fakes["primary"].queue(Reply(text="Too late.", hold=released))
    closes = metric(limited, 'loopgate_websocket_closes_total{reason="client"}')
    socket = open_socket(limited, ONE_SLOT_KEY)
    send(socket, model="plain", input="Take your time.")
    deadline = time.monotonic() + 10
    while not fakes["primary"].requests:  # the turn holds its slot and waits on the model
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert not _slot_is_free(limited)
    errors = metric(limited, "loopgate_upstream_errors_total")
    socket.close()
    _until_slot_free(limited)  # given back while the model still has not answered
    assert not released.is_set()
    # the turn was cancelled: its upstream call did not run into its timeout (1.5 s here) to end it
    assert metric(limited, "loopgate_upstream_errors_total") == errors
    deadline = time.monotonic() + 10
    while metric(limited, 'loopgate_websocket_closes_total{reason="client"}') <= closes:
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_a_client_leaving_mid_stream_gives_the_turns_slot_back(limited: Gateway,
                                                               fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="The first words and then nothing.", pieces=4, fault="stall"))
    socket = open_socket(limited, ONE_SLOT_KEY)
    send(socket, model="plain", input="Start talking.")
    while next_event(socket)["type"] != "response.output_text.delta":
        pass
    errors = metric(limited, "loopgate_upstream_errors_total")
    socket.close()
    _until_slot_free(limited)
    assert metric(limited, "loopgate_upstream_errors_total") == errors  # ended by the drop, not by the stall


@pytest.mark.parametrize(("message", "code"), [
    ("not json", "invalid_json"),
    ("[" * 300 + "]" * 300, "invalid_json"),  # nested past the parser's bound
    ('{"type": "response.cancel"}', "unknown_message_type"),
    ('{"model": "plain"}', "invalid_message"),
    ('"a string"', "invalid_message"),
    (b"\x00\x01 binary", "binary_message"),
], ids=["garbage", "deep", "unknown-type", "no-type", "not-an-object", "binary"])
def test_hostile_messages_get_an_error_event_and_the_socket_stays_usable(limited: Gateway,
                                                                         fakes: dict[str, FakeUpstream],
                                                                         message: str | bytes, code: str) -> None:
    fakes["primary"].queue(Reply(text="Still fine."))
    with open_socket(limited) as socket:
        socket.send(message)
        event = next_event(socket)
        assert event["type"] == "error" and event["status"] == 400 and event["error"]["code"] == code
        socket.send(orjson.dumps({"type": "response.processed", "response_id": "resp_x"}).decode())  # no answer
        assert final(turn(socket, model="plain", input="Still there?"))["output"][0]["content"][0]["text"] == (
            "Still fine.")


def test_a_message_past_the_size_bound_is_refused_from_its_header(limited: Gateway) -> None:
    with open_socket(limited) as socket:
        send(socket, model="plain", input="x" * 5000)
        assert closed_with(socket)[0] == 1009
    with open_socket(limited) as socket:
        started = time.monotonic()
        send_frame_head(socket, 100 * 1024 * 1024)  # 100 MB announced, none of it sent: refused at once
        assert closed_with(socket)[0] == 1009
        assert time.monotonic() - started < 5


def test_the_messages_of_a_connection_are_bounded(limited: Gateway) -> None:
    with open_socket(limited) as socket:
        for _ in range(12):
            socket.send("{}")
            assert next_event(socket)["error"]["code"] == "invalid_message"
        socket.send("{}")
        limit = next_event(socket)
        assert limit["type"] == "error" and limit["error"]["code"] == "websocket_connection_limit_reached"
        assert "websocket.max_messages" in limit["error"]["message"]
        assert closed_with(socket) == (1000, "connection limit reached")


def _tight(fakes: dict[str, FakeUpstream], tool_server: ToolServer, bounds: str) -> Gateway:
    return Gateway(gateway_config(fakes, tool_server=tool_server.url) + f"websocket: {{{bounds}}}\n").start()


def test_an_idle_connection_is_closed(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> None:
    gateway = _tight(fakes, tool_server, "idle_timeout_s: 0.5")
    try:
        with open_socket(gateway) as socket:
            final(turn(socket, model="plain", input="Once."))
            started = time.monotonic()
            assert closed_with(socket) == (1000, "idle timeout (websocket.idle_timeout_s)")
            assert time.monotonic() - started >= 0.4
    finally:
        gateway.stop()


def test_a_connection_ends_at_its_lifetime(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> None:
    gateway = _tight(fakes, tool_server, "max_connection_s: 1")
    try:
        with open_socket(gateway) as socket:
            events: list[dict[str, Any]] = []
            while not events or events[-1]["type"] != "error":  # busy, never idle: turns until the limit
                events = turn(socket, model="plain", input="Again.")
            assert events[-1]["error"]["code"] == "websocket_connection_limit_reached"
            assert "websocket.max_connection_s" in events[-1]["error"]["message"]
            assert closed_with(socket) == (1000, "connection limit reached")
        assert 'loopgate_websocket_closes_total{reason="lifetime"} 1' in httpx.get(
            f"{gateway.url}/metrics", timeout=10).text
    finally:
        gateway.stop()


def test_messages_are_answered_while_a_turn_runs(limited: Gateway, fakes: dict[str, FakeUpstream],
                                                 released: threading.Event) -> None:
    """The socket is read while a turn answers: a refused message is answered at once, not after the turn."""
    fakes["primary"].queue(Reply(tool_calls=[("add", {"a": 1, "b": 2})]), Reply(text="Done.", hold=released))
    with open_socket(limited) as socket:
        send(socket, model="agent", input="Add, then think.")
        while next_event(socket)["type"] != "response.mcp_call.completed":  # its second model call is held
            pass
        socket.send("garbage")
        assert next_error(socket)["error"]["code"] == "invalid_json"
        released.set()
        assert final(events_until_end(socket))["output"][-1]["content"][0]["text"] == "Done."


def test_compression_is_negotiated_when_offered_and_the_events_read_the_same(fakes: dict[str, FakeUpstream],
                                                                           tool_server: ToolServer) -> None:
    """``websocket.compression: true``: a client offering permessage-deflate gets it (its handshake and every
    event through the library), one that does not gets the gateway's own handshake and frames; the same events."""
    gateway = _tight(fakes, tool_server, "compression: true")
    try:
        seen = []
        for offer in ("deflate", None):
            with connect(f"ws://127.0.0.1:{gateway.port}/v1/responses", additional_headers={
                    "authorization": f"Bearer {KEY}"}, compression=offer, open_timeout=10) as socket:
                negotiated = [extension.name for extension in socket.protocol.extensions]
                events = turn(socket, model="plain", input="Hello.")
            seen.append(([event["type"] for event in events], negotiated))
        assert seen[0][1] == ["permessage-deflate"]
        assert seen[1][1] == []
        assert seen[0][0] == seen[1][0]
        assert seen[0][0][-1] == "response.completed"
    finally:
        gateway.stop()
