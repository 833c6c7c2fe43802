"""Instructions per request, counted by callgrind: the stable way to compare two builds on a noisy VM.

Wall-clock numbers here move by 30-40 % between minutes (steal time); callgrind's instruction
counts are repeatable to ~0.1 % for the same code and inputs, whatever else the machine does.
This is the "Profiling" recipe of bench/README.md as one command:

    python -m bench.instructions                 # 2,000 JSON requests to route ``bench``
    python -m bench.instructions --stream        # the same as streams
    python -m bench.instructions --requests 500  # quicker, slightly noisier
    python -m bench.instructions --limited       # as a managed key with rpm, tpm and max_concurrent
    python -m bench.instructions --limited --store redis://127.0.0.1:6379/3   # limits shared through Redis

It starts the fake upstream and Loopgate (under ``valgrind --tool=callgrind``, counting off), sends
warm-up requests, counts only the measured requests, and prints instructions per request for the
whole gateway process. Run it in two checkouts (``git worktree add``) to compare builds.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson
import yaml

from bench import servers

_TOTAL = re.compile(rb"([\d,]+)\s+\(100\.0%\)\s+PROGRAM TOTALS|([\d,]+)\s+PROGRAM TOTALS")


ADMIN_KEY = "bench-admin-key"


async def _managed_key(base: str) -> str:
    """A managed key with every limit set, high enough never to refuse a bench request."""
    async with aiohttp.ClientSession() as session, session.post(
            f"{base}/admin/keys", headers={"authorization": f"Bearer {ADMIN_KEY}"},
            json={"tenant": "bench", "rpm": 100_000_000, "tpm": 1_000_000_000, "max_concurrent": 10_000}) as resp:
        resp.raise_for_status()
        return str((await resp.json())["key"])


async def _send(url: str, count: int, concurrency: int, stream: bool, key: str | None = None) -> int:
    body = orjson.dumps({"model": "bench", "stream": stream,
                         "messages": [{"role": "user", "content": "Say hello in one short sentence."}]})
    ok = 0
    remaining = count

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal ok, remaining
        while remaining > 0:
            remaining -= 1
            headers = {"content-type": "application/json"}
            if key:
                headers["authorization"] = f"Bearer {key}"
            async with session.post(url, data=body, headers=headers) as resp:
                await resp.read()
                ok += resp.status == 200

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return ok


def _control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True, timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--limited", action="store_true", help="call as a managed key with rpm, tpm and max_concurrent")
    parser.add_argument("--store", default=None, help="store.url (default memory://)")
    args = parser.parse_args()

    out_dir = Path(tempfile.mkdtemp(prefix="loopgate-callgrind-"))
    with servers.start_fake() as fake:
        port = servers.free_port()
        cfg = out_dir / "config.yaml"
        config = servers.gateway_config(fake.base)
        if args.limited:
            config["auth"] = {"admin_keys": [{"key": ADMIN_KEY, "name": "bench"}]}
        if args.store:
            config["store"] = {"url": args.store}
        cfg.write_text(yaml.safe_dump(config, sort_keys=False))
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out_dir}/cg.%p",
               sys.executable, "-m", "gateway", "serve", "--config", str(cfg), "--host", servers.HOST,
               "--port", str(port)]
        with servers.Proc("loopgate-callgrind", cmd, port, startup_timeout_s=300) as gateway:
            url = f"{gateway.base}/v1/chat/completions"
            key = asyncio.run(_managed_key(gateway.base)) if args.limited else None
            asyncio.run(_send(url, args.warmup, args.concurrency, args.stream, key))
            time.sleep(1.0)
            _control(gateway.pid, "-i", "on")
            ok = asyncio.run(_send(url, args.requests, args.concurrency, args.stream, key))
            _control(gateway.pid, "-d")
            _control(gateway.pid, "-i", "off")
            dumps = sorted(out_dir.glob(f"cg.{gateway.pid}*"))
            if not dumps:
                sys.exit(f"no callgrind dump in {out_dir}")
            annotate = subprocess.run(["callgrind_annotate", str(dumps[-1])], capture_output=True, timeout=300)
    match = _TOTAL.search(annotate.stdout)
    if match is None or ok != args.requests:
        sys.exit(f"could not measure: {ok}/{args.requests} requests ok; annotate said {annotate.stdout[:300]!r}")
    total = int((match.group(1) or match.group(2)).replace(b",", b""))
    kind = "stream" if args.stream else "JSON"
    print(f"{total / args.requests / 1000:.0f}k instructions per {kind} request "
          f"({total:,} over {args.requests} requests; dump {dumps[-1]})")


if __name__ == "__main__":
    main()
