"""The ``routing`` section: the failover policy every route shares (backoff, circuit breaker, request deadline)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.config.checks import get, mapping, positive

ROUTING_KEYS = {"backoff_base_s", "backoff_max_s", "retry_after_cap_s", "breaker_failures", "breaker_cooldown_s",
                 "request_timeout_s"}


@dataclass(frozen=True, slots=True)
class RoutingConfig:
    """Failover policy shared by every route (an optional section; defaults are production-safe)."""

    backoff_base_s: float = 0.2
    backoff_max_s: float = 5.0
    retry_after_cap_s: float = 10.0
    breaker_failures: int = 3
    breaker_cooldown_s: float = 30.0
    request_timeout_s: float = 900.0


def routing_section(raw: Any) -> RoutingConfig:
    section = mapping(raw, "routing", ROUTING_KEYS)
    defaults = RoutingConfig()

    def number(key: str) -> float:
        return positive(get(section, key, "routing", float, getattr(defaults, key)), f"routing.{key}",
                         allow_zero=True)

    return RoutingConfig(
        backoff_base_s=number("backoff_base_s"),
        backoff_max_s=number("backoff_max_s"),
        retry_after_cap_s=number("retry_after_cap_s"),
        breaker_failures=int(positive(get(section, "breaker_failures", "routing", int, 3),
                                       "routing.breaker_failures")),
        breaker_cooldown_s=number("breaker_cooldown_s"),
        request_timeout_s=positive(get(section, "request_timeout_s", "routing", float, 900.0),
                                    "routing.request_timeout_s"),
    )
