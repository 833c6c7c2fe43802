"""Tools served by MCP servers (Model Context Protocol, revision 2025-06-18), as two more sources.

Both transports speak the same JSON-RPC 2.0 methods: ``initialize`` + ``notifications/initialized``
(done lazily, on first use, so a server that is down at start-up only costs a failed listing),
``tools/list`` (following ``nextCursor`` pages) and ``tools/call``. Only the transport differs:

* :class:`McpHttpSource` - "Streamable HTTP": every message is a POST; the answer is either one
  JSON body or an SSE stream that carries the response among notifications. The server's
  ``Mcp-Session-Id`` is echoed on every later request; a 404 for it means the session expired,
  so the source re-initializes once and retries.
* :class:`McpStdioSource` - a subprocess speaking newline-delimited JSON-RPC on stdin/stdout;
  one reader task routes responses to per-id futures, so concurrent calls share the process.
  A process that died is restarted on the next use.

Both map a ``tools/call`` result to the executor's contract: text content is the result,
``isError`` and JSON-RPC errors become :class:`ToolFailure` (the model reads them), and a
broken connection becomes a ToolFailure with a short reason, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import orjson
from multidict import CIMultiDict

from gateway.tools.base import Approval, ToolFailure, ToolSpec

log = logging.getLogger("loopgate.tools.mcp")

PROTOCOL_VERSION = "2025-06-18"
CLIENT_INFO = {"name": "loopgate", "version": "0.1.0"}
_NO_TIMEOUT = aiohttp.ClientTimeout()  # the executor (calls) and our own asyncio.timeout (listing) bound requests
_BODY_EXCERPT = 300
_MAX_PAGES = 1000  # a server that keeps returning cursors must not hang a refresh forever
_STDIO_LINE_LIMIT = 64 * 1024 * 1024  # one JSON-RPC message per line; tool results can be large
_CLOSE_GRACE_S = 2.0
_OMITTED_CONTENT_KEYS = frozenset({"data", "blob", "text", "_meta", "annotations"})

_Requester = Callable[[str, dict[str, Any] | None], Awaitable[dict[str, Any]]]


# --------------------------------------------------------------------------------------------
# Shared protocol pieces
# --------------------------------------------------------------------------------------------


class _SessionExpired(Exception):
    """The HTTP server answered 404 for our session id: re-initialize and retry once."""


def _request(rpc_id: int, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": rpc_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def _notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


def _initialize_params() -> dict[str, Any]:
    # A tools-only client: no roots, sampling or elicitation to offer.
    return {"protocolVersion": PROTOCOL_VERSION, "capabilities": {}, "clientInfo": CLIENT_INFO}


def _is_response_to(message: Any, rpc_id: int) -> bool:
    """A response (not a server->client request that happens to reuse the number) for ``rpc_id``."""
    return (isinstance(message, dict) and message.get("id") == rpc_id and "method" not in message
            and ("result" in message or "error" in message))


def _result_of(source: str, method: str, message: dict[str, Any]) -> dict[str, Any]:
    """The ``result`` object of a response, or ToolFailure carrying the JSON-RPC error's message."""
    error = message.get("error")
    if error is not None:
        if isinstance(error, dict):
            text = str(error.get("message") or "unknown error")
            code = error.get("code")
            raise ToolFailure(f"MCP error {code}: {text}" if code is not None else f"MCP error: {text}")
        raise ToolFailure(f"MCP error: {error}")
    result = message.get("result")
    if not isinstance(result, dict):
        raise ToolFailure(f"MCP server {source} sent an invalid {method} result")
    return result


def _to_spec(source: str, item: Any, approval: Approval, timeout_s: float) -> ToolSpec | None:
    """One ``tools/list`` entry as a ToolSpec; None (logged) for an entry without a usable name."""
    if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
        log.warning("MCP server %s listed a tool without a name; skipped: %.200r", source, item)
        return None
    schema = item.get("inputSchema")
    if not isinstance(schema, dict):
        schema = {"type": "object"}  # MCP requires an object schema; be lenient with servers that omit it
    description = item.get("description") or item.get("title") or ""
    return ToolSpec(item["name"], str(description), schema, approval, timeout_s, source)


