"""Start and stop the processes a benchmark needs, all on 127.0.0.1.

Every process runs in its own session (process group) and is stopped with SIGTERM, then SIGKILL, on
its whole group; ``Proc`` is a context manager so a failing scenario still stops what it started.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from bench.loadgen import cpu_seconds, descendants, rss_mb, wait_healthy
from tests.ports import free_port

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
LOG_DIR = BENCH_DIR / "results" / "logs"
LITELLM_VENV = BENCH_DIR / ".venv-litellm"
HOST = "127.0.0.1"


class Proc:
    """A spawned server: its pid, base URL, start-up time (spawn -> health answers) and idle RSS."""

    def __init__(
        self,
        name: str,
        cmd: list[str],
        port: int,
        health_path: str = "/healthz",
        env: dict[str, str] | None = None,
        startup_timeout_s: float = 60.0,
        cpus: set[int] | None = None,
    ) -> None:
        self.name, self.cmd, self.port = name, cmd, port
        self.base = f"http://{HOST}:{port}"
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        self.log_path = LOG_DIR / f"{name}-{port}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        t0 = self.t_spawn = time.perf_counter()
        self.popen = subprocess.Popen(
            cmd,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        if cpus:
            os.sched_setaffinity(self.popen.pid, cpus)
        try:
            wait_healthy(self.base + health_path, startup_timeout_s, alive=lambda: self.popen.poll() is None)
        except Exception as exc:
            self.stop()
            raise RuntimeError(f"{name} did not start: {exc}; last log lines:\n{self.log_tail()}") from exc
        self.startup_s = time.perf_counter() - t0
        time.sleep(0.3)  # let lazy start-up work settle before the idle RSS reading
        self.idle_rss_mb = rss_mb(self.pid)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log_tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):  # stray children left in the group
            os.killpg(self.popen.pid, signal.SIGKILL)
        self._log.close()

    def __enter__(self) -> Proc:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ----------------------------------------------------------------------------- the servers
def start_fake(
    latency_ms: float = 0.0,
    chunk_delay_ms: float = 0.0,
    chunks: int = 8,
    agent_tools: int = 0,
    cpus: set[int] | None = None,
    fail_status: int = 0,
    unique_call_ids: bool = False,
) -> Proc:
    port = free_port()
    cmd = [sys.executable, "-m", "bench.fake_upstream", "--port", str(port), "--latency-ms", str(latency_ms)]
    cmd += ["--chunk-delay-ms", str(chunk_delay_ms), "--chunks", str(chunks), "--agent-tools", str(agent_tools)]
    cmd += ["--fail-status", str(fail_status)] + (["--unique-call-ids"] if unique_call_ids else [])
    return Proc("fake-fail" if fail_status else "fake", cmd, port, cpus=cpus)


def start_bare(upstream: str, cpus: set[int] | None = None, client: str = "aiohttp") -> Proc:
    port = free_port()
    cmd = [sys.executable, "-m", "bench.bare_proxy", "--port", str(port), "--upstream", upstream, "--client", client]
    return Proc("bare" if client == "aiohttp" else f"bare-{client}", cmd, port, cpus=cpus)


def gateway_config(upstream: str, tool_source: str = "python") -> dict[str, Any]:
    """The Loopgate config used by every scenario: route ``bench`` (plain), ``bench-agent`` (server tool) and
    ``bench-embed`` (an embeddings route of one 1536-dimension target)."""
    tool: dict[str, Any] = {
        "description": "A benchmark tool that answers at once.",
        "parameters": {"type": "object", "properties": {"step": {"type": "integer"}}},
    }
    if tool_source == "http":
        tool["http"] = {"url": f"{upstream}/tool", "timeout_s": 10}
    else:
        tool["python"] = "bench.tools:bench_tool"
    target = [{"provider": "fake", "model": "fake-model"}]
    return {
        "server": {"host": HOST},
        "store": {"url": "memory://"},
        "providers": {"fake": {"type": "openai", "base_url": upstream, "api_key": "sk-bench"}},
        "tools": {"bench_tool": tool},
        "models": {
            "bench": {"targets": target},
            "bench-agent": {"targets": target, "tools": ["bench_tool"], "max_tool_iterations": 25},
            "bench-embed": {"kind": "embeddings", "targets": [
                {"provider": "fake", "model": "text-embedding-3-small", "dimensions": 1536}]},
        },
    }


def gateway_runnable() -> tuple[bool, str]:
    """Whether ``python -m gateway serve --help`` works in this checkout (the gateway is being built)."""
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "gateway", "serve", "--help"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    except subprocess.TimeoutExpired:
        return False, "python -m gateway serve --help timed out"
    if proc.returncode != 0:
        return False, (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
    return True, "ok"


def start_loopgate(
    upstream: str,
    tool_source: str = "python",
    cpus: set[int] | None = None,
    workers: int = 1,
    config: dict[str, Any] | None = None,
) -> Proc:
    """Loopgate with ``gateway_config(upstream, tool_source)`` (or ``config``); with workers > 1 this
    returns once every worker process exists and start-up CPU has settled."""
    port = free_port()
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    cfg_path = LOG_DIR / f"loopgate-{port}.yaml"
    cfg_path.write_text(yaml.safe_dump(config or gateway_config(upstream, tool_source), sort_keys=False))
    cmd = [sys.executable, "-m", "gateway", "serve", "--config", str(cfg_path), "--host", HOST, "--port", str(port)]
    if workers > 1:
        cmd += ["--workers", str(workers)]
    proc = Proc("loopgate", cmd, port, cpus=cpus)
    if workers > 1:
        try:
            wait_workers(proc, workers)
        except Exception:
            proc.stop()
            raise
    return proc


def worker_pids(pid: int) -> list[int]:
    """The processes serving requests: pid itself when it has no children, else its children except
    multiprocessing's resource tracker (uvicorn --workers: a supervisor plus N spawned workers)."""
    out = []
    for p in descendants(pid)[1:]:
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                if b"resource_tracker" in f.read():
                    continue
        except OSError:
            continue
        out.append(p)
    return out or [pid]


