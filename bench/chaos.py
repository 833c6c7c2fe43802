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
import sys

from bench.soak import report
from tests.soak.chaos import run_chaos
from tests.soak.chaos_redis import TOPOLOGIES


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
    command = (f"python -m bench.chaos --loops {args.loops} --seed {args.seed} --store {args.store} "
               f"--concurrency {args.concurrency} --gateway-kills {args.gateway_kills}"
               f"{' --no-redis-kill' if args.no_redis_kill else ''} --wait-replicas {args.wait_replicas} "
               f"--replica-lag {args.replica_lag}")
    return report("chaos", command, result, {}, args)

if __name__ == "__main__":
    sys.exit(main())