async def _list_all(source: str, request: _Requester, approval: Approval, timeout_s: float) -> list[ToolSpec]:
    """Every page of ``tools/list``; ``request(method, params)`` is the transport's round trip."""
    specs: list[ToolSpec] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(_MAX_PAGES):
        result = await request("tools/list", {"cursor": cursor} if cursor is not None else None)
        tools = result.get("tools")
        if not isinstance(tools, list):
            raise ToolFailure(f"MCP server {source} sent a tools/list result without 'tools'")
        for item in tools:
            spec = _to_spec(source, item, approval, timeout_s)
            if spec is not None:
                specs.append(spec)
        cursor = result.get("nextCursor")
        if not cursor:
            return specs
        if not isinstance(cursor, str) or cursor in seen:
            raise ToolFailure(f"MCP server {source} sent an invalid or repeated tools/list cursor")
        seen.add(cursor)
    raise ToolFailure(f"MCP server {source} sent more than {_MAX_PAGES} tools/list pages")


def _call_params(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"name": tool, "arguments": arguments}


def _render_call_result(tool: str, result: dict[str, Any]) -> str:
    """Text items joined by newlines; other items as a compact JSON description (no base64 blobs).

    A result with no content but ``structuredContent`` is rendered as that JSON, so a server that
    only fills the structured form still gives the model something to read.
    """
    parts: list[str] = []
    content = result.get("content")
    for item in content if isinstance(content, list) else ():
        if isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str):
            parts.append(item["text"])
        elif isinstance(item, dict):
            described = {k: v for k, v in item.items() if k not in _OMITTED_CONTENT_KEYS}
            resource = item.get("resource")
            if isinstance(resource, dict):  # embedded resource: name it, do not inline it
                described["resource"] = {k: v for k, v in resource.items() if k not in _OMITTED_CONTENT_KEYS}
            parts.append(orjson.dumps(described, default=str).decode())
        else:
            parts.append(orjson.dumps(item, default=str).decode())
    if not parts and result.get("structuredContent") is not None:
        parts.append(orjson.dumps(result["structuredContent"], default=str).decode())
    text = "\n".join(parts)
    if result.get("isError") is True:
        raise ToolFailure(text or f"Tool {tool} reported an error")
    return text


def _excerpt(text: str) -> str:
    return text if len(text) <= _BODY_EXCERPT else text[:_BODY_EXCERPT] + "…"


# --------------------------------------------------------------------------------------------
# Streamable HTTP
# --------------------------------------------------------------------------------------------