def wait_workers(proc: Proc, workers: int, timeout_s: float = 60.0) -> None:
    """Until ``workers`` worker processes exist and the tree's CPU use settles (imports done)."""
    deadline = time.perf_counter() + timeout_s
    while len(worker_pids(proc.pid)) < workers:
        if time.perf_counter() > deadline or proc.popen.poll() is not None:
            raise RuntimeError(f"loopgate: {workers} workers did not start; log:\n{proc.log_tail()}")
        time.sleep(0.05)
    last = cpu_seconds(proc.pid)
    while time.perf_counter() < deadline:
        time.sleep(0.5)
        now = cpu_seconds(proc.pid)
        if now - last < 0.05:
            break
        last = now
    proc.startup_s = time.perf_counter() - proc.t_spawn
    proc.idle_rss_mb = rss_mb(proc.pid)


def ensure_litellm_venv(log: Callable[[str], None] = print) -> Path:
    """bench/.venv-litellm with litellm[proxy] installed (created once); returns its ``litellm`` script."""
    exe, marker = LITELLM_VENV / "bin" / "litellm", LITELLM_VENV / ".bench-installed"
    if exe.exists() and marker.exists():
        return exe
    log(f"creating {LITELLM_VENV} and installing litellm[proxy] (a few minutes)...")
    subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True)
    pip = [str(LITELLM_VENV / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "litellm[proxy]"], check=True)
    marker.write_text("litellm[proxy]\n")
    return exe


def start_litellm(upstream: str, cpus: set[int] | None = None) -> Proc:
    exe = ensure_litellm_venv()
    port = free_port()
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    cfg_path = LOG_DIR / f"litellm-{port}.yaml"
    cfg = {
        "model_list": [
            {
                "model_name": "bench",
                "litellm_params": {"model": "openai/fake-model", "api_base": upstream, "api_key": "sk-bench"},
            }
        ],
        "litellm_settings": {"drop_params": True, "telemetry": False},
        # no auth, like the Loopgate config (loopback only): LiteLLM refuses to start keyless without this
        "general_settings": {"dangerously_permit_weak_or_unset_master_key": True},
    }
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = {"LITELLM_OFFLINE_MODE": "true", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
    env["PATH"] = f"{exe.parent}:{os.environ.get('PATH', '')}"
    cmd = [str(exe), "--config", str(cfg_path), "--host", HOST, "--port", str(port), "--num_workers", "1"]
    return Proc("litellm", cmd, port, health_path="/health/liveliness", env=env, startup_timeout_s=180, cpus=cpus)
