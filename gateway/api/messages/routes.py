"""The Messages surface's routes (``POST /v1/messages`` itself is served by ``FastChatPath`` first)."""

from __future__ import annotations

from starlette.routing import Route

from gateway.api.lifecycle import endpoint
from gateway.api.messages.count import PATH as COUNT_PATH
from gateway.api.messages.count import count_tokens
from gateway.api.messages.endpoint import PATH, messages_endpoint
from gateway.api.messages.errors import anthropic_error


def messages_routes() -> list[Route]:
    return [
        Route(PATH, messages_endpoint, methods=["POST"]),
        Route(COUNT_PATH, endpoint(COUNT_PATH, count_tokens, metered=True, errors=anthropic_error), methods=["POST"]),
    ]
