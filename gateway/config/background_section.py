"""The ``background`` section: bounds and timing of background responses (README "Background mode")."""

from __future__ import annotations

from typing import Any

from gateway.config.checks import BACKGROUND_KEYS, ConfigError, get, mapping
from gateway.config.model import BackgroundConfig


def background_section(raw: Any) -> BackgroundConfig:
    section = mapping(raw, "background", BACKGROUND_KEYS)
    d = BackgroundConfig()

    def whole(key: str, low: int, high: int) -> int:
        value = get(section, key, "background", int, getattr(d, key))
        if not low <= value <= high:
            raise ConfigError(f"background.{key}", f"must be between {low} and {high}, got {value}")
        return int(value)

    def seconds(key: str, low: float, high: float) -> float:
        value = get(section, key, "background", float, getattr(d, key))
        if not low <= value <= high:
            raise ConfigError(f"background.{key}", f"must be between {low:g} and {high:g} seconds, got {value:g}")
        return float(value)

    config = BackgroundConfig(
        max_concurrent=whole("max_concurrent", 0, 100_000),
        max_runs_per_key=whole("max_runs_per_key", 0, 100_000),
        max_runs_per_tenant=whole("max_runs_per_tenant", 0, 100_000),
        max_events=whole("max_events", 16, 10_000_000),
        max_event_bytes=whole("max_event_bytes", 4096, 1024 * 1024 * 1024),
        lease_s=seconds("lease_s", 1.0, 3600.0),
        heartbeat_s=seconds("heartbeat_s", 0.05, 600.0),
        poll_s=seconds("poll_s", 0.01, 10.0),
    )
    if config.heartbeat_s * 2 > config.lease_s:
        # A lease renewed less than twice per period expires under a merely slow store round trip.
        raise ConfigError("background.heartbeat_s", f"must be at most half of background.lease_s "
                          f"({config.lease_s:g}), got {config.heartbeat_s:g}")
    return config
