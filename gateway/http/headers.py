"""Reading one header from a raw ASGI scope."""

from __future__ import annotations

from starlette.types import Scope


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of ``name`` (lower-case, as ASGI servers give names), or None."""
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None
