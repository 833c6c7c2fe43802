"""The stream deadlines of an in-process target (``mock``, ``litellm``), which has no connection to enforce them.

An HTTP target's first-token deadline and stall timeout are enforced by its connection
(``content_by``/``idle_after`` in upstream/): the read that waits too long fails. An in-process
adapter is an async generator, so the same two bounds are put around each wait for its next
item instead: until content flows, ``first_token_timeout_s`` from the attempt's start; after
it, ``stream_idle_timeout_s`` between items. Either one passing is a TIMEOUT provider error,
which fails over (before the commit point) or is rescued (after it) exactly like an HTTP
target's. The timer exists only for a target with such a bound configured.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TypeVar

from gateway.providers.base import ErrorClass, ProviderError

T = TypeVar("T")


async def next_within(source: AsyncIterator[T], within: float | None, message: str) -> T | None:
    """The next item (None at the end); waiting more than ``within`` seconds raises a TIMEOUT saying ``message``."""
    if within is None:
        try:
            return await anext(source)
        except StopAsyncIteration:
            return None
    timeout = asyncio.timeout(max(0.0, within))
    try:
        async with timeout:
            return await anext(source)
    except StopAsyncIteration:
        return None
    except TimeoutError:
        if timeout.expired():  # ours; a TimeoutError the adapter raised itself is its own failure
            raise ProviderError(ErrorClass.TIMEOUT, message) from None
        raise


def wait_bound(started: float, now: float, flowing: bool, first_token_s: float | None,
               idle_s: float | None) -> tuple[float | None, str]:
    """How long the next wait may last, and what its failure says."""
    if flowing:
        return idle_s, f"in-process stream stalled (nothing for {idle_s:g} s)" if idle_s is not None else ""
    if first_token_s is not None:
        return started + first_token_s - now, f"no first token within {first_token_s:g} s"
    return None, ""
