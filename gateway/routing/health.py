"""Per-target circuit breaker, so a dead provider costs one timeout rather than one per request.

State is kept in process for the hot path. With a shared store (Redis) failures are also
reported there and the shared "open until" is read back at most once a second per target,
so every replica skips a target that any replica found dead. Successes are written to the
shared store only when they change something (after failures or a probe), keeping the
common path free of store round trips.

A half-open circuit lets exactly one probe through. The probe always ends in a verdict or a
release: an answer closes the circuit, a failure (a timeout at the request deadline included)
re-opens it, and a probe abandoned without a verdict (the request cancelled, the client gone)
is released, so the next request probes again instead of the target staying skipped for good.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Literal, Protocol

log = logging.getLogger("loopgate.health")


# What ``admit`` lets through: a closed circuit, the one half-open probe, or nothing.
Admission = Literal["closed", "probe", "refused"]


class SharedHealth(Protocol):
    async def health_report(self, target: str, failed: bool, threshold: int, cooldown_s: float) -> float | None: ...

    async def health_open_until(self, target: str) -> float | None: ...


@dataclass(slots=True)
class _State:
    failures: int = 0
    open_until: float = 0.0
    probing: bool = False
    shared_checked_at: float = 0.0


class TargetHealth:
    SHARED_REFRESH_S = 1.0

    def __init__(self, failures_to_open: int, cooldown_s: float, shared: SharedHealth | None = None) -> None:
        self._threshold = failures_to_open
        self._cooldown = cooldown_s
        self._shared = shared
        self._states: dict[str, _State] = {}

    def _state(self, target: str) -> _State:
        state = self._states.get(target)
        if state is None:
            state = self._states[target] = _State()
        return state

    def state(self, target: str) -> str:
        state = self._state(target)
        now = time.time()
        if state.open_until > now:
            return "open"
        if state.open_until and (state.probing or now >= state.open_until):
            return "half_open"
        return "closed"

    def healthy(self, target: str) -> bool:
        """The common case, decided without awaiting: a closed circuit and no shared state to refresh.

        With shared health (Redis) that is a closed circuit whose shared state was read less than
        ``SHARED_REFRESH_S`` ago: ``admit`` would answer "closed" without a store call, so the
        walk needs no coroutine per target; once the refresh is due, ``admit`` reads the store.
        """
        state = self._states.get(target)
        if state is None:
            return self._shared is None  # shared: the first request reads the shared state
        if state.open_until:
            return False
        return self._shared is None or time.time() - state.shared_checked_at < self.SHARED_REFRESH_S

    def is_open(self, target: str) -> bool:
        """Whether requests must skip ``target`` now (checked before a retry, so none goes to a just-opened circuit)."""
        state = self._states.get(target)
        return state is not None and state.open_until > time.time()

    async def admit(self, target: str) -> Admission:
        """May a request go to ``target`` now? After the cooldown exactly one probe is let through."""
        state = self._state(target)
        now = time.time()
        if self._shared is not None and now - state.shared_checked_at >= self.SHARED_REFRESH_S:
            state.shared_checked_at = now
            try:
                shared_until = await self._shared.health_open_until(target)
            except Exception as exc:  # a store outage must not take routing down
                log.warning("shared target health unavailable: %s", exc)
                shared_until = None
            if shared_until and shared_until > state.open_until:
                state.open_until = shared_until
        if not state.open_until:
            return "closed"
        if now < state.open_until or state.probing:
            return "refused"
        state.probing = True
        return "probe"

    def release_probe(self, target: str) -> None:
        """The probe ended without a verdict (cancelled, the client left): let the next request probe."""
        state = self._states.get(target)
        if state is not None:
            state.probing = False

    def success_is_news(self, target: str) -> bool:
        """Whether a success changes anything (after failures or a probe); False on the common path."""
        state = self._states.get(target)
        return state is not None and bool(state.failures or state.open_until or state.probing)

    async def record(self, target: str, failed: bool) -> None:
        state = self._state(target)
        if not failed:
            changed = state.failures or state.open_until
            state.failures, state.open_until, state.probing = 0, 0.0, False
            if changed and self._shared is not None:
                await self._report(target, False)
            return
        state.failures += 1
        if state.probing or state.failures >= self._threshold:
            state.open_until = time.time() + self._cooldown
            state.probing = False
            log.warning("circuit open for %s for %.1fs after %d failures", target, self._cooldown, state.failures)
        if self._shared is not None:
            shared_until = await self._report(target, True)
            if shared_until and shared_until > state.open_until:
                state.open_until = shared_until

    async def _report(self, target: str, failed: bool) -> float | None:
        try:
            return await self._shared.health_report(target, failed, self._threshold, self._cooldown)  # type: ignore[union-attr]
        except Exception as exc:
            log.warning("could not share target health: %s", exc)
            return None

    def snapshot(self) -> dict[str, str]:
        return {target: self.state(target) for target in self._states}

    def details(self) -> dict[str, dict[str, Any]]:
        """Each known target's state, open-until time and consecutive failures (for the console)."""
        return {target: {"state": self.state(target), "open_until": state.open_until or None,
                         "opened_at": state.open_until - self._cooldown if state.open_until else None,
                         "failures": state.failures}
                for target, state in list(self._states.items())}
