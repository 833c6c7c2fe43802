"""Replicas under faults: soak loops over three gateway processes on a Redis Cluster or Sentinel group.

    python -m bench.chaos --loops 1000 --seed 7 --store cluster [--gateway-kills 3] [--concurrency 12]
    python -m bench.chaos --loops 300 --seed 7 --store sentinel

Starts the Redis topology (``tests/soak/chaos_redis.py``), three ``python -m gateway serve``
processes sharing it with ``store.wait_replicas: 1``, the soak's fault-injecting fake providers
and tool server; drives the scripted tool loops, every resume on another gateway, while it
SIGKILLs gateways mid-resume and a Redis master; then checks the invariants
(``tests/soak/chaos.py``) and prints the counts. Exit status 1 when any invariant was violated.
The CI version is ``tests/e2e/test_chaos.py``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from pathlib import Path

import orjson

from bench.common import RESULTS_DIR, machine
from tests.soak.chaos import ChaosResult, run_chaos
from tests.soak.chaos_redis import TOPOLOGIES


def append_row(result: ChaosResult, params: dict[str, object]) -> Path:
    """One JSON row per run, like the other scenarios: bench/results/<date>.jsonl or $BENCH_RESULTS_FILE."""
    override = os.environ.get("BENCH_RESULTS_FILE")
    path = Path(override).resolve() if override else RESULTS_DIR / f"{dt.date.today().isoformat()}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    metrics = {"elapsed_s": round(result.elapsed_s, 1), "counts": dict(result.stats),
               "failures": dict(result.failures), "tool_runs": dict(result.tool_runs),
               "violations": len(result.violations)}
    record = {"ts": dt.datetime.now().isoformat(timespec="seconds"), "scenario": "chaos", "mode": "loopgate",
              "machine": machine(), "params": params, "metrics": metrics}
    with open(path, "ab") as f:
        f.write(orjson.dumps(record) + b"\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--store", choices=sorted(TOPOLOGIES), default="cluster")
    parser.add_argument("--concurrency", type=int, default=12)
    parser.add_argument("--gateway-kills", type=int, default=3, help="gateways SIGKILLed mid-resume (restarted)")
    parser.add_argument("--no-redis-kill", action="store_true", help="keep every Redis master alive")
    parser.add_argument("--wait-replicas", type=int, default=1, help="store.wait_replicas (-1: leave it unset)")
    parser.add_argument("--replica-lag", type=float, default=1.0,
                        help="seconds the killed master's replicas are frozen (SIGSTOP) before it is killed")
    parser.add_argument("--show", type=int, default=20, help="violations to print")
    args = parser.parse_args(argv)
    result = run_chaos(args.loops, args.seed, args.store, args.concurrency, args.gateway_kills,
                       not args.no_redis_kill, None if args.wait_replicas < 0 else args.wait_replicas,
                       args.replica_lag)
    print(f"python -m bench.chaos --loops {args.loops} --seed {args.seed} --store {args.store} "
          f"--concurrency {args.concurrency} --gateway-kills {args.gateway_kills}"
          f"{' --no-redis-kill' if args.no_redis_kill else ''} --wait-replicas {args.wait_replicas} "
          f"--replica-lag {args.replica_lag}\n")
    print(result.table())
    params = {k: v for k, v in vars(args).items() if k != "show"}
    print(f"\n(appended to {append_row(result, params)})")
    for violation in result.violations[: args.show]:
        print(f"\nVIOLATION: {violation}")
    if len(result.violations) > args.show:
        print(f"\n... and {len(result.violations) - args.show} more")
    return 1 if result.violations else 0


if __name__ == "__main__":
    sys.exit(main())
