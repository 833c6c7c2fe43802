"""One model call's walk over a route's targets, and the outcomes it ends with.

The rules the walk applies (which errors retry, fail over or end the call; how the request
deadline is spent; the commit point of a stream) are described in ``router.py``, which drives
it: the router runs each attempt and reports how it ended, the walk decides what comes next
and keeps ``gateway.attempts``, the retries and backoff, the circuit breaker and the error the
call ends with. On the common path (every circuit closed, the first attempt answers) it costs
one small object and one plain generator, no extra coroutine.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.canonical import ModelResponse, Usage
from gateway.config.providers_section import ProviderConfig
from gateway.config.routing_section import RoutingConfig
from gateway.observability import metrics
from gateway.providers.base import TARGET_FAULTS, Adapter, ErrorClass, ProviderError
from gateway.routing.health import TargetHealth
from gateway.routing.rescue import PrefillKind

MIN_ATTEMPT_S = 0.05  # the least deadline an attempt may start with (router.py's docstring)


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


class Walk:
    """One model call's walk over a route's targets (see the module docstring for the rules).

    The caller runs each attempt and reports how it ended: ``answered``, ``failed`` (which
    returns to retry or move on, or raises the error the call ends with) or ``abandoned``
    (cancelled or closed mid-attempt). ``tries`` yields the target of every attempt to make.
    """

    __slots__ = ("_attempt_no", "_attempts", "_cutoff", "_health", "_last", "_next", "_policy", "_probes",
                 "_reshaped", "_retries", "_retry", "_skipped", "_tried")

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
        # open circuits skipped just before a target (by its label): a failover each once that target is tried
        self._skipped: dict[str, list[str]] | None = None
        self._tried = False
        self._retry = False
        self._attempt_no = 0
        self._reshaped = False  # the one immediate retry of a reshaped request (``failed``'s ``again``) is spent

    async def plan(self, targets: Sequence[ResolvedTarget]) -> Sequence[ResolvedTarget]:
        """Which targets to try when some circuit is not closed (open ones skipped, half-open probed)."""
        health = self._health
        admitted = []
        refused: list[str] = []
        try:
            for target in targets:
                admission = await health.admit(target.metric_label)
                if admission == "refused":
                    self._attempts.append(attempt(target.label, "circuit_open", None, 0.0))
                    refused.append(target.metric_label)
                    continue
                if refused:
                    if self._skipped is None:
                        self._skipped = {}
                    self._skipped[target.label], refused = refused, []
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
        if self._skipped is not None and (skipped := self._skipped.pop(target.label, None)):
            for label in skipped:  # moved past an open circuit: as much a failover as moving past an error
                metrics.FAILOVERS.inc(label, "circuit_open")
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
