"""Shared target health: the circuit breaker's state, shared by every replica."""

from __future__ import annotations

from abc import ABC, abstractmethod


class HealthStore(ABC):
    """Consecutive failures and open circuits per target: part of every ``Store``."""

    @abstractmethod
    async def health_report(self, target: str, failed: bool, threshold: int, cooldown_s: float) -> float | None:
        """Record one outcome for ``target``; returns the open-until timestamp when the circuit is open.

        A success resets the consecutive-failure count and closes the circuit (returns None). A
        failure increments it; when it reaches ``threshold`` the circuit opens until
        ``now + cooldown_s`` (an already open circuit is not extended). The count survives the
        cooldown for a while, so the first failure after it (the half-open probe) re-opens at once.
        """

    @abstractmethod
    async def health_open_until(self, target: str) -> float | None:
        """The timestamp until which ``target``'s circuit is open, or None when it is closed."""


def failure_window(cooldown_s: float) -> float:
    """How long a consecutive-failure count survives without a new failure.

    Longer than the cooldown, so the first failure after it (the half-open probe) re-opens the
    circuit at once; bounded, so failures days apart do not add up to an outage.
    """
    return max(60.0, 2.0 * cooldown_s)
