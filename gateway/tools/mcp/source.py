"""Tools served by MCP servers (Model Context Protocol), as two more sources.

Sessions are the official SDK's (``mcp``): it negotiates the protocol version (the stateless
2026-07-28 revision where a server offers it, else the handshake from 2025-11-25 down to
2024-11-05), pages ``tools/list`` and calls tools. Only the transport differs:

* :class:`McpHttpSource` - "Streamable HTTP": the SDK's transport on an HTTP client with the
  configured headers, the egress proxy, a size bound and the call's ``traceparent``; an expired
  session is re-initialized once and the call resent.
* :class:`McpStdioSource` - a subprocess speaking newline-delimited JSON-RPC, restarted on the next
  use after it died.

Both declare the ``elicitation`` capability (form and URL) and, with a ``sampling_route``,
``sampling``, and route a server's requests to the handlers of the call that triggered them
(``server_requests``); both map a result to what the model reads (``results``): text, JSON of
``structuredContent``, images as image parts, ``isError`` and protocol errors as
:class:`~gateway.tools.base.ToolFailure`, a broken connection as a short reason.
"""

from __future__ import annotations

from gateway.tools.mcp.http import McpHttpSource
from gateway.tools.mcp.protocol import CLIENT_INFO
from gateway.tools.mcp.stdio import McpStdioSource

__all__ = ["CLIENT_INFO", "McpHttpSource", "McpStdioSource"]
