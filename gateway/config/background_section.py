"""The ``background`` section: bounds and timing of background responses (README "Background mode")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.config.checks import ConfigError, get, mapping

BACKGROUND_KEYS = {"max_concurrent", "max_runs_per_key", "max_runs_per_tenant", "max_events", "max_event_bytes",
                   "lease_s", "heartbeat_s", "poll_s", "max_followers_per_run", "max_followers"}


@dataclass(frozen=True, slots=True)
class BackgroundConfig:
    """Background responses (``background: true``): bounds per process and per run, and the runner's lease."""

    #: background responses one gateway process runs at once; past it a new one gets 429
    max_concurrent: int = 64
    #: stream events stored per run (only for runs created with ``stream: true``); past it the run fails
    max_events: int = 50_000
    #: their total size in bytes
    max_event_bytes: int = 16 * 1024 * 1024
    #: a run whose replica stopped renewing its lease for this long is marked failed by the next reader
    lease_s: float = 30.0
    #: how often the runner renews its lease and checks for a cancel issued on another replica
    heartbeat_s: float = 1.0
    #: how often a run followed from another replica is read for new events (once per run and process)
    poll_s: float = 0.1
    #: background responses one key runs at once across every replica sharing the store (0: no cap
    #: but the process's); past it a new one gets 429, so one key cannot take every slot
    max_runs_per_key: int = 16
    #: the same for all the keys of one tenant together (0: no tenant cap)
    max_runs_per_tenant: int = 0
    #: stream followers (``GET /v1/responses/{id}?stream=true``) of one run in one gateway process;
    #: past it a new one gets 429 (each also holds a concurrency slot of its key and tenant)
    max_followers_per_run: int = 16
    #: stream followers of every run together in one gateway process; past it a new one gets 429
    max_followers: int = 1000


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
        max_followers_per_run=whole("max_followers_per_run", 1, 100_000),
        max_followers=whole("max_followers", 1, 1_000_000),
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
