"""The rollups writer: one record per interval boundary, circuits with since/last error, config bounds."""

from __future__ import annotations

import orjson
import pytest

from gateway.api.console.feed import ConsoleFeed
from gateway.config.checks import ConfigError
from gateway.config.observability_section import RollupConfig, observability_section
from gateway.observability import metrics
from gateway.routing.health import TargetHealth
from gateway.store.errors import StoreUnavailable
from gateway.store.rollups.memory import MemoryRollups


async def test_tick_writes_the_interval_and_the_circuits() -> None:
    clock = [1000.0]
    store = MemoryRollups(3600, 30, clock=lambda: clock[0])
    health = TargetHealth(failures_to_open=1, cooldown_s=30)
    feed = ConsoleFeed(store, RollupConfig(resolution_s=10.0), health)
    metrics.REQUESTS.inc("/v1/chat/completions", "feed-route", "200")
    metrics.UPSTREAM_ERRORS.inc("feed-prov/m", "server_error")
    await health.record("feed-prov/m", failed=True)
    await feed.tick(1004.2)
    (raw,) = await store.read(0.0)
    record = orjson.loads(raw)
    assert record["t"] == 1000.0 and record["q"]["feed-route"] == [1, 0]
    status = orjson.loads((await store.statuses())[feed.replica])
    circuit = status["c"]["feed-prov/m"]
    assert circuit["state"] == "open" and circuit["last_error"] == "server_error"
    assert circuit["since"] == pytest.approx(circuit["open_until"] - 30)


async def test_a_store_outage_costs_the_interval_only() -> None:
    class Down(MemoryRollups):
        async def write(self, replica: str, at: float, record: bytes, status: bytes) -> None:
            raise StoreUnavailable("down")

    feed = ConsoleFeed(Down(3600, 30), RollupConfig(), TargetHealth(3, 30))
    await feed.tick(1000.0)  # no exception: the writer goes on with the next interval


def test_rollup_config_defaults_and_bounds() -> None:
    assert observability_section({}).rollups == RollupConfig(enabled=True, resolution_s=10.0, retention_s=3600.0)
    custom = observability_section({"rollups": {"resolution_s": 5, "retention_s": 600, "enabled": False}}).rollups
    assert (custom.resolution_s, custom.retention_s, custom.enabled) == (5.0, 600.0, False)
    with pytest.raises(ConfigError, match=r"observability\.rollups\.resolution_s"):
        observability_section({"rollups": {"resolution_s": 0.1}})
    with pytest.raises(ConfigError, match="two intervals"):
        observability_section({"rollups": {"resolution_s": 3600, "retention_s": 3600}})
    with pytest.raises(ConfigError, match="unknown key"):
        observability_section({"rollups": {"resolution": 5}})
