"""Per-call CPU of the MCP client: the SDK-based client (this tree) against the hand-written one it
replaced (``gateway/tools/mcp`` of a git revision, default ``4193706``).

``python -m bench.mcp_client [--calls 2000] [--rounds 3] [--old-rev REV]``

Each measurement is a fresh process running only the client: it lists the tools, makes 50 warm-up
calls, then ``--calls`` sequential ``add`` calls, and reports the process's CPU time (user + system,
``time.process_time``) per call and the wall time per call. The server is the test suite's fake in
processes of their own (Streamable HTTP with JSON answers, and stdio), so its CPU is not counted.
The old client is read from the revision with ``git archive`` into a temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STDIO_SERVER = ROOT / "tests" / "fakes" / "mcp_stdio_server.py"

_CLIENT = r"""
import asyncio, json, sys, time
sys.path.insert(0, sys.argv[1])
from gateway.tools.mcp.source import McpHttpSource, McpStdioSource
from gateway.tools.base import ToolTimeouts

async def main(transport, target, calls):
    timeouts = ToolTimeouts(call=30.0)
    if transport == "http":
        source = McpHttpSource("bench", target, timeouts=timeouts)
    else:
        source = McpStdioSource("bench", [sys.executable, target], timeouts=timeouts)
    await source.list_tools()
    for _ in range(50):
        await source.call("add", {"a": 1, "b": 2})
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(calls):
        await source.call("add", {"a": i, "b": 2})
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    await source.aclose()
    print(json.dumps({"cpu_us": cpu / calls * 1e6, "wall_us": wall / calls * 1e6}))

asyncio.run(main(sys.argv[2], sys.argv[3], int(sys.argv[4])))
"""

_HTTP_SERVER = r"""
import asyncio, sys
sys.path.insert(0, sys.argv[1])
from tests.fakes.mcp_server import FakeMcpServer

async def main():
    server = await FakeMcpServer().start()
    print(server.url, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def measure(tree: Path, transport: str, target: str, calls: int) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", _CLIENT, str(tree), transport, target, str(calls)], check=True,
                         capture_output=True, text=True, cwd=tree).stdout
    return json.loads(out.strip().splitlines()[-1])


def old_tree(rev: str) -> Path:
    directory = Path(tempfile.mkdtemp(prefix="loopgate-old-mcp-"))
    archive = subprocess.run(["git", "archive", rev, "gateway", "tests/fakes"], cwd=ROOT, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive, check=True)
    return directory


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--old-rev", default="4193706")
    args = parser.parse_args()
    trees = {"hand-written": old_tree(args.old_rev), "sdk": ROOT}
    server = subprocess.Popen([sys.executable, "-c", _HTTP_SERVER, str(ROOT)], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        rows: dict[tuple[str, str], list[dict[str, float]]] = {}
        for _ in range(args.rounds):  # interleaved, so drift on a shared machine hits both alike
            for transport, target in (("http", url), ("stdio", str(STDIO_SERVER))):
                for name, tree in trees.items():
                    rows.setdefault((transport, name), []).append(measure(tree, transport, target, args.calls))
    finally:
        server.terminate()
        server.wait()
    print(f"| transport | client | CPU µs/call (median of {args.rounds}) | wall µs/call |")
    print("|---|---|---|---|")
    for (transport, name), results in rows.items():
        cpu = statistics.median(r["cpu_us"] for r in results)
        wall = statistics.median(r["wall_us"] for r in results)
        print(f"| {transport} | {name} | {cpu:.0f} | {wall:.0f} |")
    print(f"load average: {os.getloadavg()[0]:.2f}; calls per run: {args.calls}; {time.strftime('%Y-%m-%d')}")


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    main()
