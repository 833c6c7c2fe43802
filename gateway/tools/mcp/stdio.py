"""MCP over stdio: a subprocess speaking newline-delimited JSON-RPC, one process per session.

The session is the SDK's; the transport under it is this module's, because the SDK's
``stdio_client`` buffers a line without bound, writes the server's stderr to a file and hides the
process. Here a line longer than :data:`STDIO_LINE_LIMIT` ends the session (the stream cannot be
resynchronised), stderr lines go to the log, and the source knows its process: its pid, whether it
is running, and its exit code for the reason a call in flight reads. The process gets configured
``env`` on top of only the variables a process needs (``SAFE_ENV``; ``env_inherit: all``: the
whole environment): a third-party server never sees the gateway's provider keys or store password.
Shutdown follows the spec: close stdin, then terminate, then kill, each
after a grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from types import TracebackType
from typing import Any

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from gateway.config.approval_section import ApprovalMode
from gateway.config.mcp_section import DEFAULT_SAMPLING_MAX_TOKENS, ElicitationPolicy
from gateway.tools.base import DEFAULT_TOOL_TIMEOUTS, ToolFailure, ToolTimeouts
from gateway.tools.mcp.connection import McpSource, Transport, connection_closed
from gateway.tools.mcp.protocol import CLOSE_GRACE_S

log = logging.getLogger("loopgate.tools.mcp")

#: one JSON-RPC message per line; tool results can be large
STDIO_LINE_LIMIT = 64 * 1024 * 1024


#: what a stdio server inherits by default: what a process needs to find programs, a home, a
#: locale, temporary files and an egress proxy; nothing the gateway keeps secret
SAFE_ENV = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE",
                      "TZ", "TMPDIR", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
                      "no_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS"})


def server_environment(configured: dict[str, str], inherit_all: bool = False) -> dict[str, str]:
    """A stdio server's environment: ``SAFE_ENV`` of the gateway's (or all of it), then its configured ``env``."""
    inherited = dict(os.environ) if inherit_all else {k: v for k, v in os.environ.items() if k in SAFE_ENV}
    return {**inherited, **configured}


class _ProcessTransport:
    """One server process as the SDK's transport: an async context giving (read, write) streams."""

    def __init__(self, source: McpStdioSource, on_closed: Callable[[], None]) -> None:
        self._source = source
        self._on_closed = on_closed
        self.proc: asyncio.subprocess.Process | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._read_send: MemoryObjectSendStream[SessionMessage | Exception] | None = None
        self._write_recv: MemoryObjectReceiveStream[SessionMessage] | None = None

    async def __aenter__(self) -> tuple[Any, Any]:
        source = self._source
        self.proc = await asyncio.create_subprocess_exec(
            *source.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=source.env, limit=STDIO_LINE_LIMIT, start_new_session=True)
        source.process = self.proc
        read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)
        self._read_send, self._write_recv = read_send, write_recv
        name = source.name
        self._tasks = [asyncio.create_task(self._read(), name=f"mcp-stdout-{name}"),
                       asyncio.create_task(self._write(), name=f"mcp-stdin-{name}"),
                       asyncio.create_task(self._log_stderr(), name=f"mcp-stderr-{name}")]
        log.info("MCP server %s started (pid %d)", name, self.proc.pid)
        return read_recv, write_send

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None and self._read_send is not None
        stdout, send = self.proc.stdout, self._read_send
        try:
            async with send:
                while True:
                    try:
                        line = await stdout.readline()
                    except ValueError:  # a line beyond the limit: the stream cannot be resynchronised
                        log.error("MCP server %s wrote a message longer than %d bytes", self._source.name,
                                  STDIO_LINE_LIMIT)
                        break
                    if not line:
                        break
                    if not line.strip():
                        continue
                    try:
                        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    except ValueError:
                        log.warning("MCP server %s wrote a line that is not JSON-RPC: %.200r", self._source.name, line)
                        continue
                    await send.send(SessionMessage(message))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError):
            pass
        finally:
            self._on_closed()

    async def _write(self) -> None:
        assert self.proc is not None and self.proc.stdin is not None and self._write_recv is not None
        stdin = self.proc.stdin
        try:
            async with self._write_recv:
                async for item in self._write_recv:
                    stdin.write(item.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n")
                    await stdin.drain()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError, OSError):
            self._on_closed()  # the process is gone or going: the session ends, calls fail with its exit

    async def _log_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        stderr = self.proc.stderr
        with contextlib.suppress(ConnectionError, ValueError):
            while line := await stderr.readline():
                log.info("MCP server %s stderr: %s", self._source.name, line.decode("utf-8", "replace").rstrip())

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        proc = self.proc
        if proc is not None:
            with anyio.CancelScope(shield=True):
                await _stop(proc)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """Close stdin, then terminate, then kill, each after a grace period (the spec's order)."""
    if proc.stdin is not None and not proc.stdin.is_closing():
        proc.stdin.close()
    for step in (None, proc.terminate, proc.kill):
        if proc.returncode is not None:
            break
        if step is not None:
            with contextlib.suppress(ProcessLookupError):
                step()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), CLOSE_GRACE_S)


class McpStdioSource(McpSource):
    """One MCP server run as a subprocess (stdio transport), behind the ToolSource interface.

    The process is started on first use and, if it died, restarted on the next use (once per use:
    a server that dies at once fails that call instead of looping).
    """

    def __init__(self, name: str, command: list[str], env: dict[str, str] | None = None, env_inherit: str = "safe",
                 timeouts: ToolTimeouts = DEFAULT_TOOL_TIMEOUTS, approval: ApprovalMode = "never",
                 elicitation: ElicitationPolicy = "pause", sampling_route: str | None = None,
                 sampling_max_tokens: int = DEFAULT_SAMPLING_MAX_TOKENS) -> None:
        if not command:
            raise ValueError(f"MCP server {name}: command is empty")
        super().__init__(name, timeouts, approval, elicitation, sampling_route, sampling_max_tokens)
        self.command = list(command)
        self.env = server_environment(env or {}, inherit_all=env_inherit == "all")
        self.process: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int | None:
        """The server process's pid while one is running (for operators and tests)."""
        return self.process.pid if self.running and self.process is not None else None

    @property
    def running(self) -> bool:
        session = self._session
        return (self.process is not None and self.process.returncode is None
                and session is not None and not session.stop.is_set())

    def _open_transport(self, on_closed: Callable[[], None]) -> Transport:
        return _ProcessTransport(self, on_closed)

    def _transport_failure(self, exc: BaseException) -> ToolFailure | None:
        if (isinstance(exc, OSError) and self.process is None) or isinstance(exc, FileNotFoundError | PermissionError):
            log.error("MCP server %s: cannot start %r: %s", self.name, self.command, exc)
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
            return ToolFailure(f"Could not start MCP server {self.name} ({reason})")
        process = self.process
        if connection_closed(exc) and process is not None and process.returncode is not None:
            return ToolFailure(f"MCP server {self.name} exited (code {process.returncode})")
        if connection_closed(exc) and process is not None:
            return ToolFailure(f"MCP server {self.name} exited")
        return None
