"""The request headers an Anthropic client authenticates and negotiates with."""

from __future__ import annotations

from gateway.errors import bad_request
from gateway.http.incoming import Incoming

_API_KEY = b"x-api-key"
_BETA = b"anthropic-beta"


def use_api_key(incoming: Incoming) -> None:
    """``x-api-key`` (what ``ANTHROPIC_API_KEY`` sends) as the caller's key when no ``Authorization`` came.

    Sent twice, it is a 400 like a repeated ``Authorization``: "the last one wins" must never pick
    a caller's key.
    """
    if incoming.authorization or incoming.authorization is None:
        return
    value = incoming.headers.get(_API_KEY)
    if value is None:
        return
    if len(incoming.headers) != len(incoming.raw_headers) and sum(
            name == _API_KEY for name, _ in incoming.raw_headers) > 1:
        raise bad_request("the request has more than one x-api-key header; send exactly one")
    incoming.authorization = "Bearer " + value.decode("latin-1").strip()


def betas_of(incoming: Incoming) -> str:
    """The ``anthropic-beta`` header as sent (any value is accepted: unknown betas go to Anthropic targets)."""
    return incoming.headers.get(_BETA, b"").decode("latin-1")
