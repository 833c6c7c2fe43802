"""Scenario ``embeddings``: ``POST /v1/embeddings`` next to chat completions on the same gateway (bench/README.md).

One fake upstream (its embeddings answer 1536-dimension vectors, built once per shape) and one
Loopgate. Rows interleaved so every kind sees the same machine, closed-loop load at
``--concurrency`` (50) connections for ``--duration`` s each:

- ``chat json``: a plain chat completion (route ``bench``), the reference;
- ``embed float`` / ``embed base64``: one input on route ``bench-embed`` (base64 is what the
  ``openai`` SDK asks for by default: passed through, no float parsed);
- ``embed batch``: 100 inputs, base64.

Per row: requests/s, p50/p99, errors (non-200, or no vector), and the gateway's CPU ms per
request (utime+stime of its process tree). The deterministic comparison is
``python -m bench.instructions --embeddings [--base64]`` against the same without ``--embeddings``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

import orjson

from bench import servers
from bench.common import Report, cpus_for
from bench.instructions import EMBED_INPUT
from bench.loadgen import cpu_seconds, machine_busy_seconds, own_cpu_seconds
from bench.responses import _load

CHAT = orjson.dumps({"model": "bench", "messages": [{"role": "user", "content": "Say hello in one short sentence."}]})
KINDS: dict[str, tuple[str, bytes]] = {
    "chat json": ("/v1/chat/completions", CHAT),
    "embed float": ("/v1/embeddings", orjson.dumps({"model": "bench-embed", "input": EMBED_INPUT,
                                                    "encoding_format": "float"})),
    "embed base64": ("/v1/embeddings", orjson.dumps({"model": "bench-embed", "input": EMBED_INPUT,
                                                     "encoding_format": "base64"})),
    "embed batch": ("/v1/embeddings", orjson.dumps({"model": "bench-embed", "encoding_format": "base64",
                                                    "input": [f"{EMBED_INPUT} ({i})" for i in range(100)]})),
}


def _row(proc: servers.Proc, kind: str, conc: int, duration: float, max_requests: int) -> tuple[list[Any],
                                                                                                dict[str, Any]]:
    path, body = KINDS[kind]
    cpu0, own0, busy0 = cpu_seconds(proc.pid), own_cpu_seconds(), machine_busy_seconds()
    # _load checks a non-stream answer only for its status: an embeddings 200 is a whole answer
    res = asyncio.run(_load(proc.base + path, body, "chat", False, False, conc, duration, max_requests))
    cpu_ms = (cpu_seconds(proc.pid) - cpu0) * 1000 / max(1, res["requests"])
    other = (machine_busy_seconds() - busy0) - (own_cpu_seconds() - own0)
    other_pct = round(max(0.0, other) / (res["elapsed_s"] * (os.cpu_count() or 1)) * 100, 1)
    m = res | {"kind": kind, "concurrency": conc, "cpu_ms_per_req": round(cpu_ms, 3), "other_cpu_pct": other_pct}
    cells = [conc, res["requests"], res["rps"], res["p50_ms"], res["p99_ms"], res["errors"], round(cpu_ms, 3),
             other_pct]
    return cells, m


def scenario_embeddings(args: argparse.Namespace) -> None:
    params = {"duration_s": args.duration, "concurrency": args.concurrency, "rounds": args.rounds}
    cols = ["kind", "conc", "requests", "RPS", "p50 ms", "p99 ms", "errors", "CPU ms/req", "other CPU %"]
    report = Report("embeddings", cols, params)
    ok, why = servers.gateway_runnable()
    if not ok:
        report.skip("loopgate", f"gateway not runnable ({why})")
        report.print()
        return
    rows: dict[str, list[dict[str, Any]]] = {}
    with servers.start_fake(cpus=cpus_for(args, "fake")) as fake, \
            servers.start_loopgate(fake.base, args.tool_source, cpus_for(args, "sut")) as gw:
        for kind in KINDS:  # warm-up: every code path once (the tokenizer loads on the first embeddings request)
            _row(gw, kind, 4, 1.0, 200)
        for r in range(args.rounds):
            order = list(KINDS) if r % 2 == 0 else list(reversed(KINDS))
            for kind in order:
                cells, m = _row(gw, kind, args.concurrency, args.duration, 10**9)
                rows.setdefault(kind, []).append(m)
                report.add(kind, cells, m, {"round": r})
    chat = sum(m["cpu_ms_per_req"] for m in rows["chat json"]) / len(rows["chat json"])
    for kind in KINDS:
        mean = sum(m["cpu_ms_per_req"] for m in rows[kind]) / len(rows[kind])
        rps = sum(m["rps"] for m in rows[kind]) / len(rows[kind])
        print(f"  {kind}: {rps:.0f} req/s, CPU/req {mean:.3f} ms ({mean / chat * 100 - 100:+.1f} % vs chat json)")
    report.print()


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("embeddings", parents=[common], help="/v1/embeddings vs chat completions (load)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per load row")
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds (the order alternates)")
