"""The ``usage`` section: daily usage aggregates in the store (gateway/store/usage.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.config.checks import ConfigError, get, mapping, positive

USAGE_KEYS = {"record", "retention_days", "flush_s"}


@dataclass(frozen=True, slots=True)
class UsageConfig:
    """Daily usage aggregates in the store (gateway/store/usage.py); off: nothing is written."""

    record: bool = True
    retention_days: int = 400
    #: with Redis: how long a process sums requests' usage before writing it (one pipeline per tenant)
    flush_s: float = 0.5


#: a bound on how long day rows are kept (and how far back /admin/usage can look)
MAX_RETENTION_DAYS = 3660
#: usage a crashed process loses, and how late budgets see it, stay within this
MAX_FLUSH_S = 10.0


def usage_section(raw: Any) -> UsageConfig:
    section = mapping(raw, "usage", USAGE_KEYS)
    days = int(positive(get(section, "retention_days", "usage", int, 400), "usage.retention_days"))
    if days > MAX_RETENTION_DAYS:
        raise ConfigError("usage.retention_days", f"must be at most {MAX_RETENTION_DAYS}, got {days}")
    flush_s = positive(get(section, "flush_s", "usage", float, 0.5), "usage.flush_s")
    if flush_s > MAX_FLUSH_S:
        raise ConfigError("usage.flush_s", f"must be at most {MAX_FLUSH_S:g} seconds, got {flush_s:g}")
    return UsageConfig(record=get(section, "record", "usage", bool, True), retention_days=days, flush_s=flush_s)
