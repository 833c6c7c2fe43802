"""Load generation and process measurement for the benchmarks.

- ``run_python_load``: closed-loop load on one aiohttp session with a fixed number of concurrent
  workers, bounded by duration and request count; RPS, p50/p99 latency, errors and, for streams,
  time to first byte.
- ``run_wrk_load``: the same measurement with ``wrk`` (C, far cheaper per request than a Python
  client on a 2-core machine) when it is installed; streams have no TTFB there.
- ``stream_timing``: one streamed request: time to first byte, to first content token, to the end.
- ``/proc`` helpers (no psutil): CPU seconds (utime+stime) and RSS of a process tree, and
  ``wait_healthy`` for start-up time.

CLI: ``python bench/loadgen.py URL [--body JSON] [--stream] -c 50 -d 10 [--tool wrk|python]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp
import orjson

CLK_TCK = os.sysconf("SC_CLK_TCK")
JSON_HEADERS = {"Content-Type": "application/json"}


# ----------------------------------------------------------------------------- /proc helpers
def descendants(pid: int) -> list[int]:
    """pid and every live descendant (via /proc/<pid>/task/<tid>/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return out


def cpu_seconds(pid: int, tree: bool = True) -> float:
    """utime+stime of pid (and its descendants) in seconds."""
    total = 0
    for p in descendants(pid) if tree else [pid]:
        try:
            with open(f"/proc/{p}/stat") as f:
                stat = f.read()
        except FileNotFoundError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # the command name may hold spaces
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
    return total / CLK_TCK


def _status_kb(pid: int, key: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except FileNotFoundError:
        pass
    return 0


def rss_mb(pid: int, tree: bool = True) -> float:
    """Resident set size (VmRSS) of pid and its descendants, MB."""
    return sum(_status_kb(p, "VmRSS") for p in (descendants(pid) if tree else [pid])) / 1024


def peak_rss_mb(pid: int, tree: bool = True) -> float:
    """Peak resident set size (VmHWM) summed over pid and its descendants, MB."""
    return sum(_status_kb(p, "VmHWM") for p in (descendants(pid) if tree else [pid])) / 1024


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy (all cores, from /proc/stat), to spot foreign load."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    return (sum(vals) - vals[3] - vals[4]) / CLK_TCK


def own_cpu_seconds() -> float:
    """CPU seconds of this process, its live descendants and its reaped children (e.g. a finished wrk)."""
    t = os.times()
    live = sum(cpu_seconds(p, tree=False) for p in descendants(os.getpid())[1:])
    return t.user + t.system + t.children_user + t.children_system + live


def wait_healthy(url: str, timeout_s: float = 60.0, alive: Any = None) -> float:
    """Poll GET url until it answers 2xx; seconds waited. ``alive()`` false aborts early."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        if alive is not None and not alive():
            raise RuntimeError(f"process exited before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=1.0) as resp:
                if 200 <= resp.status < 300:
                    return time.perf_counter() - t0
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        time.sleep(0.01)
    raise TimeoutError(f"{url} did not answer within {timeout_s:.0f} s")


# ----------------------------------------------------------------------------- statistics
def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); nan for no values."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = max(0, min(len(s) - 1, round(q / 100 * len(s) + 0.5) - 1))
    return s[k]


@dataclass
class LoadResult:
    tool: str
    concurrency: int
    duration_s: float
    requests: int
    errors: int
    rps: float
    p50_ms: float
    p99_ms: float
    ttfb_p50_ms: float | None = None
    ttfb_p99_ms: float | None = None
    error_samples: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# ----------------------------------------------------------------------------- python load generator
async def _python_load(
    url: str, body: bytes, concurrency: int, duration_s: float, max_requests: int, stream: bool, timeout_s: float
) -> LoadResult:
    latencies: list[float] = []
    ttfbs: list[float] = []
    errors: list[str] = []
    issued = 0
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    t_start = time.perf_counter()
    deadline = t_start + duration_s

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def worker() -> None:
            nonlocal issued
            while issued < max_requests and time.perf_counter() < deadline:
                issued += 1
                t0 = time.perf_counter()
                try:
                    async with session.post(url, data=body, headers=JSON_HEADERS) as resp:
                        if stream:
                            first = await resp.content.readany()
                            ttfb = time.perf_counter() - t0
                            rest = await resp.read()
                            tail = (first + rest)[-32:]
                        else:
                            await resp.read()
                        if resp.status != 200:
                            errors.append(f"HTTP {resp.status}")
                            continue
                        if stream and b"[DONE]" not in tail:
                            errors.append("stream ended without [DONE]")
                            continue
                except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                    errors.append(f"{type(exc).__name__}: {exc}"[:200])
                    continue
                latencies.append(time.perf_counter() - t0)
                if stream:
                    ttfbs.append(ttfb)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - t_start
    ms = [x * 1000 for x in latencies]
    tb = [x * 1000 for x in ttfbs]
    return LoadResult(
        tool="python-aiohttp",
        concurrency=concurrency,
        duration_s=round(elapsed, 3),
        requests=len(latencies),
        errors=len(errors),
        rps=round(len(latencies) / elapsed, 1) if elapsed > 0 else 0.0,
        p50_ms=round(percentile(ms, 50), 3),
        p99_ms=round(percentile(ms, 99), 3),
        ttfb_p50_ms=round(percentile(tb, 50), 3) if stream else None,
        ttfb_p99_ms=round(percentile(tb, 99), 3) if stream else None,
        error_samples=sorted(set(errors))[:5],
    )


def run_python_load(
    url: str,
    body: bytes,
    concurrency: int = 50,
    duration_s: float = 10.0,
    max_requests: int = 1_000_000,
    stream: bool = False,
    timeout_s: float = 30.0,
) -> LoadResult:
    return asyncio.run(_python_load(url, body, concurrency, duration_s, max_requests, stream, timeout_s))


# ----------------------------------------------------------------------------- wrk
_WRK_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = assert(io.open(os.getenv("BENCH_BODY_FILE"), "rb"))
wrk.body = f:read("*a")
f:close()
local authorization = os.getenv("BENCH_AUTHORIZATION")
if authorization then wrk.headers["Authorization"] = authorization end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"sock_errors":%d,"status_errors":%d,"p50_us":%d,"p99_us":%d}\\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(99)))
end
"""


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def run_wrk_load(
    url: str, body: bytes, concurrency: int = 50, duration_s: float = 10.0, threads: int = 1, timeout_s: float = 30.0,
    authorization: str | None = None,
) -> LoadResult:
    """Closed-loop load with wrk (duration-bounded). Non-2xx answers and socket errors count as errors.

    ``authorization``: the ``Authorization`` header value every request carries (a key's ``Bearer ...``).
    """
    if not url.startswith("http://127.0.0.1"):
        raise ValueError("load is only ever sent to 127.0.0.1")
    with tempfile.TemporaryDirectory() as tmp:
        lua, body_file = os.path.join(tmp, "post.lua"), os.path.join(tmp, "body.json")
        with open(lua, "w") as f:
            f.write(_WRK_LUA)
        with open(body_file, "wb") as f:
            f.write(body)
        cmd = ["wrk", f"-t{threads}", f"-c{concurrency}", f"-d{max(1, round(duration_s))}s"]
        cmd += [f"--timeout={timeout_s:g}s", "-s", lua, url]
        env = {**os.environ, "BENCH_BODY_FILE": body_file}
        if authorization:
            env["BENCH_AUTHORIZATION"] = authorization
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=duration_s + timeout_s + 30)
    m = re.search(r"WRKJSON (\{.*\})", proc.stdout)
    if proc.returncode != 0 or not m:
        raise RuntimeError(f"wrk failed ({proc.returncode}): {proc.stdout[-500:]} {proc.stderr[-500:]}")
    r = json.loads(m.group(1))
    elapsed = r["duration_us"] / 1e6
    errors = r["sock_errors"] + r["status_errors"]
    ok = r["requests"] - r["status_errors"]
    return LoadResult(
        tool="wrk",
        concurrency=concurrency,
        duration_s=round(elapsed, 3),
        requests=ok,
        errors=errors,
        rps=round(ok / elapsed, 1) if elapsed > 0 else 0.0,
        p50_ms=round(r["p50_us"] / 1000, 3),
        p99_ms=round(r["p99_us"] / 1000, 3),
        error_samples=[f"non-2xx: {r['status_errors']}", f"socket: {r['sock_errors']}"] if errors else [],
    )


def run_load(
    url: str, body: bytes, concurrency: int, duration_s: float, stream: bool, tool: str = "auto"
) -> LoadResult:
    """tool: 'wrk', 'python' or 'auto' (wrk when installed, else the Python generator)."""
    if tool == "wrk" or (tool == "auto" and wrk_available()):
        return run_wrk_load(url, body, concurrency, duration_s)
    return run_python_load(url, body, concurrency, duration_s, stream=stream)


# ----------------------------------------------------------------------------- single streamed request
async def stream_timing(session: aiohttp.ClientSession, url: str, body: bytes) -> tuple[float, float, float, str]:
    """(ttfb_s, ttft_s, total_s, text) of one streamed chat completion; ttft = first non-empty content delta."""
    t0 = time.perf_counter()
    ttfb = ttft = 0.0
    text: list[str] = []
    buf = b""
    async with session.post(url, data=body, headers=JSON_HEADERS) as resp:
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {(await resp.read())[:200]!r}")
        async for chunk in resp.content.iter_any():
            if not ttfb:
                ttfb = time.perf_counter() - t0
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if not line.startswith(b"data:") or line.strip() == b"data: [DONE]":
                    continue
                event = orjson.loads(line[5:])
                for choice in event.get("choices") or []:
                    content = (choice.get("delta") or {}).get("content")
                    if content:
                        if not ttft:
                            ttft = time.perf_counter() - t0
                        text.append(content)
    return ttfb, ttft, time.perf_counter() - t0, "".join(text)


def chat_body(model: str, stream: bool = False, **extra: Any) -> bytes:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    body.update(extra)
    return orjson.dumps(body)


def main() -> None:
    p = argparse.ArgumentParser(description="closed-loop HTTP load against a 127.0.0.1 chat endpoint")
    p.add_argument("url")
    p.add_argument("--model", default="fake-model")
    p.add_argument("--body", help="raw JSON body (overrides --model/--stream body)")
    p.add_argument("--stream", action="store_true")
    p.add_argument("-c", "--concurrency", type=int, default=50)
    p.add_argument("-d", "--duration", type=float, default=10.0)
    p.add_argument("-n", "--requests", type=int, default=1_000_000)
    p.add_argument("--tool", choices=["auto", "wrk", "python"], default="python")
    a = p.parse_args()
    if not a.url.startswith("http://127.0.0.1"):
        raise SystemExit("load is only ever sent to 127.0.0.1")
    body = a.body.encode() if a.body else chat_body(a.model, a.stream)
    if a.tool == "python" or (a.tool == "auto" and not wrk_available()):
        res = run_python_load(a.url, body, a.concurrency, a.duration, a.requests, a.stream)
    else:
        res = run_wrk_load(a.url, body, a.concurrency, a.duration)
    print(json.dumps(res.as_dict()))


if __name__ == "__main__":
    main()
