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

``complete()`` and ``stream()`` run their attempts the same way and share one walk
(``_Walk``): it decides which target and attempt come next, keeps ``gateway.attempts``, the
retries and backoff, the circuit breaker and the error the call ends with. On the common
path (every circuit closed, the first attempt answers) it costs one small object and one
plain generator, no extra coroutine.
"""

# Long by design: the failover walk (targets, retries, deadline, the commit point of a stream,
# circuit health) is one algorithm; cutting it would spread its invariants over modules.

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from gateway.canonical import ModelRequest, ModelResponse, StreamDelta, Usage
from gateway.config.models_section import TargetConfig
from gateway.config.providers_section import ProviderConfig
from gateway.config.routing_section import RoutingConfig
from gateway.context.windows import known_window
from gateway.observability import metrics
from gateway.providers.base import TARGET_FAULTS, Adapter, ErrorClass, InProcessAdapter, ProviderError, StreamParser
from gateway.providers.registry import adapter_for
from gateway.routing.health import TargetHealth
from gateway.routing.reasoning import ReasoningSupport, takes_reasoning
from gateway.routing.rescue import (
    DEFAULT_STREAM_POLICY,
    Diverged,
    PrefillKind,
    Rescue,
    StreamPolicy,
    prefill_kind,
    sent_so_far,
)
from gateway.upstream.pool import UpstreamPool
from gateway.upstream.sse import SSEDecoder

log = logging.getLogger("loopgate.routing")
MIN_ATTEMPT_S = 0.05  # the least deadline an attempt may start with (module docstring)
P = TypeVar("P")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class ResolvedTarget:
    label: str
    provider: ProviderConfig
    model: str
    adapter: Adapter
    # The target's name in metrics, /readyz and circuit-breaker state: ``label`` for a configured
    # target, ``PROVIDER:*`` for a direct one (a caller's made-up model never becomes a new series).
    metric_label: str
    # The model's context window when the built-in table knows it (after a context overflow,
    # only a target with a larger window is worth asking).
    window: int | None = None
    # The adapter answers by itself (litellm, mock): called directly, not through the HTTP transport.
    in_process: bool = False
    # An embeddings target: the declared length of its vectors (routing/embeddings.py checks answers against it).
    dimensions: int | None = None
    # No content within this many seconds of the attempt's start: a failure before the commit point.
    first_token_s: float | None = None
    # How the target continues an assistant message for a stream rescue (routing/rescue.py); None: it cannot.
    prefill: PrefillKind | None = None
    # Whether it is sent ``reasoning_effort`` (routing/reasoning.py), before it says otherwise.
    reasoning: bool = True


Attempt = dict[str, Any]


def attempt(target: str, error_class: str | None, status: int | None, elapsed_ms: float) -> Attempt:
    """One upstream attempt as the ``gateway.attempts`` entry it becomes (built once, never converted)."""
    return {"target": target, "error_class": error_class, "status": status, "elapsed_ms": round(elapsed_ms, 2)}


@dataclass(slots=True)
class Answer:
    """The end of a model call: who answered and what, already in canonical form."""

    target: ResolvedTarget
    response: ModelResponse
    #: a rescued stream: the usage of the attempts that failed after the commit point, by target label
    cut: list[tuple[str, Usage]] | None = None
    #: a rescued stream: its ``rescued`` report (``after_chars``, ``how``, ``by``)
    rescued: dict[str, object] | None = None


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
    """The request deadline ended the walk; it is reported against the target that used the time up."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(ErrorClass.TIMEOUT, message, status)


