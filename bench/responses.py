"""Scenario ``responses``: the Responses API next to chat completions on the same gateway (bench/README.md).

One fake upstream (``--agent-tools 5``, no latency) and one Loopgate. Rows, chat completions and
Responses interleaved so both see the same machine:

- closed-loop load at ``--concurrency`` (50) connections, JSON and stream, ``--duration`` s each:
  requests/s, p50/p99, errors (non-200, or an answer that did not end: no ``[DONE]`` /
  no ``response.completed``), gateway CPU ms per request (utime+stime of its process tree);
- the 5-tool agent turn (route ``bench-agent``: Loopgate runs ``bench_tool`` 5 times, 6 model
  calls), ``--turns`` turns at concurrency 4, each checked for the final text: CPU ms per turn.

Wall-clock numbers on a shared 2-core machine move with other jobs; the deterministic CPU
comparison is ``python -m bench.instructions [--responses] [--stream] [--agent]`` (callgrind).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

import aiohttp
import orjson

from bench import servers
from bench.common import Report, cpus_for
from bench.loadgen import JSON_HEADERS, cpu_seconds, machine_busy_seconds, own_cpu_seconds, percentile

AGENT_TEXT = b"Done after 5 tool results."


def _body(api: str, model: str, prompt: str, stream: bool) -> bytes:
    if api == "responses":
        return orjson.dumps({"model": model, "input": prompt, "stream": stream})
    return orjson.dumps({"model": model, "stream": stream, "messages": [{"role": "user", "content": prompt}]})


def _complete(raw: bytes, api: str, stream: bool, agent: bool) -> bool:
    if stream:
        return (b"event: response.completed" if api == "responses" else b"data: [DONE]") in raw
    return not agent or AGENT_TEXT in raw


async def _load(url: str, body: bytes, api: str, stream: bool, agent: bool, concurrency: int,
                duration_s: float, max_requests: int) -> dict[str, Any]:
    latencies: list[float] = []
    errors: list[str] = []
    issued = 0
    deadline = time.perf_counter() + duration_s
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:

        async def worker() -> None:
            nonlocal issued
            while issued < max_requests and time.perf_counter() < deadline:
                issued += 1
                t0 = time.perf_counter()
                try:
                    async with session.post(url, data=body, headers=JSON_HEADERS) as resp:
                        raw = await resp.read()
                except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                    errors.append(type(exc).__name__)
                    continue
                if resp.status != 200 or not _complete(raw, api, stream, agent):
                    errors.append(f"HTTP {resp.status}: {raw[:120]!r}")
                    continue
                latencies.append(time.perf_counter() - t0)

        t_start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - t_start
    ms = [x * 1000 for x in latencies]
    return {"requests": len(latencies), "errors": len(errors), "error_samples": sorted(set(errors))[:3],
            "rps": round(len(latencies) / elapsed, 1), "p50_ms": round(percentile(ms, 50), 2),
            "p99_ms": round(percentile(ms, 99), 2), "elapsed_s": round(elapsed, 2)}


def _row(proc: servers.Proc, api: str, kind: str, agent: bool, conc: int, duration: float,
         max_requests: int) -> tuple[list[Any], dict[str, Any]]:
    path = "/v1/responses" if api == "responses" else "/v1/chat/completions"
    model, prompt = ("bench-agent", "Run bench_tool.") if agent else ("bench", "Say hello in one short sentence.")
    stream = kind == "stream"
    body = _body(api, model, prompt, stream)
    cpu0, own0, busy0 = cpu_seconds(proc.pid), own_cpu_seconds(), machine_busy_seconds()
    res = asyncio.run(_load(proc.base + path, body, api, stream, agent, conc, duration, max_requests))
    cpu_ms = (cpu_seconds(proc.pid) - cpu0) * 1000 / max(1, res["requests"])
    other = (machine_busy_seconds() - busy0) - (own_cpu_seconds() - own0)
    other_pct = round(max(0.0, other) / (res["elapsed_s"] * (os.cpu_count() or 1)) * 100, 1)
    m = res | {"api": api, "kind": kind, "concurrency": conc, "cpu_ms_per_req": round(cpu_ms, 3),
               "other_cpu_pct": other_pct}
    cells = [kind, conc, res["requests"], res["rps"], res["p50_ms"], res["p99_ms"], res["errors"],
             round(cpu_ms, 3), other_pct]
    return cells, m


def scenario_responses(args: argparse.Namespace) -> None:
    params = {"duration_s": args.duration, "concurrency": args.concurrency, "turns": args.turns,
              "rounds": args.rounds}
    cols = ["api", "kind", "conc", "requests", "RPS", "p50 ms", "p99 ms", "errors", "CPU ms/req", "other CPU %"]
    report = Report("responses", cols, params)
    ok, why = servers.gateway_runnable()
    if not ok:
        report.skip("loopgate", f"gateway not runnable ({why})")
        report.print()
        return
    rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with servers.start_fake(agent_tools=5, cpus=cpus_for(args, "fake")) as fake, \
            servers.start_loopgate(fake.base, args.tool_source, cpus_for(args, "sut")) as gw:
        for api in ("chat", "responses"):  # warm-up: every code path once
            for kind, agent in (("json", False), ("stream", False), ("agent turn", True)):
                _row(gw, api, kind, agent, 4, 1.0, 200)
        for r in range(args.rounds):
            order = ("chat", "responses") if r % 2 == 0 else ("responses", "chat")
            for kind, agent, conc, duration, cap in (
                    ("json", False, args.concurrency, args.duration, 10**9),
                    ("stream", False, args.concurrency, args.duration, 10**9),
                    ("agent turn", True, 4, 600.0, args.turns)):
                for api in order:
                    cells, m = _row(gw, api, kind, agent, conc, duration, cap)
                    rows.setdefault((api, kind), []).append(m)
                    report.add(api, cells, m, {"round": r})
    for kind in ("json", "stream", "agent turn"):
        chat = sum(m["cpu_ms_per_req"] for m in rows[("chat", kind)]) / len(rows[("chat", kind)])
        resp = sum(m["cpu_ms_per_req"] for m in rows[("responses", kind)]) / len(rows[("responses", kind)])
        print(f"  {kind}: Responses CPU/req {resp:.3f} ms vs chat {chat:.3f} ms = {resp / chat * 100 - 100:+.1f} %")
    report.print()


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("responses", parents=[common], help="Responses API vs chat completions (load, agent turn)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per load row")
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--turns", type=int, default=300, help="5-tool agent turns per row")
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds (chat and Responses alternate first)")
