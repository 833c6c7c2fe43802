"""The surface table: every path a surface serves through the one driver (``api/driver.py``).

The app's front (``app.FastChatPath``) looks a request's path up here once and drives the
surface it finds, without Starlette's routing and middleware layers (they only cost time on
the hot paths, bench/README.md); Starlette has no route of its own for these paths. A new
surface is a parser, a renderer and a line here.
"""

from __future__ import annotations

from gateway.api.chat.endpoint import CHAT
from gateway.api.driver import Surface
from gateway.api.embeddings.endpoint import EMBEDDINGS
from gateway.api.messages.endpoint import MESSAGES
from gateway.api.responses.endpoint import RESPONSES

#: ``POST {path}`` -> its surface (``/chat/completions`` and ``/embeddings``: what SDKs send without ``/v1``)
SURFACES: dict[str, Surface] = {
    "/v1/chat/completions": CHAT,
    "/chat/completions": CHAT,
    "/v1/messages": MESSAGES,
    "/v1/embeddings": EMBEDDINGS,
    "/embeddings": EMBEDDINGS,
    "/v1/responses": RESPONSES,
}
