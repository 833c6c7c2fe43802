"""Randomized fault-injection soak of tool loops across the three wire formats.

    python -m bench.soak --loops 3000 --seed 7 [--concurrency 16] [--store redis://127.0.0.1:6379/13 --workers 2]
    python -m bench.soak --seed 7 --only 1234        # replay one loop of that seed alone

Runs scripted multi-turn tool loops (server, approval and client tools; pauses resumed through
tool messages or ``POST /v1/continuations/{id}``; stream and non-stream) against fake OpenAI,
Anthropic and Gemini servers that inject a seeded fault into each request, then checks the
invariants (``tests/soak/harness.py``) and prints the counts. Exit status 1 when any invariant
was violated. The CI version is ``tests/e2e/test_soak.py``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from pathlib import Path
from typing import Any

import orjson

from bench.common import RESULTS_DIR, machine
from tests.soak.harness import run_soak


def append_row(scenario: str, metrics: dict[str, object], params: dict[str, object]) -> Path:
    """One JSON row per run, like the other scenarios: bench/results/<date>.jsonl or $BENCH_RESULTS_FILE."""
    override = os.environ.get("BENCH_RESULTS_FILE")
    path = Path(override).resolve() if override else RESULTS_DIR / f"{dt.date.today().isoformat()}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"ts": dt.datetime.now().isoformat(timespec="seconds"), "scenario": scenario, "mode": "loopgate",
              "machine": machine(), "params": params, "metrics": metrics}
    with open(path, "ab") as f:
        f.write(orjson.dumps(record) + b"\n")
    return path


def report(scenario: str, command: str, result: Any, metrics: dict[str, object], args: argparse.Namespace) -> int:
    """Print the run (command, counts, violations), append its row; the exit status (1 on any violation).

    ``result`` is a ``SoakResult`` or a ``ChaosResult``: both have ``table()``, ``violations`` and
    the counts ``metrics`` is built from."""
    print(f"{command}\n")
    print(result.table())
    metrics = {"elapsed_s": round(result.elapsed_s, 1), "counts": dict(result.stats),
               "failures": dict(result.failures), "tool_runs": dict(result.tool_runs),
               "violations": len(result.violations), **metrics}
    params = {k: v for k, v in vars(args).items() if k != "show"}
    print(f"\n(appended to {append_row(scenario, metrics, params)})")
    for violation in result.violations[: args.show]:
        print(f"\nVIOLATION: {violation}")
    if len(result.violations) > args.show:
        print(f"\n... and {len(result.violations) - args.show} more")
    return 1 if result.violations else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--store", default="memory://", help="the gateway's continuation store URL")
    parser.add_argument("--workers", type=int, default=1, help="gateway worker processes (> 1 needs --store redis)")
    parser.add_argument("--reserialize-args", action="store_true",
                        help="way-A follow-ups re-serialise the paused calls' arguments, as many clients do")
    parser.add_argument("--only", type=int, nargs="+", help="run only these loop ids (to reproduce a failure)")
    parser.add_argument("--show", type=int, default=20, help="violations to print")
    args = parser.parse_args(argv)
    result = run_soak(args.loops, args.seed, args.concurrency, args.store, args.only, args.workers,
                      args.reserialize_args)
    command = (f"python -m bench.soak --loops {args.loops} --seed {args.seed} --concurrency {args.concurrency}"
               f" --store {args.store} --workers {args.workers}")
    return report("soak", command, result, {"upstream_requests": dict(result.upstream_requests),
                                            "faults": dict(result.faults)}, args)

if __name__ == "__main__":
    sys.exit(main())
