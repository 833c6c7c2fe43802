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

from gateway.tools.mcp.http import McpHttpSource
from gateway.tools.mcp.protocol import CLIENT_INFO, PROTOCOL_VERSION
from gateway.tools.mcp.stdio import McpStdioSource

__all__ = ["CLIENT_INFO", "PROTOCOL_VERSION", "McpHttpSource", "McpStdioSource"]
