"""Leased allowance: the part of a Redis bucket one process may spend without asking Redis.

Far from a limit, a script call that takes one request also takes a slice for later (at most
``SLICE_SHARE`` of rpm/tpm, ``SLOT_SHARE`` of max_concurrent, and never more than ``LEVEL_SHARE``
of what is left, so other replicas find most of the bucket still there); the next requests of
this process spend the slice locally, and only the one that finds it empty asks Redis again.
Near a limit the slices shrink to nothing and every request is one exact script call, as without
leasing. Small limits never lease (``leases_*``): rpm below 100, tpm below 10,000, max_concurrent
below 40 stay exact per request.

Requests that find the slice empty while this process already asks for a new one wait for that
call once (one round trip serves them all) before they ask for themselves.

What a process holds and has not used is given back after ``IDLE_S`` without local admissions
(and at shutdown), so another replica may be refused for at most that long while allowance it
could use sits here. The correction of a token estimate by the reported usage is paid from the
unspent slice; what the slice cannot pay is taken in Redis by the settle's script call, which the
request awaits before its answer is given: another replica's next admission sees every reported
token. (A give-back, usage below the estimate, collects locally and reaches Redis with the next
script call of that scope or within ``CORRECTION_WINDOW_S``.) When a settle finds the bucket below
zero, the unspent slice is given back too. So what a process admits without seeing another
replica's spending is at most its one slice (``SLICE_SHARE`` of tpm, and at most ``LEVEL_SHARE``
of the level it was leased from).
Leased concurrency slots are members of the scope's slot set like per-request ones, with a
lease of ``SLOT_LEASE_S`` that a heartbeat renews while this process lives: a dead replica's
slots free within that time.
"""

from __future__ import annotations

import asyncio
import math
import time

from gateway.store.limits.base import LimitScope

#: a slice of requests or tokens is at most this share of rpm / tpm
SLICE_SHARE = 0.02
#: a slice of concurrency slots is at most this share of max_concurrent, and at most MAX_SLOTS_SLICE
#: (a process needs only as many as it has requests in flight: it asks again when it has more)
SLOT_SHARE = 0.05
MAX_SLOTS_SLICE = 32
#: and never more than this share of what the bucket (or the free slots) held after the request
LEVEL_SHARE = 0.25
#: no local admission for this long: unused allowance goes back (checked every ``TICK_S``)
IDLE_S = 0.75
#: a token correction waits at most this long for a script call before one is made for it
CORRECTION_WINDOW_S = 0.75
#: the keeper's period: give-back happens within IDLE_S + TICK_S (1 s), corrections within 1 s
TICK_S = 0.25
#: a leased concurrency slot ends this long after its last renewal (a dead replica's frees then)
SLOT_LEASE_S = 15.0
#: renewed when less than this is left (so every ~5 s while held)
SLOT_RENEW_S = 10.0
#: smallest slices worth having: below them a scope stays exact per request
MIN_REQUESTS_SLICE = 2
MIN_TOKENS_SLICE = 200
MIN_SLOTS_SLICE = 2


