"""An embeddings call walked over a route's targets: the router's failover walk, an embeddings attempt per target.

The walk (classification, retries, backoff, circuit breaker, deadline) is the router's own
(``Router.call``); this module supplies only what one attempt is. An attempt is all of a
target's upstream calls for the request (Gemini's batches, made concurrently, at most
``BATCH_CONCURRENCY`` at a time): one failed batch fails the attempt, so the next target
answers the whole request and the vectors never mix models.

An answer whose vectors are not the expected length (the caller's ``dimensions``, else the
target's declared ``dimensions``, else, for a direct ``PROVIDER/MODEL`` or a target declaring
none, one length for all) is the upstream's fault (``INVALID_RESPONSE``): it fails over like any
wrong-shaped answer and never reaches the caller's index.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from gateway.canonical_embeddings import EmbeddingRequest, EmbeddingResult, dimensions_of
from gateway.providers.base import ErrorClass, ProviderError, UpstreamRequest
from gateway.providers.registry import embedder_for
from gateway.routing.router import Attempt, ResolvedTarget, Router
from gateway.upstream.pool import UpstreamPool

#: upstream calls of one attempt in flight at once (a large request to Gemini is many batches)
BATCH_CONCURRENCY = 4


def check_vectors(result: EmbeddingResult, request: EmbeddingRequest, declared: int | None) -> None:
    """One vector per input, all of one length: the caller's ``dimensions``, else the target's ``declared``
    size, else (a direct ``PROVIDER/MODEL``, a target that declares none) the first vector's.

    ``INVALID_RESPONSE`` otherwise: an index fed vectors of mixed lengths is broken for every later query.
    """
    if len(result.vectors) != len(request.inputs):
        raise ProviderError(ErrorClass.INVALID_RESPONSE, f"upstream returned {len(result.vectors)} embeddings "
                                                         f"for {len(request.inputs)} inputs")
    expected = request.dimensions or declared
    for vector in result.vectors:
        size = dimensions_of(vector)
        if expected is None:
            expected = size
        elif size != expected:
            asked = "were expected" if request.dimensions or declared else "in the same answer"
            raise ProviderError(ErrorClass.INVALID_RESPONSE, f"upstream returned vectors of {size} dimensions; "
                                                             f"{expected} {asked}")


class Embedder:
    def __init__(self, router: Router, pool: UpstreamPool) -> None:
        self._router = router
        self._pool = pool

    async def embed(self, targets: Sequence[ResolvedTarget], request: EmbeddingRequest, attempts: list[Attempt],
                    retries: int, deadline: float) -> tuple[ResolvedTarget, EmbeddingResult]:
        """The answer of the first target that answers (its vectors of the expected length)."""
        return await self._router.call(targets, self._attempt, request, attempts, retries, deadline)

    async def _attempt(self, target: ResolvedTarget, request: EmbeddingRequest, deadline: float) -> EmbeddingResult:
        adapter: Any = embedder_for(target.provider.type)
        if target.in_process:
            result: EmbeddingResult = await adapter.embed(request, target.provider, target.model,
                                                          deadline - time.monotonic())
        else:
            natives: list[UpstreamRequest] = adapter.build_embeddings(request, target.provider, target.model)
            if len(natives) == 1:
                bodies = [await self._post(adapter, target, natives[0], deadline)]
            else:
                bodies = await self._batches(adapter, target, natives, deadline)
            result = adapter.parse_embeddings(bodies, request)
        check_vectors(result, request, target.dimensions)
        return result

    async def _post(self, adapter: Any, target: ResolvedTarget, native: UpstreamRequest, deadline: float) -> bytes:
        reply = await self._pool.post(target.provider.name, native, deadline)
        if reply.status >= 400:
            raise adapter.parse_error(reply.status, reply.headers, reply.body)
        return reply.body

    async def _batches(self, adapter: Any, target: ResolvedTarget, natives: list[UpstreamRequest],
                       deadline: float) -> list[bytes]:
        """Every batch's body in order; the first failure cancels the rest and is the attempt's error."""
        gate = asyncio.Semaphore(BATCH_CONCURRENCY)

        async def one(native: UpstreamRequest) -> bytes:
            async with gate:
                return await self._post(adapter, target, native, deadline)

        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(one(native)) for native in natives]
        except BaseExceptionGroup as failed:
            for error in failed.exceptions:
                if isinstance(error, ProviderError):
                    raise error from None
            raise
        return [task.result() for task in tasks]
