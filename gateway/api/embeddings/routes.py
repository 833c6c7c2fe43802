"""The embeddings surface's routes (``POST /v1/embeddings`` itself is served by ``FastChatPath`` first,
``endpoint.serve_embeddings``): served through the lifecycle's ``endpoint`` (OpenAI's error shape, metered)."""

from __future__ import annotations

from starlette.routing import Route

from gateway.api.embeddings.endpoint import PATH, create_embeddings
from gateway.api.lifecycle import endpoint


def embeddings_routes() -> list[Route]:
    return [
        Route(PATH, endpoint(PATH, create_embeddings, metered=True), methods=["POST"]),
        Route("/embeddings", endpoint(PATH, create_embeddings, metered=True), methods=["POST"]),
    ]
