"""What every scenario shares: the JSON/markdown report, the targets under test, one load row.

Rows go to ``bench/results/<date>.jsonl``, or to the file named by ``$BENCH_RESULTS_FILE`` (smoke runs).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import platform
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench import servers
from bench.loadgen import (
    chat_body,
    cpu_seconds,
    machine_busy_seconds,
    own_cpu_seconds,
    peak_rss_mb,
    run_load,
)

RESULTS_DIR = servers.BENCH_DIR / "results"


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
        override = os.environ.get("BENCH_RESULTS_FILE")
        self.path = Path(override).resolve() if override else RESULTS_DIR / f"{dt.date.today().isoformat()}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
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
        shown = self.path.relative_to(servers.REPO) if self.path.is_relative_to(servers.REPO) else self.path
        print(f"\n(appended to {shown})", flush=True)


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
    elif mode == "bare-http1":
        proc = servers.start_bare(fake.base, cpus, client="http1")
    elif mode == "loopgate":
        proc = servers.start_loopgate(fake.base, getattr(args, "tool_source", "python"), cpus)
    elif mode == "litellm":
        proc = servers.start_litellm(fake.base, cpus)
    else:
        raise SystemExit(f"unknown mode {mode!r} (direct, bare, bare-http1, loopgate, litellm)")
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


# ----------------------------------------------------------------------------- load
LOAD_COLS = (
    "mode|kind|conc|RPS|p50 ms|p99 ms|TTFB p50 ms|errors|CPU ms/req|RSS idle/peak MB|start s|load1 / other CPU %"
)


def load_run(t: Target, stream: bool, conc: int, args: argparse.Namespace) -> tuple[list[Any], dict[str, Any]]:
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
