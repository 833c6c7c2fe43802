"""Scenario ``controls``: what every issue-15 control costs together, plain vs all on (bench/README.md).

Two Loopgate processes on one fake upstream, measured in the same run, interleaved round by round
so both see the same machine:

- ``plain``: the usual bench config (no auth, memory store, no usage price, text logs, no traces);
- ``controls``: a managed key (created through ``/admin/keys``) with ``rpm``, ``tpm`` and
  ``max_concurrent`` high enough never to refuse, of tenant ``bench`` whose ``budget`` is huge
  (so it is read, never hit), a priced target (``usage_cost`` and usage rows), the Redis store
  (``--redis``), traces at ``sample_ratio: 1`` to a local OTLP/HTTP sink (a thread of this harness
  that accepts and drops every export) and ``logging: {format: json, access: true}``.

Per round: closed-loop JSON load at ``--concurrency`` (50) connections for ``--duration`` s on each
(order alternates), then ``--per-round`` sequential requests on one keep-alive connection to each.
Reported: RPS (and controls as % of plain), p50/p99 under load, gateway CPU ms per request
(utime+stime of its process tree), the sequential p50 (median of round medians) and the added
sequential p50 = controls minus plain. Every answer must be a 200 (a refusal would be an error).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import time
import urllib.request
from typing import Any

import aiohttp

from bench import servers
from bench.common import Report, cpus_for
from bench.instructions import ADMIN_KEY, _otlp_sink
from bench.loadgen import (
    chat_body,
    cpu_seconds,
    machine_busy_seconds,
    own_cpu_seconds,
    percentile,
    run_wrk_load,
    wrk_available,
)

_DROPPED = re.compile(r"^loopgate_trace_spans_dropped_total\{[^}]*\} (\S+)$", re.M)
_HIGH = {"rpm": 100_000_000, "tpm": 1_000_000_000, "max_concurrent": 10_000}
_BUDGET = {"limit": 1e15, "unit": "tokens", "period": "month"}


CONTROLS = ("limits", "budget", "price", "redis", "tracing", "logs")


def controls_config(upstream: str, redis_url: str, otlp: str, on: tuple[str, ...] = CONTROLS) -> dict[str, Any]:
    """The bench config with the named controls of issue 15 on (all by default; see the module docstring).

    The managed key is always there (auth on); ``limits`` gives it rpm, tpm and max_concurrent."""
    config = servers.gateway_config(upstream)
    config["auth"] = {"admin_keys": [{"key": ADMIN_KEY, "name": "bench"}]}
    if "budget" in on:
        config["tenants"] = {"bench": {"budget": _BUDGET}}
    if "redis" in on:
        config["store"] = {"url": redis_url}
    if "price" in on:
        config["providers"]["fake"]["prices"] = {"fake-model": {"input_per_mtok": 2, "output_per_mtok": 8}}
    if "tracing" in on:
        config["observability"] = {"otlp_endpoint": otlp, "sample_ratio": 1.0}
    if "logs" in on:
        config["logging"] = {"format": "json", "access": True}
    return config


async def _managed_key(base: str, limits: bool) -> str:
    async with aiohttp.ClientSession() as session, session.post(
            f"{base}/admin/keys", headers={"authorization": f"Bearer {ADMIN_KEY}"},
            json={"tenant": "bench", "name": "bench-controls", **(_HIGH if limits else {})}) as resp:
        resp.raise_for_status()
        return str((await resp.json())["key"])


async def _load(url: str, headers: dict[str, str], body: bytes, concurrency: int, duration_s: float
                ) -> dict[str, Any]:
    latencies: list[float] = []
    errors: list[str] = []
    deadline = time.perf_counter() + duration_s
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:

        async def worker() -> None:
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                try:
                    async with session.post(url, data=body, headers=headers) as resp:
                        raw = await resp.read()
                except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                    errors.append(type(exc).__name__)
                    continue
                if resp.status != 200:
                    errors.append(f"HTTP {resp.status}: {raw[:120]!r}")
                    continue
                latencies.append(time.perf_counter() - t0)

        t_start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - t_start
    lat_ms = [x * 1000 for x in latencies]
    return {"requests": len(latencies), "errors": len(errors), "error_samples": sorted(set(errors))[:3],
            "rps": round(len(latencies) / elapsed, 1), "p50_ms": round(percentile(lat_ms, 50), 2),
            "p99_ms": round(percentile(lat_ms, 99), 2), "elapsed_s": round(elapsed, 2)}


async def _sequential(url: str, headers: dict[str, str], body: bytes, n: int) -> list[float]:
    out = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as session:
        for _ in range(n):
            t0 = time.perf_counter()
            async with session.post(url, data=body, headers=headers) as resp:
                raw = await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"HTTP {resp.status}: {raw[:200]!r}")
            out.append(time.perf_counter() - t0)
    return out


def _spans_dropped(base: str) -> int:
    """Spans the gateway dropped (``loopgate_trace_spans_dropped_total``, every reason): a trace bench
    that drops spans does less work than it claims, so the row says how many."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return int(sum(float(value) for value in _DROPPED.findall(text)))


