"""Bytecodes and Python calls per request, per function: where a control's cost is, to the line.

Callgrind (``bench.instructions``) says how many instructions a request costs, not which Python
function spends them: the interpreter's loop is one C function. This counts, in the gateway process,
every bytecode executed and every Python call made (``sys.settrace`` with opcode events), per code
object, over a number of requests, for a plain gateway and for one with the ``controls`` scenario's
controls on, and prints the difference per function, largest first:

    python -m bench.opcodes                                  # every control (Redis db 5)
    python -m bench.opcodes --controls limits,redis --requests 500
    python -m bench.opcodes --top 60

On this machine a bytecode of the request path costs 90-100 instructions on average (C work it
calls included), so "bytecodes per request" tracks callgrind's count within a few per cent and
names the functions. Counting slows the gateway ~50x: timers (lease keeper, usage flush, key sync)
are charged to fewer requests than at real rates, as under callgrind. Only the counted requests'
window is traced (SIGUSR1 starts, SIGUSR2 stops and writes the counts).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import orjson
import yaml

WORKER = "_worker"


def _worker(out: str, argv: list[str]) -> int:
    """The gateway (``loopgate`` with ``argv``), counting between SIGUSR1 and SIGUSR2."""
    counts: collections.Counter[CodeType] = collections.Counter()
    calls: collections.Counter[CodeType] = collections.Counter()

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "opcode":
            counts[frame.f_code] += 1
        return local

    def on_call(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "call":  # a coroutine's resumption is a call event too: counted as a call
            calls[frame.f_code] += 1
        return local

    def start(*_: Any) -> None:
        counts.clear()
        calls.clear()
        sys.settrace(on_call)
        threading.settrace(on_call)

    def stop(*_: Any) -> None:
        sys.settrace(None)
        threading.settrace(None)
        rows = [(_name(code), n, calls[code]) for code, n in counts.items()]
        Path(out).write_bytes(orjson.dumps(rows))

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    from gateway.cli import main

    return main(argv)


def _name(code: CodeType) -> str:
    path = code.co_filename
    for marker in ("site-packages/", "/gateway/", "/bench/"):
        if marker in path:
            path = ("gateway/" if marker == "/gateway/" else "bench/" if marker == "/bench/" else "") + \
                path.split(marker, 1)[1]
            break
    return f"{path}:{code.co_firstlineno}({code.co_name})"


def _count(config: dict[str, Any], requests: int, key_limits: bool | None, out: Path) -> dict[str, tuple[int, int]]:
    from bench import servers
    from bench.controls import _managed_key
    from bench.instructions import _send
    from bench.loadgen import chat_body

    cfg = out.with_suffix(".yaml")
    cfg.write_text(yaml.safe_dump(config, sort_keys=False))
    port = servers.free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bench.opcodes", WORKER, str(out), "serve", "--config", str(cfg),
                             "--host", servers.HOST, "--port", str(port)], stderr=subprocess.DEVNULL)
    base = f"http://{servers.HOST}:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/healthz", timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the gateway did not start") from None
                time.sleep(0.2)
        key = asyncio.run(_managed_key(base, key_limits)) if key_limits is not None else None
        body = chat_body("bench")
        url = base + "/v1/chat/completions"
        asyncio.run(_send(url, 300, 10, body, lambda status, raw: status == 200, key))  # warm-up
        proc.send_signal(signal.SIGUSR1)
        time.sleep(0.3)
        ok = asyncio.run(_send(url, requests, 10, body, lambda status, raw: status == 200, key))
        proc.send_signal(signal.SIGUSR2)
        deadline = time.monotonic() + 30
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        if ok != requests:
            raise RuntimeError(f"{requests - ok} of {requests} requests were not answered with a 200")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return {name: (ops, n) for name, ops, n in orjson.loads(out.read_bytes())}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == WORKER:
        sys.exit(_worker(sys.argv[2], sys.argv[3:]))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--controls", default="limits,budget,price,redis,tracing,logs",
                        help="the controls to switch on (bench scenario 'controls'; ',' = a managed key only)")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/5")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    from bench import servers
    from bench.controls import CONTROLS, controls_config
    from bench.instructions import _otlp_sink

    on = tuple(name.strip() for name in args.controls.split(",") if name.strip())
    if set(on) - set(CONTROLS):
        raise SystemExit(f"--controls: unknown {sorted(set(on) - set(CONTROLS))}")
    with servers.start_fake() as fake, tempfile.TemporaryDirectory(prefix="loopgate-opcodes-") as tmp:
        plain = _count(servers.gateway_config(fake.base), args.requests, None, Path(tmp) / "plain.json")
        controls = _count(controls_config(fake.base, args.redis, _otlp_sink(), on), args.requests,
                          "limits" in on, Path(tmp) / "controls.json")
    n = args.requests
    for name, table in (("plain", plain), ("controls", controls)):
        print(f"{name}: {sum(v[0] for v in table.values()) / n:.0f} bytecodes, "
              f"{sum(v[1] for v in table.values()) / n:.1f} calls per request")
    rows = []
    for name in plain.keys() | controls.keys():
        ops_a, calls_a = plain.get(name, (0, 0))
        ops_b, calls_b = controls.get(name, (0, 0))
        rows.append(((ops_b - ops_a) / n, (calls_b - calls_a) / n, name))
    rows.sort(reverse=True)
    print("bytecodes/request  calls/request  function (controls minus plain)")
    for ops, calls, name in rows[:args.top]:
        print(f"{ops:17.1f}  {calls:+13.2f}  {name}")


if __name__ == "__main__":
    main()
