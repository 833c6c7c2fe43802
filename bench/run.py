"""Loopgate benchmarks: ``python -m bench.run SCENARIO [options]`` from the repo root.

Scenarios: latency, ttft, agent, load (here), failover, loop-cpu, workers, streams-memory
(bench/scenarios_extra.py), responses (bench/responses.py), embeddings (bench/embeddings.py),
controls (bench/controls.py), and all.

Each scenario starts what it needs on 127.0.0.1 (fake upstream, bare floor, Loopgate, optionally
LiteLLM), stops all of it on the way out, prints markdown table rows and appends one JSON object per
row to ``bench/results/<date>.jsonl``. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from bench import controls, embeddings, responses, scenarios_extra, servers
from bench.common import (
    LOAD_COLS,
    Report,
    Target,
    cpus_for,
    load_run,
    machine,
    ms,
    rotated,
    targets,
    wanted_modes,
)
from bench.loadgen import chat_body, percentile, run_load, stream_timing, wrk_available
from bench.tools import bench_tool

TOOL_DEF = {
    "type": "function",
    "function": {
        "name": "bench_tool",
        "description": "A benchmark tool that answers at once.",
        "parameters": {"type": "object", "properties": {"step": {"type": "integer"}}},
    },
}


# ----------------------------------------------------------------------------- latency
async def _sequential(session: aiohttp.ClientSession, t: Target, body: bytes, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        async with session.post(t.url, data=body, headers={"Content-Type": "application/json"}) as resp:
            await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"{t.mode}: HTTP {resp.status}")
        out.append(time.perf_counter() - t0)
    return out


async def _latency(ts: list[Target], rounds: int, per_round: int) -> dict[str, tuple[list[float], list[float]]]:
    res: dict[str, tuple[list[float], list[float]]] = {t.mode: ([], []) for t in ts}
    sessions = {t.mode: aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) for t in ts}
    try:
        for t in ts:  # warm-up: connections, caches, lazy imports
            await _sequential(sessions[t.mode], t, chat_body(t.model), per_round)
        for r in range(rounds):
            for t in rotated(ts, r):
                lat = await _sequential(sessions[t.mode], t, chat_body(t.model), per_round)
                res[t.mode][0].append(percentile(lat, 50))
                res[t.mode][1].append(percentile(lat, 99))
    finally:
        for s in sessions.values():
            await s.close()
    return res


def scenario_latency(args: argparse.Namespace) -> None:
    params = {"rounds": args.rounds, "per_round": args.per_round}
    cols = ["mode", "p50 ms", "p99 ms", "added p50 ms", "added p99 ms", "note"]
    report = Report("latency", cols, params)
    modes = wanted_modes(args, report)
    with servers.start_fake(cpus=cpus_for(args, "fake")) as fake, targets(modes, fake, args) as ts:
        res = asyncio.run(_latency(ts, args.rounds, args.per_round))
    base = res.get("direct")
    for mode, (p50s, p99s) in res.items():
        p50, p99 = statistics.median(p50s), statistics.median(p99s)
        added50 = p50 - statistics.median(base[0]) if base else float("nan")
        added99 = p99 - statistics.median(base[1]) if base else float("nan")
        m = {"p50_ms": ms(p50), "p99_ms": ms(p99), "added_p50_ms": ms(added50), "added_p99_ms": ms(added99)}
        report.add(mode, [ms(p50), ms(p99), ms(added50), ms(added99), "median of round medians"], m)
    report.print()


def scenario_load(args: argparse.Namespace) -> None:
    tool = "wrk" if args.tool == "wrk" or (args.tool == "auto" and wrk_available()) else "python-aiohttp"
    report = Report("load", LOAD_COLS.split("|"), {"duration_s": args.duration, "tool": tool})
    modes = wanted_modes(args, report)
    print(f"load generator: {tool}", flush=True)
    with servers.start_fake(cpus=cpus_for(args, "fake")) as fake:
        for mode in modes:
            with targets([mode], fake, args) as (t,):
                run_load(t.url, chat_body(t.model), 50, 2.0, False, args.tool)  # warm-up
                for stream in (False, True):
                    for conc in (int(c) for c in args.concurrency.split(",")):
                        report.add(mode, *load_run(t, stream, conc, args))
    report.print()


# ----------------------------------------------------------------------------- agent
async def _client_turn(session: aiohttp.ClientSession, t: Target, max_calls: int = 50) -> tuple[float, int, str]:
    """One agent turn driven by the client: it answers every bench_tool call itself."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Run bench_tool until it is done."}]
    t0 = time.perf_counter()
    for calls in range(1, max_calls + 1):
        body = orjson.dumps({"model": t.model, "messages": messages, "tools": [TOOL_DEF]})
        async with session.post(t.url, data=body, headers={"Content-Type": "application/json"}) as resp:
            raw = await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"{t.mode}: HTTP {resp.status}: {raw[:300]!r}")
        msg = orjson.loads(raw)["choices"][0]["message"]
        if not msg.get("tool_calls"):
            return time.perf_counter() - t0, calls, msg.get("content") or ""
        messages.append({"role": "assistant", "content": msg.get("content"), "tool_calls": msg["tool_calls"]})
        for call in msg["tool_calls"]:
            result = bench_tool(**orjson.loads(call["function"]["arguments"] or "{}"))
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    raise RuntimeError(f"{t.mode}: no final answer after {max_calls} model calls")