def _load_row(proc: servers.Proc, url: str, headers: dict[str, str], body: bytes, conc: int,
              duration: float, tool: str = "python") -> dict[str, Any]:
    cpu0, own0, busy0 = cpu_seconds(proc.pid), own_cpu_seconds(), machine_busy_seconds()
    worker0 = cpu_seconds(proc.pid, tree=False)
    if tool == "wrk":
        done = run_wrk_load(url, body, conc, duration, authorization=headers.get("authorization"))
        res = {"requests": done.requests, "errors": done.errors, "error_samples": done.error_samples,
               "rps": done.rps, "p50_ms": done.p50_ms, "p99_ms": done.p99_ms, "elapsed_s": done.duration_s}
    else:
        res = asyncio.run(_load(url, headers, body, conc, duration))
    cpu_ms = (cpu_seconds(proc.pid) - cpu0) * 1000 / max(1, res["requests"])
    worker_ms = (cpu_seconds(proc.pid, tree=False) - worker0) * 1000 / max(1, res["requests"])
    other = (machine_busy_seconds() - busy0) - (own_cpu_seconds() - own0)
    other_pct = round(max(0.0, other) / (res["elapsed_s"] * (os.cpu_count() or 1)) * 100, 1)
    return res | {"cpu_ms_per_req": round(cpu_ms, 3), "worker_cpu_ms_per_req": round(worker_ms, 4),
                  "other_cpu_pct": other_pct}


def with_rollups(config: dict[str, Any], state: str) -> dict[str, Any]:
    """Both gateways write the console's rollups (the default) or neither does (``--rollups off``)."""
    observability = config.setdefault("observability", {})
    observability["rollups"] = {"enabled": state == "on"}
    return config


