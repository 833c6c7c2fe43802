"""The surface table: every surface of the gateway, and the paths the one driver serves (``api/driver.py``).

``SURFACES`` is the table of the hot paths: ``POST {path}`` -> its surface. The app's front
(``app.FastChatPath``) looks a request's path up there once and drives the surface it finds,
without Starlette's routing and middleware layers (they only cost time on the hot paths,
bench/README.md); Starlette has no route of its own for these paths. ``EVERY_SURFACE`` lists
every surface for the operations Starlette routes (path parameters, GET and DELETE, the admin
API), served by the same driver. A new surface is a parser, a renderer and a line here.
"""

from __future__ import annotations

from typing import Any

from gateway.api.admin.audit import AUDIT
from gateway.api.admin.budgets import BUDGETS
from gateway.api.admin.keys import KEYS
from gateway.api.admin.usage import USAGE
from gateway.api.approvals.endpoint import APPROVALS
from gateway.api.chat.endpoint import CHAT
from gateway.api.chat.models import MODELS
from gateway.api.console.overview import OVERVIEW
from gateway.api.continuations.endpoint import CONTINUATIONS
from gateway.api.driver import RoutedSurface, Surface, TableSurface
from gateway.api.embeddings.endpoint import EMBEDDINGS
from gateway.api.messages.endpoint import MESSAGES
from gateway.api.responses.compact import COMPACT
from gateway.api.responses.endpoint import RESPONSES
from gateway.api.responses.input_tokens import INPUT_TOKENS
from gateway.api.responses.websocket import ResponsesSockets

#: ``POST {path}`` -> its surface (``/chat/completions`` and ``/embeddings``: what SDKs send without ``/v1``)
SURFACES: dict[str, TableSurface[Any]] = {
    "/v1/chat/completions": CHAT,
    "/chat/completions": CHAT,
    "/v1/messages": MESSAGES,
    "/v1/embeddings": EMBEDDINGS,
    "/embeddings": EMBEDDINGS,
    "/v1/responses": RESPONSES,
    # Before Starlette's ``/v1/responses/{id}`` (the front looks the table up first): no id is ever one of these.
    "/v1/responses/compact": COMPACT,
    "/v1/responses/input_tokens": INPUT_TOKENS,
}

#: the WebSocket mode of a table path (``GET {path}`` with ``Upgrade: websocket``, while ``websocket.enabled``):
#: what serves its connections, built per worker over the path's mounted surface (api/app.py). A plain GET of
#: such a path is a 426, so a client that cannot open a WebSocket falls back to POST at once.
SOCKETS: dict[str, type[ResponsesSockets]] = {"/v1/responses": ResponsesSockets}

#: the admin API (``auth.admin_keys`` only): keys, usage, budgets, any tenant's audit log, the console's overview
ADMIN = RoutedSurface((*KEYS, *USAGE, *BUDGETS, *AUDIT, OVERVIEW))

#: every surface, in the order Starlette tries their operations (the first match wins)
EVERY_SURFACE: tuple[Surface, ...] = (
    RoutedSurface((MODELS,)), MESSAGES, CONTINUATIONS, RESPONSES, ADMIN, APPROVALS, CHAT, EMBEDDINGS,
)