class _Walk:
    """One model call's walk over a route's targets (see the module docstring for the rules).

    The caller runs each attempt and reports how it ended: ``answered``, ``failed`` (which
    returns to retry or move on, or raises the error the call ends with) or ``abandoned``
    (cancelled or closed mid-attempt). ``tries`` yields the target of every attempt to make.
    """

    __slots__ = ("_attempt_no", "_attempts", "_cutoff", "_health", "_last", "_next", "_policy", "_probes",
                 "_reshaped", "_retries", "_retry", "_tried")

    def __init__(self, health: TargetHealth, policy: RoutingConfig, attempts: list[Attempt], retries: int,
                 deadline: float) -> None:
        self._health = health
        self._policy = policy
        self._attempts = attempts
        self._retries = retries
        self._cutoff = deadline - MIN_ATTEMPT_S  # when no further attempt may start
        self._last: tuple[ProviderError, ResolvedTarget] | None = None
        self._next: ResolvedTarget | None = None
        self._probes: set[str] | None = None  # half-open probes this walk was let through
        self._tried = False
        self._retry = False
        self._attempt_no = 0
        self._reshaped = False  # the one immediate retry of a reshaped request (``failed``'s ``again``) is spent

    async def plan(self, targets: Sequence[ResolvedTarget]) -> Sequence[ResolvedTarget]:
        """Which targets to try when some circuit is not closed (open ones skipped, half-open probed)."""
        health = self._health
        admitted = []
        try:
            for target in targets:
                admission = await health.admit(target.metric_label)
                if admission == "refused":
                    self._attempts.append(attempt(target.label, "circuit_open", None, 0.0))
                    continue
                if admission == "probe":
                    if self._probes is None:
                        self._probes = set()
                    self._probes.add(target.metric_label)
                admitted.append(target)
        except BaseException:  # cancelled while asking the shared store: give back the probes already granted
            for target in admitted:
                self.abandoned(target)
            raise
        # Every circuit open: trying is still better than failing without asking anyone.
        return admitted or list(targets)

    def tries(self, order: Sequence[ResolvedTarget]) -> Iterator[ResolvedTarget]:
        """The target of each attempt, in order; a retry only when ``failed`` chose one."""
        last_index = len(order) - 1
        for index, target in enumerate(order):
            if not self._worth_trying(target):
                continue
            self._next = order[index + 1] if index < last_index else None
            self._attempt_no = 0
            while True:
                if time.monotonic() >= self._cutoff:
                    raise self._out_of_time(target)
                self._retry = False
                yield target
                if not self._retry:
                    break
                self._attempt_no += 1

    def _worth_trying(self, target: ResolvedTarget) -> bool:
        """After a context overflow, skip targets known to have no larger window than the one that overflowed."""
        last = self._last
        if last is not None and last[0].error_class is ErrorClass.CONTEXT_LENGTH:
            overflowed = last[1].window
            if overflowed is not None and target.window is not None and target.window <= overflowed:
                self._attempts.append(attempt(target.label, "window_too_small", None, 0.0))
                return False
        if self._tried and last is not None:
            metrics.FAILOVERS.inc(last[1].metric_label, last[0].error_class.value)
        self._tried = True
        return True

    def answered(self, target: ResolvedTarget, started: float) -> bool:
        """Record an answer; True when the circuit breaker must hear about it (after failures or a probe)."""
        self._attempts.append(attempt(target.label, None, 200, (time.monotonic() - started) * 1000))
        metrics.UPSTREAM_ATTEMPTS.inc(target.metric_label, "ok")
        return self._health.success_is_news(target.metric_label)

    def abandoned(self, target: ResolvedTarget) -> None:
        """The attempt was cancelled or closed (client gone): a probe it held gets no verdict and is released."""
        key = target.metric_label
        if self._probes is not None and key in self._probes:
            self._probes.discard(key)
            self._health.release_probe(key)

    async def failed(self, target: ResolvedTarget, error: ProviderError, started: float, head_seen: bool = False,
                     committed: bool = False, rescue: bool = False, again: bool = False) -> None:
        """Record a failed attempt, then return (``tries`` retries or moves on) or raise what the call ends with.

        ``head_seen``: the response head had arrived (a stream's in-stream error events carry no status).
        ``rescue``: a stream failed after its commit point is continued (``stream_rescue``): the walk goes on.
        ``again``: the target refused a field it will not be sent again (routing/reasoning.py): the same
        target at once, once per walk, without spending a configured retry."""
        now = time.monotonic()
        label = target.label
        key = target.metric_label  # metrics and circuit state: bounded even for direct routes
        error_class = error.error_class
        self._attempts.append(attempt(label, error_class.value, error.status, (now - started) * 1000))
        metrics.UPSTREAM_ERRORS.inc(key, error_class.value)
        if self._probes is not None:
            self._probes.discard(key)  # every branch below gives the probe its verdict
        health = self._health
        if committed and not rescue:
            metrics.STREAM_ABORTS.inc(key, error_class.value)
            await health.record(key, failed=error_class is not ErrorClass.BAD_REQUEST)
            raise StreamInterrupted(error, label)
        self._last = (error, target)
        if again and not self._reshaped:
            self._reshaped = self._retry = True
            self._attempt_no -= 1  # ``tries`` counts it; it is not one of the route's ``retries``
            await health.record(key, failed=False)
            return
        if error_class is ErrorClass.BAD_REQUEST:
            await health.record(key, failed=False)  # it answered; the request was wrong
            raise AllTargetsFailed(error, label) from None
        if error_class is ErrorClass.CONTEXT_LENGTH:
            await health.record(key, failed=False)
            return
        await health.record(key, failed=True)
        if now >= self._cutoff:
            raise self._out_of_time(target) from None
        if (self._attempt_no >= self._retries or not error.retryable or error_class in TARGET_FAULTS
                or (error_class is ErrorClass.TIMEOUT and not (error.responded or head_seen or error.status))
                or health.is_open(key)):
            return
        delay = self._backoff(error)
        if delay is None or not self._retry_fits(delay, now, started):
            return
        await asyncio.sleep(delay)
        # Another request may have opened the circuit during the backoff.
        self._retry = not health.is_open(key)

    def _backoff(self, error: ProviderError) -> float | None:
        """Exponential with jitter, at least ``Retry-After``; None when the provider asks for more than the cap."""
        policy = self._policy
        delay = min(policy.backoff_max_s, policy.backoff_base_s * (2 ** self._attempt_no))
        delay *= random.uniform(0.75, 1.25)
        if error.retry_after is not None:
            if error.retry_after > policy.retry_after_cap_s:
                return None
            delay = max(delay, error.retry_after)
        return delay

    def _retry_fits(self, delay: float, now: float, started: float) -> bool:
        """After the backoff, the deadline must still cover a retry as slow as the failed attempt plus
        connecting to the next target; on the last target only the backoff must fit."""
        after = now + delay
        following = self._next
        if following is not None:
            after += (now - started) + following.provider.timeouts.connect
        return after < self._cutoff

    def _out_of_time(self, target: ResolvedTarget) -> AllTargetsFailed:
        """The deadline passed: blame the target whose attempt used it up, never one about to be called."""
        last = self._last
        if last is None:
            return AllTargetsFailed(DeadlineExceeded("the request deadline left no time to call any upstream"),
                                    target.label)
        error, failed = last
        if error.error_class is not ErrorClass.TIMEOUT:
            error = DeadlineExceeded(f"the request deadline passed after it failed ({error.error_class.value}: "
                                     f"{error.message})", error.status)
        return AllTargetsFailed(error, failed.label)

    def again(self) -> None:
        """The same target once more, at once (a prefill it refused becomes a restart)."""
        self._retry = True

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
        walk = _Walk(self.health, self._policy, attempts, retries, deadline)
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
                reply = await self._pool.post(target.provider, native, deadline)
                if reply.status >= 400:
                    raise target.adapter.parse_error(reply.status, reply.headers, reply.body)
                return target.adapter.parse_response(reply.body)
            except ProviderError as error:
                if last or not support.refused(target.provider.name, target.model, sent, error):
                    raise
            sent = support.shaped(target.reasoning, target.provider.name, target.model, request)
        raise AssertionError("unreachable: the second attempt returns or raises")

    # Long by design: the per-read loop is inlined (no generator frame per upstream read), and the rescue
    # of a stream past its commit point shares the walk's state with it.
    async def stream(self, targets: Sequence[ResolvedTarget], request: ModelRequest, attempts: list[Attempt],
                     retries: int, deadline: float, policy: StreamPolicy = DEFAULT_STREAM_POLICY,
                     ) -> AsyncIterator[list[StreamDelta] | Answer]:
        """Delta lists as they arrive, then the ``Answer``; past the commit point a failure is rescued
        (``policy.rescue``: routing/rescue.py) or ends the stream with ``StreamInterrupted``."""
        walk = _Walk(self.health, self._policy, attempts, retries, deadline)
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
                try:
                    response: ModelResponse | None = None
                    if target.in_process:
                        source = cast(InProcessAdapter, target.adapter).stream(call, target.provider, target.model,
                                                                               deadline - time.monotonic(),
                                                                               target.metric_label)
                        try:
                            async for item in source:
                                if isinstance(item, ModelResponse):
                                    response = item
                                    continue
                                if rescue is not None:
                                    item = rescue.pass_on(item)
                                if item:
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
                        async with self._pool.stream(target.provider, native, deadline) as upstream:
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
                        response = rescue.complete(response)
                except ProviderError as error:
                    # A refused reasoning_effort (before any output): the same target again at once, without it.
                    again = not committed and self.reasoning.refused(target.provider.name, target.model, call, error)
                    if (not again and rescue is not None and rescue.how == "prefill" and not committed
                            and error.error_class is ErrorClass.BAD_REQUEST):
                        self._learn_no_prefill(target, walk, attempts, error, started)
                        continue
                    if sent:  # something reached the caller: this failure is rescued (``policy.rescue``)
                        if rescue is None or committed:
                            text, reasoning = sent_so_far(sent)
                            first = rescue or Rescue(error, target.label, target.metric_label, text, reasoning)
                            rescue = Rescue(first.original, first.original_target, first.original_metric, text,
                                            reasoning)
                        if parser is not None:
                            cut.append((target.label, parser.usage_so_far()))
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

    def _learn_no_prefill(self, target: ResolvedTarget, walk: _Walk, attempts: list[Attempt], error: ProviderError,
                          started: float) -> None:
        """A target answered a prefill with a 400: never sent one again (this process), restarted at once."""
        self._no_prefill.add(target.metric_label)
        log.info("%s refused an assistant prefill (HTTP %s): continuing streams there by restart from now on",
                 target.label, error.status)
        attempts.append(attempt(target.label, "prefill_rejected", error.status, (time.monotonic() - started) * 1000))
        walk.again()
