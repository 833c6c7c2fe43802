"""Rate limits on the request path: at most one store call before the loop, one after it (only when needed).

A key without limits, of a tenant without limits, costs one attribute test and one dict lookup:
no store call, no headers. Otherwise ``admit`` takes one request, a token estimate (request
body bytes / 4: no tokenizer on the hot path) and a concurrency slot in one atomic step, and
the ``Admission`` it returns settles afterwards: the reported usage minus the estimate is taken
(or given back) and the slot freed, again in one step. Far from a limit on Redis both steps are
usually local (the limiter's leased allowance, gateway/store/limits/lease.py).

A store outage fails open: the request runs unlimited, because a limiter that takes every caller
down with it protects nothing. A store that is down answers at once; one that is hung (connections
open, no answers) is given up on after ``store.fail_open_ms`` (default 100 ms) for the admission
and again for the settling. Each fail-open is counted in
``loopgate_store_fail_open_total{domain="limits"}`` and logged once per burst
(gateway/observability/fail_open.py). Budgets are separate (their own module) and decide for
themselves.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import secrets
from collections.abc import AsyncIterator, Awaitable, Coroutine
from typing import Any, NamedTuple

from gateway.canonical import Usage
from gateway.config.model import ApiKey, Config
from gateway.errors import GatewayError
from gateway.loop.events import Finished, LoopEvent
from gateway.observability.fail_open import LIMITS
from gateway.store.errors import StoreUnavailable
from gateway.store.limits.base import Decision, LimitScope, RateLimiter, Settled, reset_seconds

log = logging.getLogger("loopgate.limits")

#: bytes of request body per estimated prompt token (a cheap upper-ish guess, corrected afterwards)
BYTES_PER_TOKEN = 4
_SCOPE_CACHE_LIMIT = 20_000


class RateLimits:
    """The limiter and the tenants' scopes, built once at start-up."""

    def __init__(self, limiter: RateLimiter, config: Config) -> None:
        self.limiter = limiter
        self.lease_s = config.routing.request_timeout_s + 60.0
        #: the longest a limited request waits for the store before it fails open (``store.fail_open_ms``)
        self.fail_open_s = config.store.fail_open_ms / 1000
        self.tenants = {name: LimitScope("tenant", name, t.rpm or 0, t.tpm or 0, t.max_concurrent or 0)
                        for name, t in config.tenants.items() if t.limits.any}
        self.runs_per_key = config.background.max_runs_per_key
        self.runs_per_tenant = config.background.max_runs_per_tenant
        # Per key id: the key object it was built for (a reload or an edit makes a new one), its
        # scopes and whether its end is settled: what ``admit`` needs, in one look-up.
        self._plans: dict[str, KeyPlan] = {}
        # Concurrency slot ids: unique across replicas (random prefix) without a syscall per request.
        self._member_prefix = secrets.token_hex(6) + ":"
        self._members = itertools.count()

    def scopes(self, key: ApiKey) -> tuple[tuple[LimitScope, ...], bool]:
        """The scopes limiting ``key`` and whether its end must be settled (tpm or max_concurrent)."""
        plan = self._plans.get(key.id)
        if plan is None or plan.key is not key:
            plan = self._plan(key)
        return plan.scopes, plan.settle

    def admit(self, key: ApiKey, body_bytes: int, tokens: int | None = None) -> Admitted:
        """The admission of a request of ``body_bytes`` by ``key`` (None: nothing limits it), or a 429.

        ``tokens``: the request's input tokens when its surface counted them (an embeddings request),
        the estimate then; else ``body_bytes / BYTES_PER_TOKEN``.

        Decided at once where the limiter can (memory, an allowance leased to this process): then
        the admission itself, with no coroutine made. Where the store must decide, a coroutine to
        await for it; nothing is taken until it runs.
        """
        if key.rpm is None and key.tpm is None and key.max_concurrent is None and key.tenant not in self.tenants:
            return None
        plan = self._plans.get(key.id)
        if plan is None or plan.key is not key:
            plan = self._plan(key)
        estimate = body_bytes // BYTES_PER_TOKEN + 1 if tokens is None else tokens
        member = self._member_prefix + str(next(self._members))
        verdict = self.limiter.admit(key.tenant, plan.scopes, estimate, member, self.lease_s)
        if not isinstance(verdict, Decision):
            return self._decided_by_store(verdict, key, plan, estimate, member)
        if verdict.allowed:  # the common case, without a call more
            return Admission(self.limiter, key.tenant, plan.scopes, estimate, member,
                             _headers(verdict.limit_r, verdict.level_r, verdict.limit_t, verdict.level_t),
                             plan.settle, verdict.ticket)
        raise refusal(verdict, estimate)

    async def _decided_by_store(self, verdict: Awaitable[Decision], key: ApiKey, plan: KeyPlan, estimate: int,
                                member: str) -> Admission | None:
        """The store's decision (a store outage fails open: None)."""
        try:
            async with asyncio.timeout(self.fail_open_s):
                decision = await verdict
        except (StoreUnavailable, TimeoutError) as exc:
            LIMITS.failed(exc if str(exc) else f"no answer within {self.fail_open_s}s")
            return None
        if LIMITS.in_burst:
            LIMITS.answered()
        return self._admitted(key, plan.scopes, plan.settle, estimate, member, decision)

    def _plan(self, key: ApiKey) -> KeyPlan:
        tenant = self.tenants.get(key.tenant)
        if key.rpm is None and key.tpm is None and key.max_concurrent is None:
            scopes: tuple[LimitScope, ...] = () if tenant is None else (tenant,)
        else:
            own = LimitScope("key", key.id, key.rpm or 0, key.tpm or 0, key.max_concurrent or 0)
            scopes = (own,) if tenant is None else (own, tenant)
        settle = any(scope.tpm or scope.max_concurrent for scope in scopes)
        if len(self._plans) >= _SCOPE_CACHE_LIMIT:
            self._plans.clear()  # keys come and go with reloads; never let old ones pile up
        plan = self._plans[key.id] = KeyPlan(key, scopes, settle)
        return plan

    async def admit_background(self, key: ApiKey) -> Admission | None:
        """A background run's slot under ``background.max_runs_per_key`` / ``max_runs_per_tenant``.

        The slots are the limiter's concurrency slots (so the caps hold across every replica
        sharing the store), in scopes of their own: ``bg:`` and ``bgt:`` idents never collide
        with a key id. None when neither cap is set; 429 when one is reached. Settling the
        admission (with no usage: these scopes count no tokens) frees the slot.
        """
        scopes: tuple[LimitScope, ...] = ()
        if self.runs_per_key:
            scopes = (LimitScope("key", "bg:" + key.id, 0, 0, self.runs_per_key),)
        if self.runs_per_tenant:
            scopes += (LimitScope("key", "bgt:" + key.tenant, 0, 0, self.runs_per_tenant),)
        if not scopes:
            return None
        member = self._member_prefix + str(next(self._members))
        try:
            async with asyncio.timeout(self.fail_open_s):
                verdict = await self.limiter.admit(key.tenant, scopes, 0, member, self.lease_s)
        except (StoreUnavailable, TimeoutError) as exc:
            LIMITS.failed(exc if str(exc) else f"no answer within {self.fail_open_s}s")
            return None
        if not verdict.allowed:
            # Both caps are one atomic take; the verdict does not say which of them refused.
            caps = [f"background.max_runs_per_key: {self.runs_per_key}"] if self.runs_per_key else []
            if self.runs_per_tenant:
                caps.append(f"background.max_runs_per_tenant: {self.runs_per_tenant}")
            raise GatewayError(429, f"too many background responses of this key or its tenant are running "
                               f"({', '.join(caps)}); retry when one ends", "rate_limit_error",
                               code="too_many_background_responses", headers={"retry-after": "1"})
        return Admission(self.limiter, key.tenant, scopes, 0, member, [], True, verdict.ticket)

    def _admitted(self, key: ApiKey, scopes: tuple[LimitScope, ...], settle: bool, estimate: int, member: str,
                  verdict: Decision) -> Admission:
        if not verdict.allowed:
            raise refusal(verdict, estimate)
        return Admission(self.limiter, key.tenant, scopes, estimate, member, raw_headers(verdict), settle,
                         verdict.ticket)


