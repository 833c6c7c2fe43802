"""Gateway CPU per request in fixed-size chunks: chat completions and Responses on one gateway, interleaved.

A wall-clock cross-check of ``python -m bench.instructions`` (which counts instructions, not
cycles, system calls or cache misses). One fake upstream, one Loopgate (memory store), JSON
requests at ``--concurrency``; each setup sends ``--chunks`` chunks of ``--requests`` requests,
and the whole sequence is repeated ``--repeat`` times so every setup sees the machine at several
moments. Per chunk it prints user and system CPU of the gateway process per request, requests/s
and the non-200 count; at the end the mean per setup and its ratio to chat. Unlike ``bench.run
responses`` (10 s rows at 50 connections), a chunk is a fixed number of requests, so a setup
that is slower is not also measured over fewer requests.

    python -m bench.cpu_chunks                        # chat, responses, responses-nostore; 3 x 5,000, twice
    python -m bench.cpu_chunks --setups chat,responses --chunks 2 --requests 2000 --repeat 1
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson
import yaml

from bench import servers
from bench.instructions import _send
from bench.loadgen import cpu_seconds

PROMPT = "Say hello in one short sentence."
BODIES = {
    "chat": ("chat/completions", orjson.dumps({"model": "bench", "messages": [{"role": "user", "content": PROMPT}]})),
    "responses": ("responses", orjson.dumps({"model": "bench", "input": PROMPT})),
    "responses-nostore": ("responses", orjson.dumps({"model": "bench", "input": PROMPT, "store": False})),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setups", default="chat,responses,responses-nostore")
    parser.add_argument("--chunks", type=int, default=3)
    parser.add_argument("--requests", type=int, default=5000, help="requests per chunk")
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    setups = [name for name in args.setups.split(",") if name]
    unknown = [name for name in setups if name not in BODIES]
    if unknown:
        sys.exit(f"unknown setup(s) {unknown}; known: {', '.join(BODIES)}")
    per_request: dict[str, list[float]] = {name: [] for name in setups}
    errors = 0
    with servers.start_fake(agent_tools=0) as fake:
        config = Path(tempfile.mkdtemp(prefix="loopgate-cpu-chunks-")) / "config.yaml"
        config.write_text(yaml.safe_dump(servers.gateway_config(fake.base), sort_keys=False))
        port = servers.free_port()
        cmd = [sys.executable, "-m", "gateway", "serve", "--config", str(config), "--host", servers.HOST,
               "--port", str(port)]
        with servers.Proc("loopgate-cpu-chunks", cmd, port, startup_timeout_s=60) as gateway:
            for _ in range(args.repeat):
                for name in setups:
                    path, body = BODIES[name]
                    url = f"{gateway.base}/v1/{path}"
                    asyncio.run(_send(url, 500, args.concurrency, body, lambda status, raw: status == 200))
                    for chunk in range(args.chunks):
                        cpu0 = cpu_seconds(gateway.pid, tree=False)
                        started = time.perf_counter()
                        ok = asyncio.run(_send(url, args.requests, args.concurrency, body,
                                               lambda status, raw: status == 200))
                        elapsed = time.perf_counter() - started
                        errors += args.requests - ok
                        cost = (cpu_seconds(gateway.pid, tree=False) - cpu0) * 1000 / args.requests
                        per_request[name].append(cost)
                        print(f"{name:18s} chunk {chunk}: {cost:.3f} ms/req (user+sys), "
                              f"{args.requests / elapsed:,.0f} req/s, {args.requests - ok} errors", flush=True)
    base = statistics.mean(per_request[setups[0]])
    for name in setups:
        mean = statistics.mean(per_request[name])
        print(f"{name:18s} mean {mean:.3f} ms/req ({mean / base - 1:+.1%} vs {setups[0]}), "
              f"range {min(per_request[name]):.3f}-{max(per_request[name]):.3f}")
    print(f"errors: {errors}")
    if errors:
        sys.exit(1)


if __name__ == "__main__":
    main()
