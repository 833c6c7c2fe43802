"""The reference MCP server of the protocol's authors, ``@modelcontextprotocol/server-everything``
(pinned in tests/clients/package.json), run over stdio or Streamable HTTP for tests.

Not a fake: the real server, so the client is tested against what MCP's authors ship. Skipped
locally when ``npm ci --prefix tests/clients`` has not been run, a failure under ``CI=true``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.ports import free_port

CLIENTS = Path(__file__).resolve().parents[1] / "clients"
ENTRY = CLIENTS / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
INSTALL = "npm ci --prefix tests/clients"


def everything_command(transport: str = "stdio") -> list[str]:
    """``node .../index.js <transport>``; skipped (locally) or failed (CI) when it is not installed."""
    node = shutil.which("node")
    message = ""
    if node is None:
        message = "node is not on PATH: the reference MCP server needs it"
    elif not ENTRY.exists():
        message = f"the reference MCP server is not installed ({ENTRY}): run `{INSTALL}`"
    if message:
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    assert node is not None
    return [node, str(ENTRY), transport]


class EverythingHttp:
    """The server on Streamable HTTP at ``url`` (a process of its own); ``stop()`` ends it."""

    def __init__(self) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}/mcp"
        self.process = subprocess.Popen(everything_command("streamableHttp"), env={**os.environ, "PORT": str(port)},
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("the reference MCP server did not start listening") from None
                time.sleep(0.05)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