class McpHttpSource:
    """One MCP server reached over Streamable HTTP, behind the ToolSource interface.

    Calls are independent POSTs on a pooled session, so concurrent calls need no coordination
    beyond the shared session state (id counter, session id), which only the handshake writes.
    """

    def __init__(self, name: str, url: str, headers: dict[str, str] | None = None, timeout_s: float = 30.0,
                 approval: Approval = "never", session: aiohttp.ClientSession | None = None) -> None:
        self._name = name
        self._url = url
        self._headers: CIMultiDict[str] = CIMultiDict(headers or {})
        # Required by the transport; set after the configured headers so they cannot be broken.
        self._headers["Content-Type"] = "application/json"
        self._headers["Accept"] = "application/json, text/event-stream"
        self._timeout_s = timeout_s
        self._approval: Approval = approval
        self._session = session
        self._owns_session = session is None
        self._ids = itertools.count(1)
        self._init_lock = asyncio.Lock()
        self._initialized = False
        self._generation = 0  # bumped by each handshake, so concurrent 404s re-initialize only once
        self._session_id: str | None = None
        self._protocol_version: str | None = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def session_id(self) -> str | None:
        """The server's ``Mcp-Session-Id`` (None before the handshake or for a stateless server)."""
        return self._session_id

    async def list_tools(self) -> list[ToolSpec]:
        # A refresh has no deadline of its own; a hung server must not hold the registry lock.
        try:
            async with asyncio.timeout(self._timeout_s):
                return await _list_all(self._name, self._call_method, self._approval, self._timeout_s)
        except TimeoutError:
            raise ToolFailure(f"MCP server {self._name} did not list its tools within {self._timeout_s:g}s") from None

    async def call(self, tool: str, arguments: dict[str, Any]) -> str:
        # No timeout here: the executor enforces the tool's, and cancellation aborts the POST.
        result = await self._call_method("tools/call", _call_params(tool, arguments))
        return _render_call_result(tool, result)

    async def aclose(self) -> None:
        """End the session (DELETE, best effort: a server may answer 405) and close an owned session."""
        session_id, self._session_id, self._initialized = self._session_id, None, False
        if session_id is not None and self._session is not None and not self._session.closed:
            try:
                async with asyncio.timeout(min(self._timeout_s, _CLOSE_GRACE_S)):
                    async with self._session.delete(self._url, headers=self._request_headers(session_id),
                                                    timeout=_NO_TIMEOUT) as resp:
                        await resp.read()
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                log.debug("MCP server %s: ending session failed: %r", self._name, exc)
        if self._owns_session and self._session is not None and not self._session.closed:
            await self._session.close()

    # -- internals -------------------------------------------------------------------------

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or (self._owns_session and self._session.closed):
            self._session = aiohttp.ClientSession(timeout=_NO_TIMEOUT)
            self._owns_session = True
        return self._session

    def _request_headers(self, session_id: str | None) -> CIMultiDict[str]:
        headers = self._headers.copy()
        if session_id is not None:
            headers["Mcp-Session-Id"] = session_id
        if self._protocol_version is not None:
            headers["MCP-Protocol-Version"] = self._protocol_version
        return headers

    async def _call_method(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        """Handshake if needed, send, and on an expired session re-initialize once and resend."""
        await self._ensure_initialized()
        generation = self._generation
        try:
            message = await self._post(method, params, self._session_id)
        except _SessionExpired:
            log.info("MCP server %s: session expired, re-initializing", self._name)
            await self._ensure_initialized(expired=generation)
            try:
                message = await self._post(method, params, self._session_id)
            except _SessionExpired:
                self._initialized = False
                raise ToolFailure(f"MCP server {self._name} rejected a freshly initialized session") from None
        assert message is not None  # a request (unlike a notification) always gets a message
        return _result_of(self._name, method, message)

    async def _ensure_initialized(self, expired: int | None = None) -> None:
        """Run the handshake unless done; ``expired`` names the generation a 404 invalidated."""
        if self._initialized and (expired is None or expired != self._generation):
            return
        async with self._init_lock:
            if self._initialized and (expired is None or expired != self._generation):
                return  # another task did it while we waited
            self._initialized = False
            self._session_id = None
            self._protocol_version = None
            try:
                async with asyncio.timeout(self._timeout_s):
                    await self._handshake()
            except TimeoutError:
                raise ToolFailure(f"MCP server {self._name} did not initialize within {self._timeout_s:g}s") from None
            self._generation += 1
            self._initialized = True

    async def _handshake(self) -> None:
        rpc_id = next(self._ids)
        body = orjson.dumps(_request(rpc_id, "initialize", _initialize_params()))
        async with self._send(body, None) as resp:
            if resp.status == 404:
                raise ToolFailure(f"MCP server {self._name} answered HTTP 404 to initialize")
            message = await self._read_response(resp, rpc_id, "initialize")
            session_id = resp.headers.get("Mcp-Session-Id")
        assert message is not None
        result = _result_of(self._name, "initialize", message)
        version = result.get("protocolVersion")
        self._protocol_version = version if isinstance(version, str) and version else PROTOCOL_VERSION
        self._session_id = session_id
        body = orjson.dumps(_notification("notifications/initialized"))
        async with self._send(body, session_id) as resp:
            await self._read_response(resp, None, "notifications/initialized")

    async def _post(self, method: str, params: dict[str, Any] | None, session_id: str | None) -> dict[str, Any] | None:
        rpc_id = next(self._ids)
        async with self._send(orjson.dumps(_request(rpc_id, method, params)), session_id) as resp:
            if resp.status == 404 and session_id is not None:
                raise _SessionExpired()
            return await self._read_response(resp, rpc_id, method)

    @contextlib.asynccontextmanager
    async def _send(self, body: bytes, session_id: str | None) -> AsyncIterator[aiohttp.ClientResponse]:
        """POST ``body``; connection problems become ToolFailure with a short reason."""
        try:
            async with self._client().post(self._url, data=body, headers=self._request_headers(session_id),
                                           timeout=_NO_TIMEOUT) as resp:
                yield resp
        except aiohttp.ClientConnectorError as exc:
            log.warning("MCP server %s: cannot connect to %s: %s", self._name, self._url, exc)
            raise ToolFailure(f"Could not connect to MCP server {self._name} ({_reason(exc)})") from None
        except aiohttp.ClientError as exc:
            log.warning("MCP server %s: request to %s failed: %r", self._name, self._url, exc)
            raise ToolFailure(f"Request to MCP server {self._name} failed ({type(exc).__name__}: {exc})") from None

    async def _read_response(self, resp: aiohttp.ClientResponse, rpc_id: int | None,
                             method: str) -> dict[str, Any] | None:
        """The JSON-RPC response for ``rpc_id`` from a JSON or SSE body (None for a notification)."""
        if not 200 <= resp.status < 300:
            text = await resp.text(errors="replace")
            detail = f": {_excerpt(text)}" if text else ""
            raise ToolFailure(f"HTTP {resp.status} from MCP server {self._name} ({method}){detail}")
        if rpc_id is None:
            await resp.read()  # 202 Accepted, no body; drain so the connection is reused
            return None
        content_type = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if content_type == "text/event-stream":
            async for data in _sse_data(resp):
                for message in _messages(data):
                    if _is_response_to(message, rpc_id):
                        return message
                    log.debug("MCP server %s: ignoring message on %s stream: %.200r", self._name, method, message)
            raise ToolFailure(f"MCP server {self._name} closed the {method} stream without a response")
        raw = await resp.read()
        for message in _messages(raw):
            if _is_response_to(message, rpc_id):
                return message
        raise ToolFailure(f"MCP server {self._name} sent no valid response to {method}: "
                          f"{_excerpt(raw.decode('utf-8', 'replace'))}")


async def _sse_data(resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The ``data`` of each SSE event (multi-line data joined by newlines), as it arrives."""
    data: list[bytes] = []
    async for raw_line in resp.content:
        line = raw_line.rstrip(b"\r\n")
        if not line:
            if data:
                yield b"\n".join(data)
                data = []
            continue
        if line.startswith(b":"):
            continue  # comment / keep-alive
        field, _, value = line.partition(b":")
        if field == b"data":
            data.append(value[1:] if value.startswith(b" ") else value)
    if data:
        yield b"\n".join(data)


def _messages(raw: bytes) -> list[Any]:
    """JSON-RPC messages in a body or event (a single message or a batch); garbage yields none."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return []
    return value if isinstance(value, list) else [value]


def _reason(exc: aiohttp.ClientConnectorError) -> str:
    """A short cause without host or port: "Connection refused", "Name or service not known"."""
    err = exc.os_error
    if err.errno is not None and err.errno > 0:
        return os.strerror(err.errno)
    return err.strerror or type(exc).__name__


# --------------------------------------------------------------------------------------------
# stdio
# --------------------------------------------------------------------------------------------


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
                    log.error("MCP server %s wrote a message longer than %d bytes", self.source, _STDIO_LINE_LIMIT)
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
        messages = _messages(line)
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
                await asyncio.wait_for(proc.wait(), _CLOSE_GRACE_S)
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

    def __init__(self, name: str, command: list[str], env: dict[str, str] | None = None, timeout_s: float = 30.0,
                 approval: Approval = "never") -> None:
        if not command:
            raise ValueError(f"MCP server {name}: command is empty")
        self._name = name
        self._command = list(command)
        # Configured variables extend the gateway's environment (PATH etc.) rather than replace it.
        self._env = {**os.environ, **env} if env else None
        self._timeout_s = timeout_s
        self._approval: Approval = approval
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
                return await _list_all(self._name, lambda m, p: self._request(process, m, p),
                                       self._approval, self._timeout_s)
        except TimeoutError:
            raise ToolFailure(f"MCP server {self._name} did not list its tools within {self._timeout_s:g}s") from None

    async def call(self, tool: str, arguments: dict[str, Any]) -> str:
        process = await self._ensure_started()
        result = await self._request(process, "tools/call", _call_params(tool, arguments))
        return _render_call_result(tool, result)

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
                    result = await self._request(process, "initialize", _initialize_params())
                    await process.send(_notification("notifications/initialized"))
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
                stderr=asyncio.subprocess.PIPE, env=self._env, limit=_STDIO_LINE_LIMIT)
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
            await process.send(_request(rpc_id, method, params))
            message = await future
        except asyncio.CancelledError:
            # The executor gave up (timeout) or the request went away: tell the server to stop.
            if process.alive and method != "initialize":
                self._spawn_background(process.send(_notification(
                    "notifications/cancelled", {"requestId": rpc_id, "reason": "cancelled by the client"})))
            raise
        finally:
            process.pending.pop(rpc_id, None)
        return _result_of(self._name, method, message)

    def _spawn_background(self, coro: Any) -> None:
        async def quietly() -> None:
            with contextlib.suppress(ToolFailure):
                await coro

        task = asyncio.get_running_loop().create_task(quietly())
        self._background.add(task)
        task.add_done_callback(self._background.discard)
