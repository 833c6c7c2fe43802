"""The Codex harness works: the pinned CLI, driven by ``run_codex``, completes an ``exec_command`` turn.

Against the scripted fake Responses server, not the gateway, so that a failure here means the
harness (install, isolation, config keys, sandbox and approvals) is broken, not ``/v1/responses``.
It also checks what the isolation promises: with the proxy variables pointing at a listener of the
test's own, Codex tries to reach no host at all beyond the base URL; and that the recorded wire
contract (``tests/fixtures/codex``) is still what the pinned CLI sends (re-record after a bump:
``python -m tests.e2e.record_codex``).
"""

from __future__ import annotations

import json
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.codex import ROOT, run_codex
from tests.e2e.record_codex import DONE, PROMPT, exec_then_done
from tests.fakes.responses_scripted import ScriptedResponses, has_call_output

FIXTURE = ROOT / "tests" / "fixtures" / "codex" / "session.json"


class Listener:
    """A TCP listener recording the first line of every connection (a proxy's ``CONNECT host:443``)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                outer.lines.append(self.rfile.readline(4096).decode(errors="replace").strip())

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def scripted() -> Iterator[ScriptedResponses]:
    fake = ScriptedResponses(exec_then_done).start()
    yield fake
    fake.stop()


def tool_shapes(body: dict[str, object]) -> list[tuple[object, object]]:
    return sorted((tool.get("type"), tool.get("name")) for tool in body["tools"])  # type: ignore[union-attr, attr-defined]


def test_codex_runs_exec_command_and_finishes_against_the_scripted_fake(scripted: ScriptedResponses,
                                                                         tmp_path: Path) -> None:
    proxy = Listener()
    try:
        proxies = {name: proxy.url for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy",
                                                "https_proxy", "all_proxy")}
        run = run_codex(f"{scripted.url}/v1", PROMPT, api_key="sk-codex-harness", cwd=tmp_path, model="fake-model",
                        extra_env=proxies, timeout=60)
    finally:
        proxy.stop()
    assert run.returncode == 0 and run.final_text == DONE, run.explain()
    assert proxy.lines == [], "Codex tried to reach the internet"
    calls = scripted.posts()
    assert len(calls) == 2, [f"{seen.method} {seen.path}" for seen in scripted.requests]
    assert has_call_output(calls[1].body, "loopgate-ok"), "the command really ran in the isolated CLI"
    assert calls[0].headers["authorization"] == "Bearer <redacted>"
    recorded = json.loads(FIXTURE.read_text())["requests"]
    assert tool_shapes(calls[0].body) == tool_shapes(recorded[0]["body"]), "re-record tests/fixtures/codex"
    assert sorted(calls[0].body) == sorted(recorded[0]["body"])
