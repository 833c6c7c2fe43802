"""Replicas under faults, bounded for CI (``python -m bench.chaos``: the longer run).

Three gateway processes share a Redis Cluster (three masters, three replicas) or a Sentinel
group with ``store.wait_replicas: 1``; one gateway is SIGKILLed while it serves a resume and a Redis master
is SIGKILLed (its replica promoted). The invariants are
``tests/soak/chaos.py``'s: no acknowledged continuation lost, no tool run twice, no resume
accepted twice, only clean failures, circuit state shared across the gateways.

Redis servers that cannot start skip the test locally and fail it under ``CI=true``.
``LOOPGATE_CHAOS_SEED`` / ``LOOPGATE_CHAOS_LOOPS`` explore other runs.

The Sentinel variant (a master, a replica, three sentinels; the master SIGKILLed and the replica
promoted) runs half as many loops with no gateway kill, to stay inside CI's time budget; the
Cluster variant covers killed gateways.
"""

from __future__ import annotations

import os

import pytest

from tests.soak.chaos import LOOP_ENDINGS, ChaosResult, run_chaos
from tests.soak.chaos_redis import RedisUnavailable

SEED = int(os.environ.get("LOOPGATE_CHAOS_SEED", "20261203"))
LOOPS = int(os.environ.get("LOOPGATE_CHAOS_LOOPS", "150"))


def _run(loops: int, store: str, gateway_kills: int) -> ChaosResult:
    try:
        result = run_chaos(loops, SEED, store, gateway_kills=gateway_kills, kill_redis=True, wait_replicas=1)
    except RedisUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Redis servers could not start under CI: {exc}")
        pytest.skip(f"Redis servers could not start: {exc}")
    print(f"\nchaos on {store}: {loops} loops, seed {SEED}\n{result.table()}")
    assert not result.violations, (
        f"{len(result.violations)} invariant violations; reproduce with `python -m bench.chaos --loops {loops} "
        f"--seed {SEED} --store {store} --gateway-kills {gateway_kills}`:\n" + "\n".join(result.violations[:20]))
    stats = result.stats
    assert stats["acknowledged continuations lost"] == 0
    assert sum(stats[ending] for ending in LOOP_ENDINGS) == loops, stats
    assert stats["loops failed cleanly"] < loops // 10, stats
    assert stats["Redis masters SIGKILLed"] == 1 and stats["Redis failovers (replica promoted)"] == 1, stats
    assert stats["continuations acknowledged before the Redis master was killed"], stats
    assert stats["resume requests sent to another replica"] and stats["resumes accepted"], stats
    assert stats["gateways seeing the dead target's circuit open"] == 3, stats
    return result


@pytest.mark.long(seconds=40)
def test_chaos_on_a_redis_cluster_with_a_gateway_and_a_master_killed() -> None:
    result = _run(LOOPS, "cluster", gateway_kills=1)
    assert result.stats["gateway processes SIGKILLed"] == 1 == result.stats["gateway processes restarted"]
    assert result.stats["resumes in flight on the killed gateway (kill 1)"] >= 1, result.stats


@pytest.mark.long(seconds=40)
def test_chaos_on_a_sentinel_group_losing_its_master() -> None:
    _run(max(1, LOOPS // 2), "sentinel", gateway_kills=0)
