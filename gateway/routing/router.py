"""Failover across a route's targets; every answer is parsed by the adapter of the target that gave it.

Decisions are driven by canonical error classes, never by exception types:

* caller's own bad request -> returned at once (another provider would reject it too);
* context overflow -> the next target (a larger window may exist), no retry on the same one;
* rate limit, overload, 5xx, timeout, connection, invalid body -> retry the same target up
  to ``retries`` times with exponential backoff and jitter (``Retry-After`` honoured up to a
  cap; a longer demand moves on), then the next target;
* the target's own auth / not-found errors -> the next target without retrying.

Streaming has a commit point: until the first delta has been yielded, any failure fails
over transparently (including a 200 followed by an in-stream error). After it, the stream
is never replayed: ``StreamInterrupted`` tells the renderer to end the stream with an error.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gateway import metrics
from gateway.canonical import ModelRequest, ModelResponse, StreamDelta
from gateway.config.model import ProviderConfig, RoutingConfig, TargetConfig
from gateway.context.windows import known_window
from gateway.providers.base import TARGET_FAULTS, Adapter, ErrorClass, ProviderError
from gateway.providers.registry import adapter_for
from gateway.routing.health import TargetHealth
from gateway.upstream.pool import UpstreamPool
from gateway.upstream.sse import SSEDecoder


@dataclass(frozen=True, slots=True)
class ResolvedTarget:
    label: str
    provider: ProviderConfig
    model: str
    adapter: Adapter
    # The model's context window when the built-in table knows it (after a context overflow,
    # only a target with a larger window is worth asking).
    window: int | None = None


Attempt = dict[str, Any]


def attempt(target: str, error_class: str | None, status: int | None, elapsed_ms: float) -> Attempt:
    """One upstream attempt as the ``gateway.attempts`` entry it becomes (built once, never converted)."""
    return {"target": target, "error_class": error_class, "status": status, "elapsed_ms": round(elapsed_ms, 2)}


@dataclass(slots=True)
class Answer:
    """The end of a model call: who answered and what, already in canonical form."""

    target: ResolvedTarget
    response: ModelResponse


class AllTargetsFailed(Exception):
    def __init__(self, last: ProviderError, target: str) -> None:
        super().__init__(f"every target failed; last: {target}: {last.message}")
        self.last = last
        self.target = target


class StreamInterrupted(Exception):
    """A stream failed after some of it reached the client; it must not be replayed."""

    def __init__(self, error: ProviderError, target: str) -> None:
        super().__init__(f"{target}: {error.message}")
        self.error = error
        self.target = target


class DeadlineExceeded(ProviderError):
    def __init__(self) -> None:
        super().__init__(ErrorClass.TIMEOUT, "the request deadline passed before any target answered")


Decision = Literal["retry", "next", "raise"]


class _FailoverChain:
    """The bookkeeping every walk over a route's targets shares, for one model call.

    It remembers the last failure, counts each move to the next target, and after a context
    overflow skips targets known to have no larger window than the one that overflowed.
    """

    __slots__ = ("_attempts", "_last", "_tried")

    def __init__(self, attempts: list[Attempt]) -> None:
        self._attempts = attempts
        self._last: tuple[ProviderError, ResolvedTarget] | None = None
        self._tried = False

    def worth_trying(self, target: ResolvedTarget) -> bool:
        last = self._last
        if last is not None and last[0].error_class is ErrorClass.CONTEXT_LENGTH:
            overflowed = last[1].window
            if overflowed is not None and target.window is not None and target.window <= overflowed:
                self._attempts.append(attempt(target.label, "window_too_small", None, 0.0))
                return False
        if self._tried and last is not None:
            metrics.FAILOVERS.inc(last[1].label, last[0].error_class.value)
        self._tried = True
        return True

    def failed(self, error: ProviderError, target: ResolvedTarget) -> None:
        self._last = (error, target)

    def exhausted(self) -> AllTargetsFailed:
        assert self._last is not None
        return AllTargetsFailed(self._last[0], self._last[1].label)


class Router:
    def __init__(self, providers: dict[str, ProviderConfig], policy: RoutingConfig, pool: UpstreamPool,
                 health: TargetHealth) -> None:
        self._providers = providers
        self._policy = policy
        self._pool = pool
        self.health = health

    def resolve(self, targets: Sequence[TargetConfig]) -> tuple[ResolvedTarget, ...]:
        """Done once per route at start-up, so the hot path does no lookups."""
        resolved = []
        for target in targets:
            provider = self._providers[target.provider]
            resolved.append(ResolvedTarget(target.label, provider, target.model, adapter_for(provider.type),
                                           known_window(provider.type, target.model)))
        return tuple(resolved)

    def _all_healthy(self, targets: Sequence[ResolvedTarget]) -> bool:
        """The common case, checked without a coroutine: every circuit closed, nothing to admit."""
        healthy = self.health.healthy
        return all(healthy(target.label) for target in targets)

    async def _plan(self, targets: Sequence[ResolvedTarget], attempts: list[Attempt]) -> Sequence[ResolvedTarget]:
        """Which targets to try when some circuit is not closed (open ones skipped, half-open probed)."""
        health = self.health
        admitted = []
        for target in targets:
            if await health.admit(target.label):
                admitted.append(target)
            else:
                attempts.append(attempt(target.label, "circuit_open", None, 0.0))
        # Every circuit open: trying is still better than failing without asking anyone.
        return admitted or list(targets)

    async def _decide(self, target: ResolvedTarget, error: ProviderError, attempt_no: int, retries: int,
                      deadline: float) -> Decision:
        metrics.UPSTREAM_ERRORS.inc(target.label, error.error_class.value)
        if isinstance(error, DeadlineExceeded):
            return "raise"
        if error.error_class is ErrorClass.BAD_REQUEST:
            await self.health.record(target.label, failed=False)  # it answered; the request was wrong
            return "raise"
        if error.error_class is ErrorClass.CONTEXT_LENGTH:
            await self.health.record(target.label, failed=False)
            return "next"
        if error.error_class in TARGET_FAULTS or not error.retryable:
            await self.health.record(target.label, failed=True)
            return "next"
        if attempt_no < retries:
            delay = min(self._policy.backoff_max_s, self._policy.backoff_base_s * (2 ** attempt_no))
            delay *= random.uniform(0.75, 1.25)
            if error.retry_after is not None:
                if error.retry_after > self._policy.retry_after_cap_s:
                    await self.health.record(target.label, failed=True)
                    return "next"
                delay = max(delay, error.retry_after)
            if time.monotonic() + delay < deadline:
                await asyncio.sleep(delay)
                return "retry"
        await self.health.record(target.label, failed=True)
        return "next"


    async def complete(self, targets: Sequence[ResolvedTarget], request: ModelRequest, attempts: list[Attempt],
                       retries: int, deadline: float) -> Answer:
        chain = _FailoverChain(attempts)
        for target in targets if self._all_healthy(targets) else await self._plan(targets, attempts):
            if not chain.worth_trying(target):
                continue
            for attempt_no in range(retries + 1):
                started = time.monotonic()
                try:
                    response = await self._call(target, request, deadline)
                except ProviderError as error:
                    attempts.append(attempt(target.label, error.error_class.value, error.status,
                                            (time.monotonic() - started) * 1000))
                    chain.failed(error, target)
                    decision = await self._decide(target, error, attempt_no, retries, deadline)
                    if decision == "raise":
                        raise AllTargetsFailed(error, target.label) from None
                    if decision == "next":
                        break
                    continue
                attempts.append(attempt(target.label, None, 200, (time.monotonic() - started) * 1000))
                metrics.UPSTREAM_ATTEMPTS.inc(target.label, "ok")
                if self.health.success_is_news(target.label):
                    await self.health.record(target.label, failed=False)
                return Answer(target, response)
        raise chain.exhausted()

    async def _call(self, target: ResolvedTarget, request: ModelRequest, deadline: float) -> ModelResponse:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise DeadlineExceeded()
        if target.provider.type == "litellm":
            return await target.adapter.complete(request, target.provider, target.model, remaining)
        native = target.adapter.build_request(request, target.provider, target.model, stream=False)
        if remaining >= target.provider.timeout_s:
            # The provider's own read timeout fires first: no extra timer on the common path.
            reply = await self._pool.post(target.provider, native)
        else:
            try:
                async with asyncio.timeout(remaining):
                    reply = await self._pool.post(target.provider, native)
            except TimeoutError:
                raise DeadlineExceeded() from None
        if reply.status >= 400:
            raise target.adapter.parse_error(reply.status, reply.headers, reply.body)
        return target.adapter.parse_response(reply.body)

    async def stream(self, targets: Sequence[ResolvedTarget], request: ModelRequest, attempts: list[Attempt],
                     retries: int, deadline: float) -> AsyncIterator[list[StreamDelta] | Answer]:
        chain = _FailoverChain(attempts)
        for target in targets if self._all_healthy(targets) else await self._plan(targets, attempts):
            if not chain.worth_trying(target):
                continue
            for attempt_no in range(retries + 1):
                started = time.monotonic()
                committed = False
                try:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise DeadlineExceeded()
                    response: ModelResponse | None = None
                    if target.provider.type == "litellm":
                        source = target.adapter.stream(request, target.provider, target.model, remaining)
                        try:
                            async for item in source:
                                if isinstance(item, ModelResponse):
                                    response = item
                                    continue
                                committed = True
                                yield item
                                if time.monotonic() > deadline:
                                    raise DeadlineExceeded()
                        finally:
                            await source.aclose()
                    else:
                        # Inlined rather than a nested generator: this loop runs once per upstream read.
                        # No asyncio.timeout around the yields (it would cancel the consumer, not this
                        # generator): the header wait is bounded by ``remaining``, stalls by the
                        # provider's read timeout, and the deadline is checked between reads.
                        native = target.adapter.build_request(request, target.provider, target.model, stream=True)
                        async with self._pool.stream(target.provider, native, remaining) as upstream:
                            if upstream.status >= 400:
                                raise target.adapter.parse_error(upstream.status, upstream.headers,
                                                                 await upstream.read())
                            parser = target.adapter.new_stream_parser(target.label, target.model)
                            decoder = SSEDecoder()
                            async for chunk in upstream.chunks():
                                deltas: list[StreamDelta] = []
                                for event in decoder.feed(chunk):
                                    deltas += parser.feed(event)
                                if deltas:
                                    committed = True
                                    yield deltas  # one list per upstream read: one write to the client
                                if time.monotonic() > deadline:
                                    raise DeadlineExceeded()
                            deltas = []
                            for event in decoder.close():
                                deltas += parser.feed(event)
                            if deltas:
                                committed = True
                                yield deltas
                            response = parser.finish()
                    if response is None:
                        raise ProviderError(ErrorClass.CONNECTION, "upstream stream ended without a response")
                except ProviderError as caught:
                    error: ProviderError = caught
                else:
                    attempts.append(attempt(target.label, None, 200, (time.monotonic() - started) * 1000))
                    metrics.UPSTREAM_ATTEMPTS.inc(target.label, "ok")
                    if self.health.success_is_news(target.label):
                        await self.health.record(target.label, failed=False)
                    yield Answer(target, response)
                    return
                attempts.append(attempt(target.label, error.error_class.value, error.status,
                                        (time.monotonic() - started) * 1000))
                if committed:
                    metrics.UPSTREAM_ERRORS.inc(target.label, error.error_class.value)
                    metrics.STREAM_ABORTS.inc(target.label, error.error_class.value)
                    await self.health.record(target.label, failed=error.error_class is not ErrorClass.BAD_REQUEST)
                    raise StreamInterrupted(error, target.label)
                chain.failed(error, target)
                decision = await self._decide(target, error, attempt_no, retries, deadline)
                if decision == "raise":
                    raise AllTargetsFailed(error, target.label)
                if decision == "next":
                    break
        raise chain.exhausted()
