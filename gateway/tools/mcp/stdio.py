"""MCP over stdio: a subprocess speaking newline-delimited JSON-RPC on stdin/stdout. One reader
task routes responses to per-id futures, so concurrent calls share the process; a process that
died is restarted on the next use.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
from typing import Any

import orjson

from gateway.config.approval_section import ApprovalMode
from gateway.tools.base import DEFAULT_TOOL_TIMEOUTS, ToolFailure, ToolSpec, ToolTimeouts
from gateway.tools.mcp.protocol import (
    CLOSE_GRACE_S,
    STDIO_LINE_LIMIT,
    call_params,
    initialize_params,
    list_all,
    parse_messages,
    render_call_result,
    result_of,
    rpc_notification,
    rpc_request,
)

log = logging.getLogger("loopgate.tools.mcp")


class _Process:
    """One running server process: its pipes, reader tasks and in-flight requests.

    Kept separate from the source so a restart swaps in a whole new object and a late
    response or EOF from the old process can never resolve a request sent to the new one.
    """

    def __init__(self, source: str, proc: asyncio.subprocess.Process) -> None:
        self.source = source
        self.proc = proc
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.write_lock = asyncio.Lock()
        self.eof = False
        self.reader = asyncio.create_task(self._read(), name=f"mcp-stdout-{source}")
        self.stderr = asyncio.create_task(self._log_stderr(), name=f"mcp-stderr-{source}")

    @property
    def alive(self) -> bool:
        return not self.eof and self.proc.returncode is None

    async def send(self, message: dict[str, Any]) -> None:
        stdin = self.proc.stdin
        if stdin is None or stdin.is_closing() or not self.alive:
            raise ToolFailure(f"MCP server {self.source} is not running")
        try:
            async with self.write_lock:  # one message per line: writes must not interleave
                stdin.write(orjson.dumps(message) + b"\n")
                await stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise ToolFailure(f"MCP server {self.source} is not running ({type(exc).__name__})") from None

    async def _read(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        try:
            while True:
                try:
                    line = await stdout.readline()
                except ValueError:  # a line beyond the limit: the stream cannot be resynchronised
                    log.error("MCP server %s wrote a message longer than %d bytes", self.source, STDIO_LINE_LIMIT)
                    break
                if not line:
                    break
                if line.strip():
                    await self._dispatch(line)
        except (ConnectionResetError, BrokenPipeError):
            pass
        finally:
            self.eof = True
            code = self.proc.returncode
            failure = ToolFailure(f"MCP server {self.source} exited" + (f" (code {code})" if code is not None else ""))
            for future in self.pending.values():
                if not future.done():
                    future.set_exception(failure)
            self.pending.clear()

    async def _dispatch(self, line: bytes) -> None:
        messages = parse_messages(line)
        if not messages:
            log.warning("MCP server %s wrote a non-JSON line: %.200r", self.source, line)
        for message in messages:
            if not isinstance(message, dict):
                continue
            if "method" in message:
                if "id" in message:  # a request from the server: we offer only ping
                    await self._answer(message)
                continue  # notifications (logging, list_changed, progress) are not needed here
            rpc_id = message.get("id")
            future = self.pending.get(rpc_id) if isinstance(rpc_id, int) else None
            if future is not None and not future.done():
                future.set_result(message)

    async def _answer(self, request: dict[str, Any]) -> None:
        if request.get("method") == "ping":
            reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request["id"], "result": {}}
        else:
            reply = {"jsonrpc": "2.0", "id": request["id"],
                     "error": {"code": -32601, "message": f"Method not found: {request.get('method')}"}}
        with contextlib.suppress(ToolFailure):
            await self.send(reply)

    async def _log_stderr(self) -> None:
        stderr = self.proc.stderr
        assert stderr is not None
        with contextlib.suppress(ConnectionResetError, ValueError):
            while line := await stderr.readline():
                log.info("MCP server %s stderr: %s", self.source, line.decode("utf-8", "replace").rstrip())

    async def close(self) -> None:
        """Close stdin, then terminate, then kill, each after a grace period (the spec's order)."""
        proc = self.proc
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
        for task in (self.reader, self.stderr):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class McpStdioSource:
    """One MCP server run as a subprocess (stdio transport), behind the ToolSource interface.

    The process is started on first use and, if it died, restarted on the next use (once per
    use: a server that dies immediately fails that call instead of looping). A call in flight
    when the process dies fails; it is not retried, because the tool may already have acted.
    """

    def __init__(self, name: str, command: list[str], env: dict[str, str] | None = None,
                 timeouts: ToolTimeouts = DEFAULT_TOOL_TIMEOUTS, approval: ApprovalMode = "never") -> None:
        if not command:
            raise ValueError(f"MCP server {name}: command is empty")
        self._name = name
        self._command = list(command)
        # Configured variables extend the gateway's environment (PATH etc.) rather than replace it.
        self._env = {**os.environ, **env} if env else None
        self._timeouts = timeouts
        self._timeout_s = timeouts.call
        self._approval: ApprovalMode = approval
        self._ids = itertools.count(1)
        self._start_lock = asyncio.Lock()
        self._process: _Process | None = None
        self._closed = False
        self._background: set[asyncio.Task[None]] = set()

    @property
    def name(self) -> str:
        return self._name

    @property
    def pid(self) -> int | None:
        """The server process's pid while one is running (for operators and tests)."""
        return self._process.proc.pid if self._process is not None and self._process.alive else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.alive

    async def list_tools(self) -> list[ToolSpec]:
        try:
            async with asyncio.timeout(self._timeout_s):
                process = await self._ensure_started()
                return await list_all(self._name, lambda m, p: self._request(process, m, p),
                                       self._approval, self._timeouts)
        except TimeoutError:
            raise ToolFailure(f"MCP server {self._name} did not list its tools within {self._timeout_s:g}s") from None

    async def call(self, tool: str, arguments: dict[str, Any]) -> str:
        process = await self._ensure_started()
        result = await self._request(process, "tools/call", call_params(tool, arguments))
        return render_call_result(tool, result)

    async def aclose(self) -> None:
        self._closed = True
        async with self._start_lock:
            process, self._process = self._process, None
            if process is not None:
                await process.close()
        for task in list(self._background):
            task.cancel()

    # -- internals -------------------------------------------------------------------------

    async def _ensure_started(self) -> _Process:
        process = self._process
        if process is not None and process.alive:
            return process
        async with self._start_lock:
            if self._closed:
                raise ToolFailure(f"MCP server {self._name} is closed")
            process = self._process
            if process is not None and process.alive:
                return process
            if process is not None:
                log.warning("MCP server %s exited (code %s); restarting", self._name, process.proc.returncode)
                self._process = None
                await process.close()
            process = await self._spawn()
            try:
                async with asyncio.timeout(self._timeout_s):
                    result = await self._request(process, "initialize", initialize_params())
                    await process.send(rpc_notification("notifications/initialized"))
            except BaseException as exc:
                await process.close()
                if isinstance(exc, TimeoutError):
                    raise ToolFailure(f"MCP server {self._name} did not initialize within "
                                      f"{self._timeout_s:g}s") from None
                raise
            log.info("MCP server %s started (pid %d, protocol %s)", self._name, process.proc.pid,
                     result.get("protocolVersion"))
            self._process = process
            return process

    async def _spawn(self) -> _Process:
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=self._env, limit=STDIO_LINE_LIMIT)
        except OSError as exc:
            log.error("MCP server %s: cannot start %r: %s", self._name, self._command, exc)
            raise ToolFailure(f"Could not start MCP server {self._name} ({exc.strerror or type(exc).__name__})") \
                from None
        return _Process(self._name, proc)

    async def _request(self, process: _Process, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        rpc_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        process.pending[rpc_id] = future
        try:
            await process.send(rpc_request(rpc_id, method, params))
            message = await future
        except asyncio.CancelledError:
            # The executor gave up (timeout) or the request went away: tell the server to stop.
            if process.alive and method != "initialize":
                self._spawn_background(process.send(rpc_notification(
                    "notifications/cancelled", {"requestId": rpc_id, "reason": "cancelled by the client"})))
            raise
        finally:
            process.pending.pop(rpc_id, None)
        return result_of(self._name, method, message)

    def _spawn_background(self, coro: Any) -> None:
        async def quietly() -> None:
            with contextlib.suppress(ToolFailure):
                await coro

        task = asyncio.get_running_loop().create_task(quietly())
        self._background.add(task)
        task.add_done_callback(self._background.discard)
