"""Rollup records from the shared counters, and the overview built from many replicas' records."""

from __future__ import annotations

import pytest

from gateway.api.console.overview import circuits, failovers, series
from gateway.observability import metrics
from gateway.observability.rollups import RollupRecorder, quantile


def test_a_record_holds_what_the_counters_added_since_the_last_one() -> None:
    metrics.REQUESTS.inc("/v1/chat/completions", "route-before", "200")
    recorder = RollupRecorder()  # what came before it belongs to no interval
    for status in ("200", "200", "200", "502"):
        metrics.REQUESTS.inc("/v1/chat/completions", "route-r1", status)
    metrics.REQUESTS.inc("/v1/chat/completions", "route-r1", "429")
    metrics.REQUESTS.inc("/admin/console/overview", "route-admin", "200")  # the console's own polling
    metrics.LATENCY.observe(0.02, "/admin/console/overview")
    metrics.LATENCY.observe(0.02, "/v1/chat/completions")
    metrics.TOKENS.inc("team-a", "route-r1", "prompt", amount=30)
    metrics.TOKENS.inc("team-a", "route-r1", "completion", amount=12)
    metrics.TOKENS.inc("team-a", "route-r1", "cached", amount=20)  # part of prompt: not counted twice
    metrics.FAILOVERS.inc("prov-x/m", "rate_limited")
    metrics.UPSTREAM_ERRORS.inc("prov-x/m", "rate_limited")
    record = recorder.take(100.0, 10.0, "host:1")
    assert record["t"] == 100.0 and record["s"] == 10.0 and record["r"] == "host:1"
    assert record["q"]["route-r1"] == [5, 1]  # a 429 is an answer, not a gateway error
    assert "route-before" not in record["q"] and "route-admin" not in record["q"]
    assert "/admin/console/overview" not in record["l"]
    assert record["k"] == {"route-r1": 42}
    assert ["prov-x/m", "rate_limited", 1] in record["f"] and ["prov-x/m", "rate_limited", 1] in record["e"]
    assert sum(record["l"]["/v1/chat/completions"]) >= 1
    again = recorder.take(110.0, 10.0, "host:1")
    assert "route-r1" not in again["q"] and again["k"] == {} and again["f"] == []


def test_quantiles_interpolate_inside_a_bucket() -> None:
    bounds = len(metrics.LATENCY.buckets) + 1
    buckets = [0.0] * bounds
    buckets[1] = 100  # all in (0.005, 0.01]
    assert quantile(buckets, 0.5) == pytest.approx(0.0075)
    assert quantile([0.0] * bounds, 0.5) is None
    buckets = [0.0] * bounds
    buckets[-1] = 1  # past the last bound: the last finite bound
    assert quantile(buckets, 0.99) == metrics.LATENCY.buckets[-1]


def test_series_sums_replicas_per_interval_and_fills_the_gaps() -> None:
    empty = [0.0] * (len(metrics.LATENCY.buckets) + 1)
    fast = list(empty)
    fast[0] = 10
    records = [
        {"t": 110.0, "s": 10.0, "r": "a", "q": {"agent": [20, 2]}, "l": {"/v1/chat/completions": fast},
         "k": {"agent": 500}, "f": [["p/m", "timeout", 1]], "e": []},
        {"t": 110.0, "s": 10.0, "r": "b", "q": {"agent": [30, 3]}, "l": {}, "k": {"agent": 100},
         "f": [["p/m", "timeout", 2]], "e": []},
        {"t": 130.0, "s": 10.0, "r": "a", "q": {"other": [10, 0]}, "l": {}, "k": {}, "f": [], "e": []},
        {"t": 20.0, "s": 10.0, "r": "a", "q": {"agent": [99, 0]}, "l": {}, "k": {}, "f": [], "e": []},
    ]
    out = series(records, 100.0, 135.0, 10.0)
    assert out["t"] == [110.0, 120.0, 130.0]
    assert out["routes"]["agent"]["requests_per_s"] == [5.0, 0.0, 0.0]
    assert out["routes"]["agent"]["error_rate"] == [0.1, 0.0, 0.0]
    assert out["routes"]["agent"]["tokens_per_s"] == [60.0, 0.0, 0.0]
    assert out["routes"]["other"]["requests_per_s"] == [0.0, 0.0, 1.0]
    assert out["latency_ms"]["p50"] == [2.5, None, None]
    assert failovers(records) == [{"from_target": "p/m", "reason": "timeout", "count": 3, "last_at": 110.0}]


def test_circuits_take_the_worst_state_over_replicas_and_list_every_target() -> None:
    statuses = [
        {"r": "a", "c": {"p/m": {"state": "open", "open_until": 200.0, "since": 170.0, "last_error": "server_error",
                                 "last_error_at": 170.0}}},
        {"r": "b", "c": {"p/m": {"state": "closed", "open_until": None, "last_error": "timeout",
                                 "last_error_at": 150.0}}},
    ]
    found = circuits(statuses, ["p/m", "q/n"], now=180.0)
    assert found[0] == {"target": "p/m", "state": "open", "since": 170.0, "open_until": 200.0, "probing": False,
                        "last_error": "server_error", "last_error_at": 170.0, "replicas_open": 1}
    assert found[1]["target"] == "q/n" and found[1]["state"] == "closed"


def test_a_status_written_while_open_reads_half_open_once_its_cooldown_is_over() -> None:
    """A replica's status is up to an interval old: an ``open`` whose ``open_until`` has passed is
    half-open now (the breaker lets the next request probe), never "open" above a half-open table."""
    statuses = [{"r": "a", "c": {"p/m": {"state": "open", "open_until": 200.0, "since": 170.0}}},
                {"r": "b", "c": {"p/m": {"state": "half_open", "open_until": 190.0, "probing": True}}}]
    found = circuits(statuses, ["p/m"], now=205.0)
    assert found[0]["state"] == "half_open" and found[0]["probing"] is True and found[0]["replicas_open"] == 2
    assert circuits(statuses[:1], ["p/m"], now=199.0)[0]["state"] == "open"