def scenario_controls(args: argparse.Namespace) -> None:
    on = tuple(name.strip() for name in args.controls.split(",") if name.strip())
    unknown = set(on) - set(CONTROLS)
    if unknown:
        raise SystemExit(f"--controls: unknown {sorted(unknown)} (known: {', '.join(CONTROLS)})")
    tool = "wrk" if args.tool == "wrk" or (args.tool == "auto" and wrk_available()) else "python"
    params = {"duration_s": args.duration, "concurrency": args.concurrency, "rounds": args.rounds,
              "per_round": args.per_round, "redis": args.redis, "controls": ",".join(on), "tool": tool,
              "rollups": args.rollups}
    cols = ["setup", "RPS (mean)", "% of plain", "% per round (median)", "load p50 ms", "load p99 ms", "errors",
            "CPU ms/req", "worker CPU ms/req", "seq p50 ms", "added seq p50 ms", "other CPU %", "spans dropped"]
    report = Report("controls", cols, params)
    ok, why = servers.gateway_runnable()
    if not ok:
        report.skip("loopgate", f"gateway not runnable ({why})")
        report.print()
        return
    body = chat_body("bench")
    otlp = _otlp_sink()
    loads: dict[str, list[dict[str, Any]]] = {"plain": [], "controls": []}
    seq: dict[str, list[float]] = {"plain": [], "controls": []}
    with servers.start_fake(cpus=cpus_for(args, "fake")) as fake, \
            servers.start_loopgate(fake.base, cpus=cpus_for(args, "sut"),
                                   config=with_rollups(servers.gateway_config(fake.base), args.rollups)) as plain, \
            servers.start_loopgate(fake.base, cpus=cpus_for(args, "sut"),
                                   config=with_rollups(controls_config(fake.base, args.redis, otlp, on),
                                                       args.rollups)) as ctl:
        key = asyncio.run(_managed_key(ctl.base, "limits" in on))
        base_headers = {"Content-Type": "application/json"}
        setups = {"plain": (plain, base_headers), "controls": (ctl, base_headers | {"authorization": f"Bearer {key}"})}
        for proc, headers in setups.values():  # warm-up: connections, caches, lazy imports
            url = f"{proc.base}/v1/chat/completions"
            asyncio.run(_load(url, headers, body, args.concurrency, 2.0))
            asyncio.run(_sequential(url, headers, body, args.per_round))
        for r in range(args.rounds):
            order = ["plain", "controls"] if r % 2 == 0 else ["controls", "plain"]
            for name in order:
                proc, headers = setups[name]
                loads[name].append(_load_row(proc, f"{proc.base}/v1/chat/completions", headers, body,
                                             args.concurrency, args.duration, tool))
            for name in order:
                proc, headers = setups[name]
                lat = asyncio.run(_sequential(f"{proc.base}/v1/chat/completions", headers, body, args.per_round))
                seq[name].append(percentile(lat, 50) * 1000)
        spans_dropped = {"plain": 0, "controls": _spans_dropped(ctl.base) if "tracing" in on else 0}
    rps = {name: statistics.fmean(m["rps"] for m in rows) for name, rows in loads.items()}
    seq50 = {name: statistics.median(v) for name, v in seq.items()}
    for name, rows in loads.items():
        share = rps[name] / rps["plain"] * 100
        # Each round's pair, measured back to back: how far the machine moved the ratio within the run.
        paired = [x["rps"] / p["rps"] * 100 for x, p in zip(rows, loads["plain"], strict=True)]
        added = seq50[name] - seq50["plain"]
        m = {"rps_mean": round(rps[name], 1), "rps_rounds": [x["rps"] for x in rows], "pct_of_plain": round(share, 1),
             "pct_of_plain_rounds": [round(x, 1) for x in paired],
             "load_p50_ms": statistics.median(x["p50_ms"] for x in rows),
             "load_p99_ms": statistics.median(x["p99_ms"] for x in rows),
             "errors": sum(x["errors"] for x in rows), "error_samples": rows[-1]["error_samples"],
             "pct_of_plain_round_median": round(statistics.median(paired), 1),
             "cpu_ms_per_req": round(statistics.fmean(x["cpu_ms_per_req"] for x in rows), 3),
             "worker_cpu_ms_per_req": round(statistics.fmean(x["worker_cpu_ms_per_req"] for x in rows), 4),
             "seq_p50_ms": round(seq50[name], 3), "seq_p50_rounds_ms": [round(x, 3) for x in seq[name]],
             "added_seq_p50_ms": round(added, 3),
             "other_cpu_pct": max(x["other_cpu_pct"] for x in rows), "spans_dropped": spans_dropped[name]}
        spread = f"{min(paired):.1f}-{max(paired):.1f} ({statistics.median(paired):.1f})"
        cells = [m["rps_mean"], round(share, 1), spread,
                 m["load_p50_ms"], m["load_p99_ms"], m["errors"], m["cpu_ms_per_req"], m["worker_cpu_ms_per_req"],
                 m["seq_p50_ms"], m["added_seq_p50_ms"], m["other_cpu_pct"], m["spans_dropped"]]
        report.add(name, cells, m)
    report.print()


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("controls", parents=[common], help="plain vs every issue-15 control on (keys, limits, "
                                                           "budget, usage, Redis, traces, JSON logs)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per load row")
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (plain and controls alternate first)")
    p.add_argument("--per-round", type=int, default=200, help="sequential requests per setup and round")
    p.add_argument("--redis", default="redis://127.0.0.1:6379/5", help="store.url of the controls gateway")
    p.add_argument("--tool", choices=["auto", "wrk", "python"], default="auto",
                   help="load generator of the load rows (auto: wrk when installed, as for `load`: a Python "
                        "generator takes a share of a small machine's CPUs); sequential rows use aiohttp")
    p.add_argument("--rollups", choices=["on", "off"], default="on",
                   help="the console's rollups on both gateways (on: the default; off: to measure what they cost)")
    p.add_argument("--controls", default=",".join(CONTROLS),
                   help="which controls the second gateway has on (a managed key always): " + ",".join(CONTROLS))
