"""A webhook URL (a Slack URL is its own credential) never reaches a log line, even quoted back by a proxy."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import Gateway
from tests.e2e.test_webhooks import SECRET, config, hook, pause

HOOK_PATH = "/services/T000/B000/SlackSecretPath123"
HOOK_URL = "http://hooks.slack.example" + HOOK_PATH


class EchoingProxy:
    """A forward proxy that refuses everything, quoting the request line in its error page (as squid does)."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self.refused = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            with conn:
                line = conn.recv(65536).split(b"\r\n", 1)[0]
                body = b"Access denied by policy: " + line
                conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                self.refused += 1

    def close(self) -> None:
        self._server.close()


@pytest.fixture
def proxy() -> Iterator[EchoingProxy]:
    server = EchoingProxy()
    yield server
    server.close()


def test_a_refusing_proxys_error_text_is_logged_without_the_webhook_url(proxy: EchoingProxy) -> None:
    gw = Gateway(config(hook(HOOK_URL)), env={"HTTP_PROXY": proxy.url, "http_proxy": proxy.url, "NO_PROXY": "",
                                               "no_proxy": ""})
    gw.start()
    try:
        pause(gw)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and "attempt 2 failed" not in gw.logs():
            time.sleep(0.05)
    finally:
        gw.stop()
    logs = gw.logs()
    assert proxy.refused >= 2 and "HTTP 403" in logs and "Access denied by policy" in logs, logs
    assert "SlackSecretPath123" not in logs and SECRET not in logs
    assert "[redacted]" in logs
