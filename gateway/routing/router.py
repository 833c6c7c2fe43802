"""Failover across a route's targets; every answer is parsed by the adapter of the target that gave it.

Decisions are driven by canonical error classes, never by exception types:

* caller's own bad request -> returned at once (another provider would reject it too);
* context overflow -> the next target (a larger window may exist), no retry on the same one;
* rate limit, overload, 5xx, timeout, connection, invalid body -> retry the same target up
  to ``retries`` times with exponential backoff and jitter (``Retry-After`` honoured up to a
  cap; a longer demand moves on), then the next target;
* the target's own auth / not-found errors -> the next target without retrying.

The request deadline (``routing.request_timeout_s``) bounds the whole walk, and is spent where it
can still buy an answer:

* every upstream call runs under the remaining deadline; a call it cuts off ends the walk with
  a timeout naming that target (a target that was never called is never blamed). No attempt
  starts with less than ``MIN_ATTEMPT_S`` left: nobody answers that fast, and the event loop's
  timers (uvloop's are millisecond-grained) may end a cut-off call a hair before the deadline;
* a timeout before any response byte (connect or head timeout: the target is not answering)
  moves to the next target at once, without spending ``retries`` on it;
* a same-target retry happens only if, after its backoff, the remaining deadline still covers
  a retry as slow as the attempt that failed plus the next target's ``connect_timeout_s``
  (on the last target: only the backoff must fit);
* no retry goes to a target whose circuit is open, e.g. opened by the failure just recorded.

Every failed attempt counts towards the target's circuit breaker (``health.py``).

Streaming has a commit point: until the first delta has been yielded, any failure fails
over transparently (including a 200 followed by an in-stream error). After it, the stream
is never replayed: ``StreamInterrupted`` tells the renderer to end the stream with an error.

``complete()``, ``call()`` and ``stream()`` run their attempts the same way and share one walk
(``walk.py``): it decides which target and attempt come next by the rules above.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar, cast

from gateway.canonical import ModelRequest, ModelResponse, StreamDelta, Usage
from gateway.config.models_section import TargetConfig
from gateway.config.providers_section import ProviderConfig
from gateway.config.routing_section import RoutingConfig
from gateway.context.windows import known_window
from gateway.observability import metrics
from gateway.providers.base import ErrorClass, InProcessAdapter, ProviderError, StreamParser
from gateway.providers.registry import adapter_for
from gateway.routing.cut_usage import cut_attempt_usage
from gateway.routing.health import TargetHealth
from gateway.routing.in_process import next_within, wait_bound
from gateway.routing.reasoning import ReasoningSupport, takes_reasoning
from gateway.routing.rescue import (
    DEFAULT_STREAM_POLICY,
    Diverged,
    Rescue,
    StreamPolicy,
    kept_chars,
    prefill_kind,
    sent_so_far,
)
from gateway.routing.walk import (
    AllTargetsFailed,
    Answer,
    Attempt,
    DeadlineExceeded,
    ResolvedTarget,
    StreamInterrupted,
    Walk,
    attempt,
)
from gateway.upstream.errors import ResponseTooLarge
from gateway.upstream.pool import UpstreamPool
from gateway.upstream.sse import SSEDecoder

log = logging.getLogger("loopgate.routing")
P = TypeVar("P")
R = TypeVar("R")


class Router:
    def __init__(self, providers: dict[str, ProviderConfig], policy: RoutingConfig, pool: UpstreamPool,
                 health: TargetHealth) -> None:
        self._providers = providers
        self._policy = policy
        self._pool = pool
        self.health = health
        self.reasoning = ReasoningSupport()
        # Targets (metric labels) that answered a prefill with a 400: rescued by restart only.
        self._no_prefill: set[str] = set()

    def resolve(self, targets: Sequence[TargetConfig], direct: bool = False) -> tuple[ResolvedTarget, ...]:
        """Done once per route at start-up, so the hot path does no lookups.

        ``direct``: the targets a caller named (``PROVIDER/UPSTREAM_MODEL``), labelled by provider
        only for metrics and circuit state, so made-up names stay out of both.
        """
        resolved = []
        for target in targets:
            provider = self._providers[target.provider]
            adapter = adapter_for(provider.type)
            label = f"{target.provider}:*" if direct else target.label
            resolved.append(ResolvedTarget(target.label, provider, target.model, adapter, label,
                                           known_window(provider.type, target.model),
                                           getattr(adapter, "in_process", False), target.dimensions,
                                           target.first_token_timeout_s,
                                           prefill_kind(target.prefill, provider.type, provider.base_url,
                                                        target.model),
                                           takes_reasoning(provider.type, target.model, target.reasoning)))
            self.health.track(label)  # its shared circuit state is refreshed in the background from now on
        return tuple(resolved)

    def _all_healthy(self, targets: Sequence[ResolvedTarget]) -> bool:
        """The common case, checked without a coroutine: every circuit closed, nothing to admit."""
        healthy = self.health.healthy
        return all(healthy(target.metric_label) for target in targets)

    async def complete(self, targets: Sequence[ResolvedTarget], request: ModelRequest, attempts: list[Attempt],
                       retries: int, deadline: float) -> Answer:
        target, response = await self.call(targets, self._call, request, attempts, retries, deadline)
        return Answer(target, response)

    async def call(self, targets: Sequence[ResolvedTarget], attempt_on: Callable[[ResolvedTarget, P, float],
                   Awaitable[R]], payload: P, attempts: list[Attempt], retries: int,
                   deadline: float) -> tuple[ResolvedTarget, R]:
        """One whole-answer call walked over ``targets``: ``attempt_on(target, payload, deadline)`` per attempt.

        Any kind of call (a chat turn, an embeddings request) fails over by the same rules: it only has
        to raise ``ProviderError`` for a failed attempt and return the target's answer otherwise.
        """
        walk = Walk(self.health, self._policy, attempts, retries, deadline)
        for target in walk.tries(targets if self._all_healthy(targets) else await walk.plan(targets)):
            started = time.monotonic()
            try:
                answer = await attempt_on(target, payload, deadline)
            except ProviderError as error:
                await walk.failed(target, error, started)
                continue
            except BaseException:
                walk.abandoned(target)
                raise
            if walk.answered(target, started):
                await self.health.record(target.metric_label, failed=False)
            return target, answer
        raise walk.exhausted()

    async def _call(self, target: ResolvedTarget, request: ModelRequest, deadline: float) -> ModelResponse:
        """One attempt; a target that refuses ``reasoning_effort`` is asked again at once without it (once).

        One coroutine, no wrapper: this runs for every model call."""
        support = self.reasoning
        sent = support.shaped(target.reasoning, target.provider.name, target.model, request)
        for last in (False, True):
            try:
                if target.in_process:  # no bytes to parse here
                    local = cast(InProcessAdapter, target.adapter)
                    return await local.complete(sent, target.provider, target.model, deadline - time.monotonic())
                native = target.adapter.build_request(sent, target.provider, target.model, stream=False)
                reply = await self._pool.post(target.provider.name, native, deadline)
                if reply.status >= 400:
                    raise target.adapter.parse_error(reply.status, reply.headers, reply.body)
                return target.adapter.parse_response(reply.body)
            except ProviderError as error:
                if last or not support.refused(target.provider.name, target.model, sent, error):
                    raise
            sent = support.shaped(target.reasoning, target.provider.name, target.model, request)
        raise AssertionError("unreachable: the second attempt returns or raises")

    # Long by design: the per-read loop is inlined (no generator frame per upstream read: as a helper generator
    # it cost 12k instructions a stream request, +1.1 %, bench/README.md "run_loop as named steps"), and the
    # rescue of a stream past its commit point shares the walk's state with it.
    async def stream(self, targets: Sequence[ResolvedTarget], request: ModelRequest, attempts: list[Attempt],
                     retries: int, deadline: float, policy: StreamPolicy = DEFAULT_STREAM_POLICY,
                     ) -> AsyncIterator[list[StreamDelta] | Answer]:
        """Delta lists as they arrive, then the ``Answer``; past the commit point a failure is rescued
        (``policy.rescue``: routing/rescue.py) or ends the stream with ``StreamInterrupted``."""
        walk = Walk(self.health, self._policy, attempts, retries, deadline)
        # What reached the caller, batch by batch (kept only when a failure may be rescued).
        sent: list[list[StreamDelta]] | None = [] if policy.rescue else None
        rescue: Rescue | None = None
        cut: list[tuple[str, Usage]] = []
        idle_s = policy.idle_s
        try:
            for target in walk.tries(targets if self._all_healthy(targets) else await walk.plan(targets)):
                started = time.monotonic()
                head_seen = committed = flowing = False
                call = request
                if rescue is not None:
                    kind = target.prefill if target.metric_label not in self._no_prefill else None
                    call = rescue.request_for(request, kind)
                call = self.reasoning.shaped(target.reasoning, target.provider.name, target.model, call)
                parser: StreamParser | None = None
                # Characters of answer the caller has from this call: what a rescue keeps and sends again.
                bound = target.provider.limits.max_response_bytes
                kept = rescue.after_chars if rescue is not None else 0
                try:
                    response: ModelResponse | None = None
                    if target.in_process:
                        source = cast(InProcessAdapter, target.adapter).stream(call, target.provider, target.model,
                                                                               deadline - time.monotonic(),
                                                                               target.metric_label)
                        try:
                            while True:
                                within, why = wait_bound(started, time.monotonic(), flowing, target.first_token_s,
                                                         idle_s)
                                next_item = await next_within(source, within, why)
                                if next_item is None:
                                    break
                                if isinstance(next_item, ModelResponse):
                                    response = next_item
                                    continue
                                item = next_item
                                if item:
                                    flowing = True
                                if rescue is not None:
                                    item = rescue.pass_on(item)
                                if item:
                                    kept = kept_chars(item, kept, bound)  # no transport counts its bytes
                                    committed = True
                                    if sent is not None:
                                        sent.append(item)
                                    yield item
                                if time.monotonic() > deadline:
                                    raise DeadlineExceeded("the request deadline passed while the answer was "
                                                           "streaming")
                        finally:
                            await source.aclose()
                    else:
                        # Inlined rather than a nested generator: this loop runs once per upstream read.
                        # No asyncio.timeout around the yields (it would cancel the consumer, not this
                        # generator): the pool ends every wait by the deadline, a first token that does
                        # not come and a stall (``content_by``, ``idle_after``), and the deadline is
                        # checked between reads.
                        native = target.adapter.build_request(call, target.provider, target.model, stream=True)
                        async with self._pool.stream(target.provider.name, native, deadline) as upstream:
                            head_seen = True
                            if upstream.status >= 400:
                                raise target.adapter.parse_error(upstream.status, upstream.headers,
                                                                 await upstream.read())
                            if target.first_token_s is not None:
                                upstream.content_by(started + target.first_token_s,
                                                    f"no first token within {target.first_token_s:g} s")
                            parser = target.adapter.new_stream_parser(target.metric_label, target.model)
                            decoder = SSEDecoder()
                            async for chunk in upstream.chunks():
                                deltas: list[StreamDelta] = []
                                failure = None
                                try:
                                    for event in decoder.feed(chunk):
                                        deltas += parser.feed(event)
                                except ProviderError as error:  # what preceded it in this read was answer
                                    failure = error
                                if deltas:
                                    if not flowing:
                                        flowing = True
                                        upstream.idle_after(idle_s)
                                    if rescue is not None:
                                        deltas = rescue.pass_on(deltas)
                                        if deltas:  # the transport bounds one attempt; this, all of them
                                            kept = kept_chars(deltas, kept, bound)
                                    if deltas:
                                        committed = True
                                        if sent is not None:
                                            sent.append(deltas)
                                        yield deltas  # one list per upstream read: one write to the client
                                if failure is not None:
                                    raise failure
                                if time.monotonic() > deadline:
                                    raise DeadlineExceeded("the request deadline passed while the answer was "
                                                           "streaming")
                            deltas = []
                            for event in decoder.close():
                                deltas += parser.feed(event)
                            if deltas and rescue is not None:
                                deltas = rescue.pass_on(deltas)
                            if deltas:
                                committed = True
                                if sent is not None:
                                    sent.append(deltas)
                                yield deltas
                            response = parser.finish()
                    if response is None:
                        raise ProviderError(ErrorClass.CONNECTION, "upstream stream ended without a response")
                    if rescue is not None:
                        held = rescue.flush()  # a continuation's first text, held while it might repeat the prefill
                        if held:
                            committed = True
                            if sent is not None:
                                sent.append(held)
                            yield held
                        response = rescue.complete(response)
                except ProviderError as error:
                    # A refused reasoning_effort (before any output): the same target again at once, without it.
                    again = not committed and self.reasoning.refused(target.provider.name, target.model, call, error)
                    if (not again and rescue is not None and rescue.how == "prefill" and not committed
                            and error.error_class is ErrorClass.BAD_REQUEST):
                        self._learn_no_prefill(target, walk, attempts, error, started)
                        continue
                    if sent and isinstance(error, ResponseTooLarge):  # past the bound: never rescued
                        await walk.failed(target, error, started, head_seen, committed=True)
                    if sent:  # something reached the caller: this failure is rescued (``policy.rescue``)
                        if rescue is None or committed:
                            text, reasoning = sent_so_far(sent)
                            first = rescue or Rescue(error, target.label, target.metric_label, text, reasoning)
                            rescue = Rescue(first.original, first.original_target, first.original_metric, text,
                                            reasoning)
                        if parser is not None:
                            cut.append((target.label, await cut_attempt_usage(parser.usage_so_far(), call,
                                                                              parser.produced_so_far(),
                                                                              target.model)))
                    await walk.failed(target, error, started, head_seen, committed, rescue is not None, again)
                    continue
                except Diverged:
                    attempts.append(attempt(target.label, "diverged", 200, (time.monotonic() - started) * 1000))
                    walk.abandoned(target)
                    raise
                except BaseException:
                    walk.abandoned(target)
                    raise
                if walk.answered(target, started):
                    await self.health.record(target.metric_label, failed=False)
                if rescue is None:
                    yield Answer(target, response)
                    return
                report = rescue.report(target.label)
                attempts[-1]["rescued"] = report
                metrics.STREAM_RESCUES.inc(rescue.how)
                yield Answer(target, response, cut, report)
                return
            raise walk.exhausted()
        except (AllTargetsFailed, Diverged) as exc:
            if rescue is None:
                raise
            metrics.STREAM_RESCUES.inc("diverged" if isinstance(exc, Diverged) else "failed")
            metrics.STREAM_ABORTS.inc(rescue.original_metric, rescue.original.error_class.value)
            raise StreamInterrupted(rescue.original, rescue.original_target) from None

    def _learn_no_prefill(self, target: ResolvedTarget, walk: Walk, attempts: list[Attempt], error: ProviderError,
                          started: float) -> None:
        """A target answered a prefill with a 400: never sent one again (this process), restarted at once."""
        self._no_prefill.add(target.metric_label)
        log.info("%s refused an assistant prefill (HTTP %s): continuing streams there by restart from now on",
                 target.label, error.status)
        attempts.append(attempt(target.label, "prefill_rejected", error.status, (time.monotonic() - started) * 1000))
        walk.again()
