"""A clock for the circuit breaker: its cooldown passes when a test says so, however busy the machine."""

from __future__ import annotations

import pytest

import gateway.routing.health as health_module


class HealthClock:
    """Stands in for the ``time`` module inside ``gateway.routing.health`` (the only clock it reads)."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def time(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def health_clock(monkeypatch: pytest.MonkeyPatch) -> HealthClock:
    clock = HealthClock()
    monkeypatch.setattr(health_module, "time", clock)
    return clock