#: ``RateLimits``'s per-key plan: the key, its scopes, whether its end is settled.
class KeyPlan(NamedTuple):
    """What limits one key, looked up once per key and kept: its scopes and whether its end is settled."""

    key: ApiKey
    scopes: tuple[LimitScope, ...]
    #: tpm or max_concurrent: the end must be reported (the token count corrected, the slot freed)
    settle: bool


class Admission:
    """A request the limits let through: its headers, and the settling step for its end."""

    __slots__ = ("_done", "_estimate", "_limiter", "_member", "_scopes", "_tenant", "_ticket", "headers",
                 "needs_settling")

    def __init__(self, limiter: RateLimiter, tenant: str, scopes: tuple[LimitScope, ...], estimate: int,
                 member: str, response_headers: list[tuple[bytes, bytes]], settle: bool,
                 ticket: object = None) -> None:
        self._limiter = limiter
        self._tenant = tenant
        self._scopes = scopes
        self._estimate = estimate
        self._member = member
        self._ticket = ticket
        self.headers = response_headers
        #: tpm or max_concurrent: the end must be reported (a second store call)
        self.needs_settling = settle
        self._done = not settle

    def finish(self, usage: Usage | None) -> Coroutine[Any, Any, None] | None:
        """Correct the token estimate by ``usage`` (None: the request failed, give it back) and free the slot.

        None when the limiter settled it at once (memory, a leased allowance); else the coroutine to
        await for the store. Settles once: later calls do nothing.
        """
        if self._done:
            return None
        self._done = True
        extra = (0 if usage is None else usage.prompt_tokens + usage.completion_tokens) - self._estimate
        try:
            remote = self._limiter.settle(self._tenant, self._scopes, extra, self._member, self._ticket)
        except StoreUnavailable as exc:
            LIMITS.failed(exc)
            return None
        return None if isinstance(remote, Settled) else self._settle_remote(remote)

    async def _settle_remote(self, remote: Coroutine[Any, Any, None]) -> None:
        try:
            await remote  # bounded by ``store.fail_open_ms`` (the limiter's script calls fail open)
        except StoreUnavailable as exc:
            LIMITS.failed(exc)  # on an outage the slot's lease frees it, and the estimate stands as the count

    async def observe(self, events: AsyncIterator[LoopEvent]) -> AsyncIterator[LoopEvent]:
        """``events`` passed through; at their end (or on close) the request is settled with its usage."""
        usage: Usage | None = None
        try:
            async for event in events:
                if isinstance(event, Finished):
                    usage = event.result.usage
                yield event
        finally:
            await events.aclose()  # type: ignore[attr-defined]
            pending = self.finish(usage)
            if pending is not None:
                await pending


