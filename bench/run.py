"""Loopgate benchmarks: ``python -m bench.run {latency,load,agent,ttft,all} [options]`` from the repo root.

Each scenario starts what it needs on 127.0.0.1 (fake upstream, bare floor, Loopgate, optionally
LiteLLM), stops all of it on the way out, prints markdown table rows and appends one JSON object per
row to ``bench/results/<date>.jsonl``. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from bench import servers
from bench.loadgen import (
    chat_body,
    cpu_seconds,
    machine_busy_seconds,
    own_cpu_seconds,
    peak_rss_mb,
    percentile,
    run_load,
    stream_timing,
    wrk_available,
)
from bench.tools import bench_tool

RESULTS_DIR = servers.BENCH_DIR / "results"
TOOL_DEF = {
    "type": "function",
    "function": {
        "name": "bench_tool",
        "description": "A benchmark tool that answers at once.",
        "parameters": {"type": "object", "properties": {"step": {"type": "integer"}}},
    },
}


@dataclass
class Target:
    mode: str
    url: str  # the chat completions endpoint
    model: str
    proc: servers.Proc  # the server under test (the fake upstream itself for "direct")


# ----------------------------------------------------------------------------- output
def machine() -> dict[str, Any]:
    git = ["git", "-C", str(servers.REPO)]  # read-only git calls
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run([*git, "diff", "--quiet", "HEAD", "--", "gateway"], capture_output=True).returncode != 0
    return {
        "cpus": os.cpu_count(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "commit": commit.stdout.strip() or None,
        "gateway_uncommitted_changes": dirty,
    }


class Report:
    """Prints a markdown table and appends every row as JSON to bench/results/<date>.jsonl."""

    def __init__(self, scenario: str, columns: list[str], params: dict[str, Any]) -> None:
        self.scenario, self.columns, self.params = scenario, columns, params
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        self.path = RESULTS_DIR / f"{dt.date.today().isoformat()}.jsonl"
        self.rows: list[list[str]] = []
        self.skipped: list[list[str]] = []

    def add(self, mode: str, cells: list[Any], metrics: dict[str, Any], extra: dict[str, Any] | None = None) -> None:
        self.rows.append([mode, *(f"{c:.2f}" if isinstance(c, float) else str(c) for c in cells)])
        print(f"  {self.scenario} {mode}: " + ", ".join(f"{k}={v}" for k, v in metrics.items()), flush=True)
        record = {"ts": dt.datetime.now().isoformat(timespec="seconds"), "scenario": self.scenario, "mode": mode}
        record |= {"machine": machine(), "params": self.params | (extra or {}), "metrics": metrics}
        with open(self.path, "ab") as f:
            f.write(orjson.dumps(record) + b"\n")

    def skip(self, mode: str, reason: str) -> None:
        self.skipped.append([mode, *(["—"] * (len(self.columns) - 2)), f"not run: {reason}"])

    def print(self) -> None:
        print(f"\n### {self.scenario} ({', '.join(f'{k}={v}' for k, v in self.params.items())})\n")
        print("| " + " | ".join(self.columns) + " |")
        print("|" + "---|" * len(self.columns))
        for row in self.rows + self.skipped:
            print("| " + " | ".join(row + [""] * (len(self.columns) - len(row))) + " |")
        print(f"\n(appended to {self.path.relative_to(servers.REPO)})", flush=True)


# ----------------------------------------------------------------------------- targets
def wanted_modes(args: argparse.Namespace, report: Report | None = None) -> list[str]:
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if args.litellm and "litellm" not in modes:
        modes.append("litellm")
    if "loopgate" in modes:
        ok, why = servers.gateway_runnable()
        if not ok:
            print(f"!! loopgate is not runnable yet ({why}); its rows are left to be filled", flush=True)
            modes.remove("loopgate")
            if report is not None:
                report.skip("loopgate", f"gateway not runnable ({why})")
    return modes


def cpus_for(args: argparse.Namespace, role: str) -> set[int] | None:
    """With --pin: the server under test gets CPU 1; the harness, load generator and fake upstream CPU 0."""
    if not args.pin:
        return None
    return {1} if role == "sut" else {0}


def start_target(mode: str, fake: servers.Proc, args: argparse.Namespace) -> Target:
    cpus = cpus_for(args, "sut")
    if mode == "direct":
        return Target(mode, f"{fake.base}/chat/completions", "fake-model", fake)
    if mode == "bare":
        proc = servers.start_bare(fake.base, cpus)
    elif mode == "loopgate":
        proc = servers.start_loopgate(fake.base, getattr(args, "tool_source", "python"), cpus)
    elif mode == "litellm":
        proc = servers.start_litellm(fake.base, cpus)
    else:
        raise SystemExit(f"unknown mode {mode!r} (direct, bare, loopgate, litellm)")
    return Target(mode, f"{proc.base}/v1/chat/completions", "bench", proc)


@contextlib.contextmanager
def targets(modes: list[str], fake: servers.Proc, args: argparse.Namespace) -> Iterator[list[Target]]:
    with contextlib.ExitStack() as stack:
        out = []
        for mode in modes:
            t = start_target(mode, fake, args)
            if t.proc is not fake:
                stack.callback(t.proc.stop)
            out.append(t)
        yield out


def rotated(items: list[Target], r: int) -> list[Target]:
    k = r % len(items)
    return items[k:] + items[:k]


def ms(x: float) -> float:
    return round(x * 1000, 3)


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


# ----------------------------------------------------------------------------- load
LOAD_COLS = (
    "mode|kind|conc|RPS|p50 ms|p99 ms|TTFB p50 ms|errors|CPU ms/req|RSS idle/peak MB|start s|load1 / other CPU %"
)


def _load_run(t: Target, stream: bool, conc: int, args: argparse.Namespace) -> tuple[list[Any], dict[str, Any]]:
    """One load run: table cells and metrics (server CPU per request, peak RSS, foreign CPU on the machine)."""
    load1 = round(os.getloadavg()[0], 2)
    cpu0, own0, busy0 = cpu_seconds(t.proc.pid), own_cpu_seconds(), machine_busy_seconds()
    t0 = time.perf_counter()
    res = run_load(t.url, chat_body(t.model, stream), conc, args.duration, stream, args.tool)
    wall = time.perf_counter() - t0
    cpu_req = round((cpu_seconds(t.proc.pid) - cpu0) * 1000 / max(1, res.requests), 3)
    other = (machine_busy_seconds() - busy0) - (own_cpu_seconds() - own0)  # CPU used by processes not ours
    other_pct = round(max(0.0, other) / (wall * (os.cpu_count() or 1)) * 100, 1)
    idle, peak = round(t.proc.idle_rss_mb, 1), round(peak_rss_mb(t.proc.pid), 1)
    startup = round(t.proc.startup_s, 3) if t.mode != "direct" else None
    kind = "stream" if stream else "json"
    m = res.as_dict() | {"kind": kind, "server_cpu_ms_per_req": cpu_req, "rss_idle_mb": idle, "rss_peak_mb": peak}
    m |= {"startup_s": startup, "loadavg_1m_before": load1, "other_cpu_pct": other_pct}
    ttfb = res.ttfb_p50_ms if res.ttfb_p50_ms is not None else "—"
    cells = [kind, conc, res.rps, res.p50_ms, res.p99_ms, ttfb, res.errors, cpu_req, f"{idle}/{peak}"]
    return [*cells, startup if startup is not None else "—", f"{load1} / {other_pct}"], m


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
                        report.add(mode, *_load_run(t, stream, conc, args))
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
    common.add_argument("--modes", default="direct,bare,loopgate", help="comma list of direct,bare,loopgate,litellm")
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
    everything = sub.add_parser("all", parents=[common], help="every scenario with its defaults")
    everything.add_argument("--duration", type=float, default=10.0)
    args = p.parse_args(argv)
    if args.pin:
        os.sched_setaffinity(0, {0})  # the harness and its children (wrk, fake upstream) on CPU 0
    print(f"machine: {machine()}", flush=True)
    if args.scenario != "all":
        {"latency": scenario_latency, "load": scenario_load, "agent": scenario_agent, "ttft": scenario_ttft}[
            args.scenario
        ](args)
        return
    defaults = {"rounds": 20, "per_round": 50}
    scenario_latency(argparse.Namespace(**vars(args) | defaults))
    scenario_ttft(argparse.Namespace(**vars(args) | {"rounds": 10, "per_round": 20, "chunks": 20, "chunk_delay_ms": 2}))
    scenario_agent(argparse.Namespace(**vars(args) | {"tools": 5, "latency_ms": 20.0, "turns": 30}))
    scenario_load(argparse.Namespace(**vars(args) | {"concurrency": "50,200", "tool": "auto"}))


if __name__ == "__main__":
    main()
