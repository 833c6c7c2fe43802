"""A small MCP server on stdin/stdout (run as ``python tests/fakes/mcp_stdio_server.py``).

Same tools as the HTTP fake, plus ``grow`` (adds a tool ``grownN`` to the listing and announces it
with ``notifications/tools/list_changed``, ``times`` notifications in a row), ``listings`` (how
many ``tools/list`` requests it served) and the process-inspecting ``env`` and ``pid``. Requests
are handled concurrently (``slow`` sleeps in its own task), so responses can come back out of
order, as with a real server. It writes a line to stderr at start-up (the client must log it, not
parse it) and exits when stdin closes.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: make "tests" importable

from tests.fakes.mcp_server import SERVER_VERSION, list_page, slow_result, tool_result, unknown_tool

GROWN: list[dict[str, Any]] = []  # tools added at run time by ``grow``
LISTINGS = [0]


def write(message: dict[str, Any]) -> None:
    sys.stdout.buffer.write(orjson.dumps(message) + b"\n")
    sys.stdout.buffer.flush()


async def handle(message: dict[str, Any]) -> None:
    method, rpc_id, params = message.get("method"), message.get("id"), message.get("params") or {}
    if rpc_id is None:
        return  # notifications: initialized, cancelled
    if method == "initialize":
        write({"jsonrpc": "2.0", "id": rpc_id, "result": {
            "protocolVersion": SERVER_VERSION, "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "fake-mcp-stdio", "version": "1.0"}}})
    elif method == "tools/list":
        LISTINGS[0] += 1
        page = list_page(params)
        if "nextCursor" not in page:
            page["tools"] = [*page["tools"], *GROWN]
        write({"jsonrpc": "2.0", "id": rpc_id, "result": page})
    elif method == "tools/call":
        name, arguments = params.get("name"), params.get("arguments") or {}
        if name == "slow":
            write({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "zz"}})
            await asyncio.sleep(float(arguments.get("seconds", 0.1)))
            result = slow_result(arguments)
        elif name == "env":  # lets a test check the configured environment reached the process
            result = {"content": [{"type": "text", "text": os.environ.get(arguments.get("name", ""), "<unset>")}]}
        elif name == "grow":
            GROWN.append({"name": f"grown{len(GROWN) + 1}", "inputSchema": {"type": "object"}})
            for _ in range(int(arguments.get("times", 1))):
                write({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            result = {"content": [{"type": "text", "text": GROWN[-1]["name"]}]}
        elif name == "listings":
            result = {"content": [{"type": "text", "text": str(LISTINGS[0])}]}
        elif name == "pid":
            result = {"content": [{"type": "text", "text": str(os.getpid())}]}
        else:
            result = tool_result(name, arguments)
        write(unknown_tool(rpc_id, name) if result is None else {"jsonrpc": "2.0", "id": rpc_id, "result": result})
    else:
        write({"jsonrpc": "2.0", "id": rpc_id, "error": {"code": -32601, "message": "Method not found"}})


async def main() -> None:
    print("fake MCP stdio server starting", file=sys.stderr, flush=True)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    tasks: set[asyncio.Task[None]] = set()
    while line := await reader.readline():
        task = asyncio.create_task(handle(orjson.loads(line)))
        tasks.add(task)
        task.add_done_callback(tasks.discard)


if __name__ == "__main__":
    asyncio.run(main())
