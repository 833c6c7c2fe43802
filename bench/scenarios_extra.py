"""Scenarios ``failover``, ``loop-cpu``, ``workers`` and ``streams-memory`` (registered by bench/run.py).

Same conventions as bench/run.py: everything on 127.0.0.1, every process stopped on the way out,
a markdown table printed and one JSON row per table row appended. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson

from bench import servers
from bench.common import Report, Target, ms, rotated, targets, wanted_modes
from bench.loadgen import (
    JSON_HEADERS,
    chat_body,
    cpu_seconds,
    machine_busy_seconds,
    own_cpu_seconds,
    peak_rss_mb,
    percentile,
    rss_mb,
    run_load,
    wrk_available,
)


def _gateway_or_skip(args: argparse.Namespace, report: Report) -> bool:
    ok, why = servers.gateway_runnable()
    if not ok:
        print(f"!! loopgate is not runnable yet ({why}); {report.scenario} is left to be filled", flush=True)
        report.skip("loopgate", f"gateway not runnable ({why})")
        report.print()
    return ok


# ----------------------------------------------------------------------------- failover
def failover_config(upstream: str, down_503: str, refused: str, breaker: bool) -> dict[str, Any]:
    """Routes ``bench`` (plain), ``bench-failover`` (503 first) and ``bench-failover-refused`` (nothing
    listens first), each failing over to the normal fake; no retries, no backoff."""
    cfg = servers.gateway_config(upstream)
    cfg["providers"] |= {
        "down503": {"type": "openai", "base_url": down_503, "api_key": "sk-bench"},
        "refused": {"type": "openai", "base_url": refused, "api_key": "sk-bench"},
    }
    good = {"provider": "fake", "model": "fake-model"}
    for route, first in (("bench-failover", "down503"), ("bench-failover-refused", "refused")):
        cfg["models"][route] = {"targets": [{"provider": first, "model": "fake-model"}, good], "retries": 0}
    if breaker:
        cfg["routing"] = {"backoff_base_s": 0, "breaker_failures": 3, "breaker_cooldown_s": 30}
    else:  # the breaker never opens: every request pays the failed attempt
        cfg["routing"] = {"backoff_base_s": 0, "breaker_failures": 1_000_000}
    return cfg


def _attempts(data: dict[str, Any]) -> str:
    out = []
    for a in (data.get("gateway") or {}).get("attempts") or []:
        err = a.get("error_class")
        out.append(f"{err} {a.get('status') or ''}".strip() if err else "ok")
    return " → ".join(out) or "?"


async def _timed(session: aiohttp.ClientSession, t: Target, n: int) -> tuple[list[float], dict[str, Any]]:
    """n sequential requests: latencies and the last response body."""
    body, out, raw = chat_body(t.model), [], b""
    for _ in range(n):
        t0 = time.perf_counter()
        async with session.post(t.url, data=body, headers=JSON_HEADERS) as resp:
            raw = await resp.read()
        out.append(time.perf_counter() - t0)
        if resp.status != 200:
            raise RuntimeError(f"{t.mode}: HTTP {resp.status}: {raw[:300]!r}")
    return out, orjson.loads(raw)


def _check_failover(t: Target, seen: str) -> None:
    first = seen.split(" → ")[0]
    if t.mode == "direct" or t.model == "bench":
        return
    if "breaker" in t.mode and first != "circuit_open":
        raise RuntimeError(f"{t.mode}: expected an open circuit, attempts were {seen}")
    if "breaker" not in t.mode and (first in ("ok", "circuit_open") or not seen.endswith("ok")):
        raise RuntimeError(f"{t.mode}: expected a failed first attempt then ok, attempts were {seen}")


async def _failover(ts: list[Target], rounds: int, per_round: int) -> dict[str, tuple[list[float], list[float], str]]:
    res: dict[str, tuple[list[float], list[float], str]] = {t.mode: ([], [], "") for t in ts}
    sessions = {t.mode: aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) for t in ts}
    try:
        for t in ts:  # warm-up; also opens the breaker-on circuits (3 failures)
            await _timed(sessions[t.mode], t, per_round)
        for r in range(rounds):
            for t in rotated(ts, r):
                lat, last = await _timed(sessions[t.mode], t, per_round)
                seen = _attempts(last) if t.mode != "direct" else "—"
                _check_failover(t, seen)
                p50s, p99s, _ = res[t.mode]
                res[t.mode] = ([*p50s, percentile(lat, 50)], [*p99s, percentile(lat, 99)], seen)
    finally:
        for s in sessions.values():
            await s.close()
    return res


def scenario_failover(args: argparse.Namespace) -> None:
    params = {"rounds": args.rounds, "per_round": args.per_round, "retries": 0, "backoff_base_s": 0}
    cols = ["mode", "route", "p50 ms", "p99 ms", "added p50 vs direct", "added p50 vs plain", "added p99 vs plain"]
    report = Report("failover", [*cols, "attempts (last request)"], params)
    if not _gateway_or_skip(args, report):
        return
    refused = f"http://{servers.HOST}:{servers.free_port()}"  # nothing listens there: connection refused
    with contextlib.ExitStack() as stack:
        fake = stack.enter_context(servers.start_fake())
        down = stack.enter_context(servers.start_fake(fail_status=503))
        off, on = (
            stack.enter_context(servers.start_loopgate("", config=failover_config(fake.base, down.base, refused, b)))
            for b in (False, True)
        )
        url_off, url_on = f"{off.base}/v1/chat/completions", f"{on.base}/v1/chat/completions"
        ts = [
            Target("direct", f"{fake.base}/chat/completions", "fake-model", fake),
            Target("loopgate plain", url_off, "bench", off),
            Target("failover 503", url_off, "bench-failover", off),
            Target("failover refused", url_off, "bench-failover-refused", off),
            Target("failover 503, breaker open", url_on, "bench-failover", on),
            Target("failover refused, breaker open", url_on, "bench-failover-refused", on),
        ]
        res = asyncio.run(_failover(ts, args.rounds, args.per_round))
    med = {mode: (statistics.median(a), statistics.median(b), seen) for mode, (a, b, seen) in res.items()}
    d50, plain50, plain99 = med["direct"][0], med["loopgate plain"][0], med["loopgate plain"][1]
    for t in ts:
        p50, p99, seen = med[t.mode]
        vs_plain = (ms(p50 - plain50), ms(p99 - plain99)) if t.mode != "direct" else ("—", "—")
        m = {"route": t.model, "p50_ms": ms(p50), "p99_ms": ms(p99), "added_p50_vs_direct_ms": ms(p50 - d50)}
        m |= {"added_p50_vs_plain_ms": vs_plain[0], "added_p99_vs_plain_ms": vs_plain[1], "attempts": seen}
        m["breaker"] = None if t.mode == "direct" else "on (3, 30 s)" if "breaker" in t.mode else "off (1e6)"
        report.add(t.mode, [t.model, ms(p50), ms(p99), ms(p50 - d50), *vs_plain, seen], m)
    report.print()


# ----------------------------------------------------------------------------- loop-cpu
async def _run_n(n: int, conc: int, one: Callable[[], Awaitable[None]]) -> None:
    left = n

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await one()

    await asyncio.gather(*(worker() for _ in range(conc)))


async def _loop_cpu(gw: servers.Proc, fake: servers.Proc, args: argparse.Namespace) -> dict[str, Any]:
    url, expected = f"{gw.base}/v1/chat/completions", f"Done after {args.tools} tool results."
    agent_body = orjson.dumps({"model": "bench-agent", "messages": [{"role": "user", "content": "Run bench_tool."}]})
    plain_body = chat_body("bench")
    out: dict[str, Any] = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=args.concurrency)) as session:

        async def plain() -> None:
            async with session.post(url, data=plain_body, headers=JSON_HEADERS) as resp:
                raw = await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"plain: HTTP {resp.status}: {raw[:300]!r}")

        async def agent() -> None:
            async with session.post(url, data=agent_body, headers=JSON_HEADERS) as resp:
                raw = await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"agent: HTTP {resp.status}: {raw[:300]!r}")
            data = orjson.loads(raw)
            iterations = (data.get("gateway") or {}).get("iterations")
            text = data["choices"][0]["message"].get("content")
            if iterations != args.tools + 1 or text != expected:
                raise RuntimeError(f"agent turn: {iterations} iterations, final text {text!r}")

        await _run_n(20, args.concurrency, agent)  # warm-up
        await _run_n(100, args.concurrency, plain)
        c0 = cpu_seconds(gw.pid)
        await asyncio.sleep(1.0)
        out["idle_cpu_ms_per_s"] = round((cpu_seconds(gw.pid) - c0) * 1000, 1)
        for name, n, one in (("plain", args.plain, plain), ("agent", args.turns, agent)):
            c0, f0, t0 = cpu_seconds(gw.pid), cpu_seconds(fake.pid), time.perf_counter()
            await _run_n(n, args.concurrency, one)
            out[name] = (cpu_seconds(gw.pid) - c0, cpu_seconds(fake.pid) - f0, time.perf_counter() - t0)
    return out


def scenario_loop_cpu(args: argparse.Namespace) -> None:
    params = {"turns": args.turns, "plain": args.plain, "tools": args.tools, "concurrency": args.concurrency}
    params |= {"tool_source": args.tool_source, "upstream_latency_ms": 0}
    cols = ["mode", "requests", "model calls", "gateway CPU ms", "CPU ms/request", "CPU ms/model call", "wall s"]
    report = Report("loop-cpu", [*cols, "note"], params)
    if not _gateway_or_skip(args, report):
        return
    with servers.start_fake(agent_tools=args.tools) as fake, servers.start_loopgate(fake.base, args.tool_source) as gw:
        res = asyncio.run(_loop_cpu(gw, fake, args))
    calls = args.tools + 1
    rows = [
        ("plain request (1 model call)", args.plain, 1, *res["plain"]),
        (f"agent turn ({args.tools} server tools, {calls} model calls)", args.turns, calls, *res["agent"]),
    ]
    per_req = {}
    for name, n, k, cpu, fake_cpu, wall in rows:
        per_req[k] = cpu * 1000 / n
        m = {"requests": n, "model_calls": n * k, "cpu_ms": ms(cpu), "cpu_ms_per_request": round(per_req[k], 3)}
        m |= {"cpu_ms_per_model_call": round(per_req[k] / k, 3), "wall_s": round(wall, 2)}
        m |= {"upstream_cpu_ms_per_model_call": round(fake_cpu * 1000 / (n * k), 3)}
        m["idle_cpu_ms_per_s"] = res["idle_cpu_ms_per_s"]
        note = f"idle gateway CPU {res['idle_cpu_ms_per_s']} ms/s" if k == 1 else f"{n / wall:.0f} turns/s"
        report.add(name, [n, n * k, ms(cpu), m["cpu_ms_per_request"], m["cpu_ms_per_model_call"], m["wall_s"], note], m)
    marginal = round((per_req[calls] - per_req[1]) / args.tools, 3)
    verdict = "within" if marginal <= 1.0 else "ABOVE"
    m = {"marginal_cpu_ms_per_iteration": marginal, "target_ms": 1.0, "within_target": marginal <= 1.0}
    note = f"(turn - plain) / {args.tools}: {verdict} the 1 ms target"
    report.add("loop: marginal CPU per extra iteration", ["—", "—", "—", "—", marginal, "—", note], m)
    report.print()


# ----------------------------------------------------------------------------- workers
def _workers_row(gw: servers.Proc, fake: servers.Proc, conc: int, idle: float, args: argparse.Namespace) -> Any:
    """One JSON load run against a (multi-worker) gateway: table cells and metrics."""
    url, load1 = f"{gw.base}/v1/chat/completions", round(os.getloadavg()[0], 2)
    c0, f0, own0, busy0 = cpu_seconds(gw.pid), cpu_seconds(fake.pid), own_cpu_seconds(), machine_busy_seconds()
    t0 = time.perf_counter()
    res = run_load(url, chat_body("bench"), conc, args.duration, False, args.tool)
    wall = time.perf_counter() - t0
    sut, up = cpu_seconds(gw.pid) - c0, cpu_seconds(fake.pid) - f0
    own, busy = own_cpu_seconds() - own0, machine_busy_seconds() - busy0  # own: the harness and all it started
    other_pct = round(max(0.0, busy - own) / (wall * (os.cpu_count() or 1)) * 100, 1)
    wpids = servers.worker_pids(gw.pid)
    peak = round(sum(peak_rss_mb(p, tree=False) for p in wpids), 1)
    tree = round(rss_mb(gw.pid), 1)
    cpu_req = round(sut * 1000 / max(1, res.requests), 3)
    m = res.as_dict() | {"worker_pids": len(wpids), "server_cpu_ms_per_req": cpu_req}
    m |= {"gateway_cores": round(sut / wall, 2), "loadgen_fake_cores": round((own - sut) / wall, 2)}
    m |= {"fake_cores": round(up / wall, 2), "rss_workers_idle_mb": idle, "rss_workers_peak_mb": peak}
    m |= {"rss_tree_mb": tree, "startup_s": round(gw.startup_s, 3), "loadavg_1m_before": load1}
    m["other_cpu_pct"] = other_pct
    cells = [conc, res.rps, res.p50_ms, res.p99_ms, res.errors, cpu_req, m["gateway_cores"]]
    cells += [m["loadgen_fake_cores"], f"{idle}/{peak}", tree, m["startup_s"], f"{load1} / {other_pct}"]
    return cells, m


def scenario_workers(args: argparse.Namespace) -> None:
    tool = "wrk" if args.tool == "wrk" or (args.tool == "auto" and wrk_available()) else "python-aiohttp"
    params = {"duration_s": args.duration, "tool": tool, "kind": "json", "cpus": os.cpu_count()}
    cols = "workers|conc|RPS|p50 ms|p99 ms|errors|CPU ms/req|gateway cores|loadgen+fake cores"
    cols += "|worker RSS idle/peak MB|tree RSS MB|start s|load1 / other CPU %"
    report = Report("workers", cols.split("|"), params)
    if not _gateway_or_skip(args, report):
        return
    with servers.start_fake() as fake:
        for w in (int(x) for x in args.workers.split(",")):
            with servers.start_loopgate(fake.base, args.tool_source, workers=w) as gw:
                idle = round(sum(rss_mb(p, tree=False) for p in servers.worker_pids(gw.pid)), 1)
                run_load(f"{gw.base}/v1/chat/completions", chat_body("bench"), 50, 2.0, False, args.tool)  # warm-up
                for conc in (int(c) for c in args.concurrency.split(",")):
                    cells, m = _workers_row(gw, fake, conc, idle, args)
                    report.add(str(w), cells, m | {"workers": w})
    report.print()


# ----------------------------------------------------------------------------- streams-memory
def raise_nofile(needed: int) -> tuple[int, int, str | None]:
    """Soft RLIMIT_NOFILE up to the hard limit (children inherit it); a warning when still below ``needed``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(soft, needed) if hard == resource.RLIM_INFINITY else hard
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        soft = want
    if soft >= needed:
        return soft, hard, None
    return (
        soft,
        hard,
        (
            f"RLIMIT_NOFILE is {soft} (hard limit {hard}) but ~{needed} descriptors are needed (a proxy holds a client "
            "and an upstream socket per stream): expect connection errors; raise the hard limit (ulimit -Hn, "
            "LimitNOFILE=, docker --ulimit nofile=) or lower --streams"
        ),
    )


