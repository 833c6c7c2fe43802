"""Rate limits in this process (``memory://``: one process is the whole deployment)."""

from __future__ import annotations

import math
import time

from gateway.store.limits.base import SETTLED, Decision, LimitScope, RateLimiter, Settled, decision


class MemoryRateLimiter(RateLimiter):
    """The same buckets in this process (``memory://``: one process is the whole deployment)."""

    def __init__(self) -> None:
        self._buckets: dict[tuple[str, str], list[float]] = {}  # scope -> [requests, tokens, updated]
        self._slots: dict[tuple[str, str], dict[str, float]] = {}  # scope -> {member: lease end}

    def _refill(self, scope: LimitScope, now: float) -> list[float]:
        bucket = self._buckets.get((scope.kind, scope.ident))
        if bucket is None:
            return [_level(scope.rpm, math.inf, 0.0), _level(scope.tpm, math.inf, 0.0), now]
        elapsed = max(0.0, now - bucket[2])
        return [_level(scope.rpm, bucket[0], elapsed), _level(scope.tpm, bucket[1], elapsed), now]

    def admit(self, tenant: str, scopes: tuple[LimitScope, ...], tokens: int, member: str,
              lease_s: float, now: float | None = None) -> Decision:
        """Always decided here, synchronously (no coroutine: this is the embedded deployment's request path)."""
        now = time.time() if now is None else now
        levels = [self._refill(scope, now) for scope in scopes]
        flat: list[float] = [x for level in levels for x in level[:2]]
        for index, (scope, level) in enumerate(zip(scopes, levels, strict=True)):
            if scope.rpm and level[0] < 1:
                return decision(scopes, [0, 0, index, (1 - level[0]) * 60 / scope.rpm, *flat])
            if scope.tpm and tokens > scope.tpm:
                return decision(scopes, [2, 1, index, 60.0, *flat])
            if scope.tpm and level[1] < tokens:
                return decision(scopes, [0, 1, index, (tokens - level[1]) * 60 / scope.tpm, *flat])
            if scope.max_concurrent:
                slots = self._slots.setdefault((scope.kind, scope.ident), {})
                if len(slots) >= scope.max_concurrent:  # only then can expired leases matter
                    for gone in [m for m, until in slots.items() if until <= now]:
                        del slots[gone]
                if len(slots) >= scope.max_concurrent:
                    return decision(scopes, [0, 2, index, 1.0, *flat])
        for scope, level in zip(scopes, levels, strict=True):
            if scope.rpm or scope.tpm:
                level[0] -= 1 if scope.rpm else 0
                level[1] -= tokens if scope.tpm else 0
                self._buckets[(scope.kind, scope.ident)] = level
            if scope.max_concurrent:
                self._slots[(scope.kind, scope.ident)][member] = now + lease_s
        return decision(scopes, [1, 0, 0, 0.0, *(x for level in levels for x in level[:2])])

    def settle(self, tenant: str, scopes: tuple[LimitScope, ...], extra_tokens: int, member: str,
               ticket: object = None) -> Settled:
        now = time.time()
        for scope in scopes:
            if scope.tpm and extra_tokens:
                level = self._refill(scope, now)
                level[1] = min(float(scope.tpm), level[1] - extra_tokens)  # a refund never passes the limit
                self._buckets[(scope.kind, scope.ident)] = level
            if scope.max_concurrent:
                self._slots.get((scope.kind, scope.ident), {}).pop(member, None)
        return SETTLED

    async def aclose(self) -> None:
        """Nothing to give back: the buckets are this process's own."""


def _level(limit: int, level: float, elapsed_s: float) -> float:
    """A bucket refilled for ``elapsed_s``; without a limit (0) it is unbounded, so that a limit an edit
    sets later starts with a full bucket, as a new key's does, not at a level capped to 0."""
    return min(limit, level + elapsed_s * limit / 60) if limit else math.inf