def _duration(seconds: float) -> str:
    """OpenAI's reset format: ``1s``, ``6m0s``, ``250ms``."""
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms" if seconds > 0 else "0ms"
    minutes, rest = divmod(math.ceil(seconds), 60)
    return f"{minutes}m{rest}s" if minutes else f"{rest}s"


# A bucket refills within a minute: the reset of every header but a bucket in debt is one of these.
_RESET_MS = tuple(b"%dms" % ms for ms in range(1001))  # ceil(seconds * 1000) for 0 < seconds < 1
_RESET_S = tuple(_duration(float(s)).encode() for s in range(61))


def _reset_of(limit: int, level: float) -> bytes:
    """How long a bucket at ``level`` takes to be full again (it refills at ``limit`` a minute), as OpenAI writes it."""
    if level >= limit:
        return b"0ms"
    seconds = reset_seconds(limit, level)
    if seconds < 1:
        return _RESET_MS[math.ceil(seconds * 1000)]
    whole = math.ceil(seconds)
    return _RESET_S[whole] if whole <= 60 else _duration(seconds).encode()


def headers(verdict: Decision) -> dict[str, str]:
    return {name.decode("latin-1"): value.decode("latin-1") for name, value in raw_headers(verdict)}


def raw_headers(verdict: Decision) -> list[tuple[bytes, bytes]]:
    """The ``x-ratelimit-*`` headers, encoded (every limited response carries them)."""
    return _headers(verdict.limit_r, verdict.level_r, verdict.limit_t, verdict.level_t)