class Lease:
    """What this process holds of one scope's limits in Redis, and what it used of it."""

    __slots__ = ("asking", "debt", "debt_since", "has_c", "has_r", "has_t", "in_flight", "keys", "last_used",
                 "leasing", "level_r", "level_t", "next_slot", "renew_at", "requests", "retired", "scope",
                 "slot_prefix", "slots", "tokens", "want_c", "want_r", "want_t")

    def __init__(self, scope: LimitScope, keys: list[str], slot_prefix: str) -> None:
        self.scope = scope
        self.keys = keys
        self.has_r, self.has_t, self.has_c = scope.rpm > 0, scope.tpm > 0, scope.max_concurrent > 0
        want_r = math.floor(scope.rpm * SLICE_SHARE)
        want_t = math.floor(scope.tpm * SLICE_SHARE)
        want_c = min(MAX_SLOTS_SLICE, math.floor(scope.max_concurrent * SLOT_SHARE))
        #: the largest slice of each kind (0: that limit is exact per request)
        self.want_r = want_r if want_r >= MIN_REQUESTS_SLICE else 0
        self.want_t = want_t if want_t >= MIN_TOKENS_SLICE else 0
        self.want_c = want_c if want_c >= MIN_SLOTS_SLICE else 0
        self.requests = 0.0  # unspent leased requests
        self.tokens = 0.0  # unspent leased tokens
        #: Redis's levels after the last script call of this scope (for the headers)
        self.level_r = float(scope.rpm)
        self.level_t = float(scope.tpm)
        self.debt = 0  # token corrections not yet sent (negative: to give back)
        self.debt_since = 0.0
        self.slots: list[str] = []  # leased slot members held
        self.in_flight = 0  # requests on leased slots
        self.slot_prefix = slot_prefix
        self.next_slot = 0
        self.renew_at = 0.0
        self.last_used = time.monotonic()
        #: a call asking for a slice is on its way (done when it returned): others wait for it once
        self.asking: asyncio.Future[None] | None = None
        #: this scope leases at all (else every request is exact and nobody waits for anybody)
        self.leasing = bool(self.want_r or self.want_t or self.want_c)
        #: forgotten by its limiter (idle, holding nothing): whoever kept it asks the limiter again
        self.retired = False

    def covers(self, tokens: int) -> bool:
        """The unspent slice holds one more request of ``tokens`` (and a free leased slot, where limited)."""
        return not ((self.has_r and self.requests < 1) or (self.has_t and self.tokens < tokens)
                    or (self.has_c and self.in_flight >= len(self.slots)))

    def take_if_covered(self, tokens: int, now: float) -> bool:
        """``covers`` and ``take`` in one call (the request path's); False, nothing taken, when it does not cover."""
        if ((self.has_r and self.requests < 1) or (self.has_t and self.tokens < tokens)
                or (self.has_c and self.in_flight >= len(self.slots))):
            return False
        if self.has_r:
            self.requests -= 1
        if self.has_t:
            self.tokens -= tokens
        if self.has_c:
            self.in_flight += 1
        self.last_used = now
        return True

    def settle_taken(self, extra_tokens: int, slot_leased: bool = True) -> int | None:
        """The end of a request admitted here: what its token correction leaves for the store, now.

        A correction above the estimate is paid from the unspent slice first (tokens Redis already
        counts as taken); what the slice cannot pay is returned, for the settle's script call to take
        before the answer is given, so another replica's next admission sees it. A give-back (a
        negative correction) waits here (``CORRECTION_WINDOW_S``): holding it back only errs on the
        strict side. An unleased tpm's correction is returned whole. None: nothing for the store (and
        the slot, if leased, is free again here); else the tokens to take there (0: only a
        per-request slot to free, ``slot_leased`` False).
        """
        remote: int | None = None
        if extra_tokens and self.has_t:
            if not self.want_t:
                remote = extra_tokens
            elif extra_tokens < 0:
                if not self.debt:
                    self.debt_since = time.monotonic()
                self.debt += extra_tokens
            elif extra_tokens <= self.tokens:  # the common case far from the limit: the slice pays it all
                self.tokens -= extra_tokens
            else:
                paid = int(self.tokens) if self.tokens >= 1 else 0
                self.tokens -= paid
                remote = extra_tokens - paid
        if self.has_c:
            if not slot_leased:
                remote = remote or 0
            elif self.in_flight > 0:
                self.in_flight -= 1  # a leased slot: free again here, Redis still counts it as ours
        return remote

    def in_debt(self, level_t: float) -> None:
        """The store says the bucket is below zero (another replica, or this one, spent past it): the
        unspent slice goes back with the next script call, so this process admits nothing more on
        tokens the bucket no longer has."""
        self.level_t = level_t
        if self.tokens >= 1:
            if not self.debt:
                self.debt_since = time.monotonic()
            self.debt -= int(self.tokens)
            self.tokens -= int(self.tokens)

    def take(self, tokens: int, now: float) -> None:
        """Spend one request of ``tokens`` from the slice once ``covers`` said it may (every lease of a
        request is checked before any is taken from), at ``now`` (monotonic)."""
        self.take_if_covered(tokens, now)

    def held(self) -> bool:
        """Anything here that Redis counts as taken, or that Redis has not heard of yet."""
        return bool(self.requests >= 1 or self.tokens >= 1 or self.slots or self.debt or self.in_flight)

    def remaining(self) -> tuple[float, float]:
        """The levels the headers show: Redis's at the last call plus the unspent slice (approximate).

        Redis refills its bucket up to the limit while this process still holds a slice taken from
        it, so the sum can pass the limit: it is capped there (a remaining count above its limit
        says nothing true).
        """
        scope = self.scope
        return min(scope.rpm, self.level_r + self.requests), min(scope.tpm, self.level_t + self.tokens)
