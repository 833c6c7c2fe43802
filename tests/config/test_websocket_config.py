"""The ``websocket`` config section: defaults, bounds (hostile values refused), errors naming the bad key, and
what it makes of uvicorn's settings."""

from __future__ import annotations

import pytest

from gateway.cli import _uvicorn_settings
from gateway.config import ConfigError
from gateway.config.model import WebSocketConfig
from gateway.config.validate import build_config


def test_defaults_when_absent() -> None:
    config = build_config({}).websocket
    assert config == WebSocketConfig()
    assert config.enabled and config.max_message_bytes == 4 * 1024 * 1024 and config.max_connection_s == 3600


def test_values_are_read() -> None:
    section = {"enabled": True, "max_message_bytes": 65536, "max_messages": 12, "max_queued_turns": 0,
               "idle_timeout_s": 0.5, "max_connection_s": 2, "max_connections": 3, "max_connections_per_key": 1,
               "kept_responses": 2, "kept_bytes": 1000, "ping_interval_s": 0, "ping_timeout_s": 5,
               "compression": True}
    assert build_config({"websocket": section}).websocket == WebSocketConfig(
        True, 65536, 12, 0, 0.5, 2.0, 3, 1, 2, 1000, 0.0, 5.0, True)


@pytest.mark.parametrize(("section", "path"), [
    ({"max_message_bytes": 10}, "websocket.max_message_bytes"),
    ({"max_message_bytes": 2**40}, "websocket.max_message_bytes"),
    ({"max_messages": 0}, "websocket.max_messages"),
    ({"idle_timeout_s": 0}, "websocket.idle_timeout_s"),
    ({"idle_timeout_s": float("inf")}, "websocket.idle_timeout_s"),
    ({"idle_timeout_s": float("nan")}, "websocket.idle_timeout_s"),
    ({"max_connection_s": -1}, "websocket.max_connection_s"),
    ({"max_connections": -1}, "websocket.max_connections"),
    ({"kept_bytes": 2**31}, "websocket.kept_bytes"),
    ({"enabled": "yes"}, "websocket.enabled"),
    ({"max_queued_turns": "many"}, "websocket.max_queued_turns"),
    ({"max_turns": 4}, "websocket.max_turns"),
])
def test_bad_values_name_the_key(section: dict[str, object], path: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_config({"websocket": section})
    assert info.value.path == path


def test_uvicorn_runs_the_websocket_protocol_with_the_bounds_or_none_when_off() -> None:
    on = _uvicorn_settings(build_config({"websocket": {"max_message_bytes": 8192, "ping_interval_s": 0}}),
                           "127.0.0.1", 1, "info")
    assert (on["ws"], on["ws_max_size"], on["ws_ping_interval"], on["ws_per_message_deflate"]) == (
        "gateway.http.websocket_server:WebSocketServerProtocol", 8192, None, False)
    assert _uvicorn_settings(build_config({"websocket": {"enabled": False}}), "127.0.0.1", 1, "info")["ws"] == "none"