async def _burst(url: str, model: str, n: int, timeout_s: float, pid: int) -> dict[str, Any]:
    """n concurrent streams; the server's RSS sampled every 0.25 s meanwhile."""
    samples: list[float] = []
    stop = asyncio.Event()
    durations: list[float] = []
    errors: list[str] = []
    state = {"open": 0, "max_open": 0, "done": 0}
    body = chat_body(model, True)

    async def sampler() -> None:
        while not stop.is_set():
            samples.append(rss_mb(pid))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.25)

    connector = aiohttp.TCPConnector(limit=max(n, 1000), limit_per_host=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:

        async def one() -> None:
            t0, opened, tail = time.perf_counter(), False, b""
            try:
                async with session.post(url, data=body, headers=JSON_HEADERS) as resp:
                    async for chunk in resp.content.iter_any():
                        if not opened:
                            opened = True
                            state["open"] += 1
                            state["max_open"] = max(state["max_open"], state["open"])
                        tail = (tail + chunk)[-64:]
                if resp.status != 200:
                    errors.append(f"HTTP {resp.status}")
                elif b"[DONE]" not in tail:
                    errors.append("stream ended without [DONE]")
                else:
                    state["done"] += 1
                    durations.append(time.perf_counter() - t0)
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                errors.append(f"{type(exc).__name__}: {exc}"[:200])
            finally:
                if opened:
                    state["open"] -= 1

        task = asyncio.create_task(sampler())
        t0 = time.perf_counter()
        try:
            await asyncio.gather(*(one() for _ in range(n)))
        finally:
            stop.set()
            await task
        wall = time.perf_counter() - t0
    return state | {"samples": samples, "durations": durations, "errors": errors, "wall": wall}


def scenario_streams_memory(args: argparse.Namespace) -> None:
    soft, hard, warning = raise_nofile(2 * args.streams + 256)  # before anything is spawned: children inherit it
    params = {"streams": args.streams, "chunks": args.chunks, "chunk_delay_ms": args.chunk_delay_ms}
    params |= {"rlimit_nofile": soft, "rlimit_nofile_hard": hard}
    cols = "mode|streams|done with [DONE]|errors|max open|RSS idle MB|RSS peak MB|KB per stream|RSS after MB"
    cols += "|stream p50 / max s|CPU ms/stream"
    report = Report("streams-memory", cols.split("|"), params)
    if warning:
        print(f"!! {warning}", flush=True)
    modes = wanted_modes(args, report)
    timeout_s = args.chunks * args.chunk_delay_ms / 1000 + 60
    with servers.start_fake(chunks=args.chunks, chunk_delay_ms=args.chunk_delay_ms) as fake:
        for mode in modes:
            with targets([mode], fake, args) as (t,):
                asyncio.run(_burst(t.url, t.model, 10, timeout_s, t.proc.pid))  # warm-up: the stream path
                idle, c0 = rss_mb(t.proc.pid), cpu_seconds(t.proc.pid)
                r = asyncio.run(_burst(t.url, t.model, args.streams, timeout_s, t.proc.pid))
                cpu, after = cpu_seconds(t.proc.pid) - c0, rss_mb(t.proc.pid)
                peak = max(r["samples"] or [idle])
                per_kb = round((peak - idle) * 1024 / max(1, args.streams), 1)
                dur = r["durations"] or [float("nan")]
                m = {"streams": args.streams, "done": r["done"], "errors": len(r["errors"]), "max_open": r["max_open"]}
                m |= {"rss_idle_mb": round(idle, 1), "rss_peak_mb": round(peak, 1), "kb_per_stream": per_kb}
                m |= {"rss_after_mb": round(after, 1), "vmhwm_mb": round(peak_rss_mb(t.proc.pid), 1)}
                m |= {"stream_p50_s": round(statistics.median(dur), 3), "stream_max_s": round(max(dur), 3)}
                m |= {"wall_s": round(r["wall"], 2), "rss_samples": len(r["samples"]), "rlimit_warning": warning}
                m |= {"cpu_ms_per_stream": round(cpu * 1000 / max(1, args.streams), 3)}
                m["error_samples"] = sorted(set(r["errors"]))[:5]
                cells = [args.streams, r["done"], len(r["errors"]), r["max_open"], m["rss_idle_mb"], m["rss_peak_mb"]]
                cells += [per_kb, m["rss_after_mb"], f"{m['stream_p50_s']} / {m['stream_max_s']}"]
                report.add(mode, [*cells, m["cpu_ms_per_stream"]], m)
    report.print()
    if warning:
        print(f"!! {warning}", flush=True)


# ----------------------------------------------------------------------------- CLI
SCENARIOS: dict[str, Callable[[argparse.Namespace], None]] = {
    "failover": scenario_failover,
    "loop-cpu": scenario_loop_cpu,
    "workers": scenario_workers,
    "streams-memory": scenario_streams_memory,
}
ALL_DEFAULTS: list[tuple[str, dict[str, Any]]] = [
    ("failover", {"rounds": 20, "per_round": 50}),
    ("loop-cpu", {"turns": 500, "plain": 3000, "tools": 5, "concurrency": 4}),
    ("workers", {"concurrency": "50,200", "tool": "auto", "workers": "1,2"}),
    ("streams-memory", {"streams": 1000, "chunks": 20, "chunk_delay_ms": 250.0}),
]


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    fo = sub.add_parser("failover", parents=[common], help="cost of a failover (503 / connection refused)")
    fo.add_argument("--rounds", type=int, default=20)
    fo.add_argument("--per-round", type=int, default=50)
    lc = sub.add_parser("loop-cpu", parents=[common], help="gateway CPU per tool-loop iteration")
    lc.add_argument("--turns", type=int, default=500, help="agent turns (each tools+1 model calls)")
    lc.add_argument("--plain", type=int, default=3000, help="plain one-call requests")
    lc.add_argument("--tools", type=int, default=5)
    lc.add_argument("--concurrency", type=int, default=4)
    wk = sub.add_parser("workers", parents=[common], help="JSON load with --workers 1 vs 2")
    wk.add_argument("--duration", type=float, default=10.0, help="seconds per run")
    wk.add_argument("--concurrency", default="50,200")
    wk.add_argument("--tool", choices=["auto", "wrk", "python"], default="auto", help="load generator")
    wk.add_argument("--workers", default="1,2", help="comma list of worker counts")
    sm = sub.add_parser("streams-memory", parents=[common], help="RSS under many concurrent slow streams")
    sm.add_argument("--streams", type=int, default=1000)
    sm.add_argument("--chunks", type=int, default=20)
    sm.add_argument("--chunk-delay-ms", type=float, default=250.0)


def run_all(args: argparse.Namespace) -> None:
    for name, defaults in ALL_DEFAULTS:
        SCENARIOS[name](argparse.Namespace(**vars(args) | defaults))