async def _server_turn(session: aiohttp.ClientSession, t: Target) -> tuple[float, int, str]:
    """One agent turn run by Loopgate: a single request to the route whose server tool is bench_tool."""
    body = orjson.dumps({"model": "bench-agent", "messages": [{"role": "user", "content": "Run bench_tool."}]})
    t0 = time.perf_counter()
    async with session.post(t.url, data=body, headers={"Content-Type": "application/json"}) as resp:
        raw = await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{t.mode}: HTTP {resp.status}: {raw[:300]!r}")
    data = orjson.loads(raw)
    calls = int((data.get("gateway") or {}).get("iterations") or 0)
    return time.perf_counter() - t0, calls, data["choices"][0]["message"].get("content") or ""


async def _agent(ts: list[Target], turns: int, expected: str) -> dict[str, list[tuple[float, int]]]:
    kinds: list[tuple[str, Target, Callable[..., Any]]] = [(f"{t.mode} (client loop)", t, _client_turn) for t in ts]
    kinds += [("loopgate (server tools)", t, _server_turn) for t in ts if t.mode == "loopgate"]
    res: dict[str, list[tuple[float, int]]] = {name: [] for name, _, _ in kinds}
    async with aiohttp.ClientSession() as session:
        for r in range(turns + 2):  # two warm-up turns
            k = r % len(kinds)
            for name, t, fn in kinds[k:] + kinds[:k]:
                took, calls, text = await fn(session, t)
                if text != expected:
                    raise RuntimeError(f"{name}: unexpected final answer {text!r}")
                if r >= 2:
                    res[name].append((took, calls))
    return res


def scenario_agent(args: argparse.Namespace) -> None:
    params = {"tools": args.tools, "latency_ms": args.latency_ms, "turns": args.turns, "tool_source": args.tool_source}
    cols = ["mode", "model calls", "median ms/turn", "p90 ms", "mean ms", "overhead vs direct ms", "note"]
    report = Report("agent", cols, params)
    modes = wanted_modes(args, report)
    ideal = (args.tools + 1) * args.latency_ms
    fake_kw = {"latency_ms": args.latency_ms, "agent_tools": args.tools, "cpus": cpus_for(args, "fake")}
    with servers.start_fake(**fake_kw) as fake, targets(modes, fake, args) as ts:
        res = asyncio.run(_agent(ts, args.turns, f"Done after {args.tools} tool results."))
    base = statistics.median(x for x, _ in res["direct (client loop)"]) if "direct (client loop)" in res else None
    for name, runs in res.items():
        times = [x for x, _ in runs]
        med = statistics.median(times)
        over = ms(med - base) if base is not None else float("nan")
        calls = runs[0][1] or "?"
        m = {"median_ms": ms(med), "p90_ms": ms(percentile(times, 90)), "mean_ms": ms(statistics.fmean(times))}
        m |= {"overhead_vs_direct_ms": over, "model_calls": calls, "ideal_ms": ideal}
        cells = [calls, m["median_ms"], m["p90_ms"], m["mean_ms"], over, f"model time alone {ideal:g} ms"]
        report.add(name, cells, m)
    report.print()


# ----------------------------------------------------------------------------- ttft
async def _ttft(ts: list[Target], rounds: int, per_round: int) -> dict[str, dict[str, list[float]]]:
    keys = ("ttfb", "ttft", "total", "ttft99")
    res: dict[str, dict[str, list[float]]] = {t.mode: {k: [] for k in keys} for t in ts}
    texts: dict[str, str] = {}
    async with aiohttp.ClientSession() as session:
        for r in range(rounds + 1):  # round 0 is a warm-up
            for t in rotated(ts, r):
                runs = [await stream_timing(session, t.url, chat_body(t.model, True)) for _ in range(per_round)]
                texts[t.mode] = runs[-1][3]
                if r == 0:
                    continue
                for i, key in enumerate(keys[:3]):
                    res[t.mode][key].append(percentile([x[i] for x in runs], 50))
                res[t.mode]["ttft99"].append(percentile([x[1] for x in runs], 99))
    if len(set(texts.values())) > 1:
        raise RuntimeError(f"streamed text differs between modes: {texts}")
    return res


