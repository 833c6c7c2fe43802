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
import sys

from tests.soak.harness import run_soak


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
    print(f"python -m bench.soak --loops {args.loops} --seed {args.seed} --concurrency {args.concurrency}"
          f" --store {args.store} --workers {args.workers}\n")
    print(result.table())
    for violation in result.violations[: args.show]:
        print(f"\nVIOLATION: {violation}")
    if len(result.violations) > args.show:
        print(f"\n... and {len(result.violations) - args.show} more")
    return 1 if result.violations else 0


if __name__ == "__main__":
    sys.exit(main())