def _headers(limit_r: int, level_r: float, limit_t: int, level_t: float) -> list[tuple[bytes, bytes]]:
    """The headers of the tightest buckets' levels (a limit of 0: that kind is not limited).

    A level is shown clamped to its limit: whatever a limiter reports, ``remaining`` never says more
    than the limit.
    """
    if level_r > limit_r:
        level_r = limit_r
    if level_t > limit_t:
        level_t = limit_t
    if limit_r and limit_t:  # the common case in one list
        return [(b"x-ratelimit-limit-requests", b"%d" % limit_r),
                (b"x-ratelimit-remaining-requests", b"%d" % level_r if level_r > 0 else b"0"),
                (b"x-ratelimit-reset-requests", _reset_of(limit_r, level_r)),
                (b"x-ratelimit-limit-tokens", b"%d" % limit_t),
                (b"x-ratelimit-remaining-tokens", b"%d" % level_t if level_t > 0 else b"0"),
                (b"x-ratelimit-reset-tokens", _reset_of(limit_t, level_t))]
    if limit_r:
        return [(b"x-ratelimit-limit-requests", b"%d" % limit_r),
                (b"x-ratelimit-remaining-requests", b"%d" % level_r if level_r > 0 else b"0"),
                (b"x-ratelimit-reset-requests", _reset_of(limit_r, level_r))]
    if limit_t:
        return [(b"x-ratelimit-limit-tokens", b"%d" % limit_t),
                (b"x-ratelimit-remaining-tokens", b"%d" % level_t if level_t > 0 else b"0"),
                (b"x-ratelimit-reset-tokens", _reset_of(limit_t, level_t))]
    return []


def refusal(verdict: Decision, estimate: int) -> GatewayError:
    """The 429 for a refused request, with ``Retry-After`` and the limit headers."""
    out = headers(verdict)
    scope = verdict.scope or "key"
    if verdict.kind == "concurrency":
        out["retry-after"] = "1"
        message = f"Rate limit reached: too many concurrent requests for this {scope}. Retry when one finishes."
    elif verdict.too_large:
        out["retry-after"] = "60"
        window = verdict.tokens
        message = (f"Request too large: about {estimate} tokens, above this {scope}'s limit of "
                   f"{window.limit if window else '?'} tokens per minute.")
    else:
        out["retry-after"] = str(max(1, math.ceil(verdict.retry_after_s)))
        window = verdict.requests if verdict.kind == "requests" else verdict.tokens
        unit = "requests" if verdict.kind == "requests" else "tokens"
        message = (f"Rate limit reached for {unit} per minute on this {scope}: limit {window.limit if window else '?'}"
                   f". Please try again in {_duration(verdict.retry_after_s)}.")
    return GatewayError(429, message, "tokens" if verdict.kind == "tokens" else "requests",
                        code="rate_limit_exceeded", headers=out)


#: what :meth:`RateLimits.admit` gives: the admission (None: nothing limits the key) when it was
#: decided at once, else the coroutine that asks the store for it
Admitted = Admission | None | Coroutine[Any, Any, Admission | None]