def scenario_ttft(args: argparse.Namespace) -> None:
    params = {"rounds": args.rounds, "per_round": args.per_round, "chunks": args.chunks}
    params["chunk_delay_ms"] = args.chunk_delay_ms
    cols = ["mode", "TTFB p50 ms", "TTFT p50 ms", "TTFT p99 ms", "total p50 ms", "added TTFT p50 ms", "added total ms"]
    report = Report("ttft", cols, params)
    modes = wanted_modes(args, report)
    fake_kw = {"chunks": args.chunks, "chunk_delay_ms": args.chunk_delay_ms, "cpus": cpus_for(args, "fake")}
    with servers.start_fake(**fake_kw) as fake, targets(modes, fake, args) as ts:
        res = asyncio.run(_ttft(ts, args.rounds, args.per_round))
    med = {mode: {k: statistics.median(v) for k, v in d.items()} for mode, d in res.items()}
    base = med.get("direct")
    for mode, d in med.items():
        added = ms(d["ttft"] - base["ttft"]) if base else float("nan")
        added_total = ms(d["total"] - base["total"]) if base else float("nan")
        m = {f"{k}_ms": ms(v) for k, v in d.items()} | {"added_ttft_ms": added, "added_total_ms": added_total}
        report.add(mode, [ms(d["ttfb"]), ms(d["ttft"]), ms(d["ttft99"]), ms(d["total"]), added, added_total], m)
    report.print()


# ----------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--modes", default="direct,bare,bare-http1,loopgate",
                        help="comma list of direct,bare,bare-http1,loopgate,litellm")
    common.add_argument("--litellm", action="store_true", help="also bench LiteLLM (installs bench/.venv-litellm)")
    common.add_argument("--pin", action="store_true", help="server under test on CPU 1, everything else on CPU 0")
    common.add_argument("--tool-source", choices=["python", "http"], default="python", help="Loopgate's bench_tool")
    sub = p.add_subparsers(dest="scenario", required=True)
    lat = sub.add_parser("latency", parents=[common], help="sequential added latency")
    lat.add_argument("--rounds", type=int, default=20)
    lat.add_argument("--per-round", type=int, default=50)
    load = sub.add_parser("load", parents=[common], help="throughput at fixed concurrency")
    load.add_argument("--duration", type=float, default=10.0, help="seconds per run")
    load.add_argument("--concurrency", default="50,200")
    load.add_argument("--tool", choices=["auto", "wrk", "python"], default="auto", help="load generator")
    agent = sub.add_parser("agent", parents=[common], help="a multi-tool agent turn, server- vs client-driven")
    agent.add_argument("--tools", type=int, default=5)
    agent.add_argument("--latency-ms", type=float, default=20.0)
    agent.add_argument("--turns", type=int, default=30)
    ttft = sub.add_parser("ttft", parents=[common], help="streaming time to first token")
    ttft.add_argument("--rounds", type=int, default=10)
    ttft.add_argument("--per-round", type=int, default=20)
    ttft.add_argument("--chunks", type=int, default=20)
    ttft.add_argument("--chunk-delay-ms", type=float, default=2.0)
    scenarios_extra.add_parsers(sub, common)
    responses.add_parser(sub, common)
    embeddings.add_parser(sub, common)
    controls.add_parser(sub, common)
    everything = sub.add_parser("all", parents=[common], help="every scenario with its defaults")
    everything.add_argument("--duration", type=float, default=10.0)
    args = p.parse_args(argv)
    if args.pin:
        os.sched_setaffinity(0, {0})  # the harness and its children (wrk, fake upstream) on CPU 0
    print(f"machine: {machine()}", flush=True)
    basic = {"latency": scenario_latency, "load": scenario_load, "agent": scenario_agent, "ttft": scenario_ttft}
    if args.scenario != "all":
        (basic | scenarios_extra.SCENARIOS | {"responses": responses.scenario_responses,
                                                     "embeddings": embeddings.scenario_embeddings,
                                                     "controls": controls.scenario_controls})[args.scenario](args)
        return
    defaults = {"rounds": 20, "per_round": 50}
    scenario_latency(argparse.Namespace(**vars(args) | defaults))
    scenario_ttft(argparse.Namespace(**vars(args) | {"rounds": 10, "per_round": 20, "chunks": 20, "chunk_delay_ms": 2}))
    scenario_agent(argparse.Namespace(**vars(args) | {"tools": 5, "latency_ms": 20.0, "turns": 30}))
    scenario_load(argparse.Namespace(**vars(args) | {"concurrency": "50,200", "tool": "auto"}))
    scenarios_extra.run_all(args)


if __name__ == "__main__":
    main()
