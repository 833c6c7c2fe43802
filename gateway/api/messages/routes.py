"""The Messages surface's Starlette routes (``POST /v1/messages`` is in the surface table, ``api/surfaces.py``)."""

from __future__ import annotations

from starlette.routing import Route

from gateway.api.driver import endpoint
from gateway.api.messages.count import PATH as COUNT_PATH
from gateway.api.messages.count import count_tokens
from gateway.api.messages.errors import anthropic_error


def messages_routes() -> list[Route]:
    return [
        Route(COUNT_PATH, endpoint(COUNT_PATH, count_tokens, metered=True, errors=anthropic_error), methods=["POST"]),
    ]
