"""Instructions per Redis round trip from the gateway's process: through ``RedisIO`` as the stores send
them, and below it, down to a raw connection (callgrind, in one process, on a Redis started on a free port).

    python -m bench.redis_round_trip              # 300 of each
    python -m bench.redis_round_trip --ops 1000

What a pause and its resume cost beyond a plain loop is mostly their Redis round trips (``bench/pauses.py``);
this says what one costs, and how much of that is the client rather than the network and the event loop:
through redis-py's client (``guard`` and redis-py's pool, packing and parsing), through ``RedisIO``'s lean
command path (``io.command``, ``io.script``: lean_pool.py), the lean path without its deadline, a redis-py
connection used directly (no pool, the command packed here), and a bare asyncio stream with the command packed
and the reply parsed here. Each reply is what a continuation's claim or lookup gets back (a bulk string of 900
bytes).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.instructions import _TOTAL

WORKER = "_worker"
BODY = b"x" * 900
LUA = "return {'ok', redis.call('GET', KEYS[1])}"


def pack(*args: bytes | str | int) -> bytes:
    """One RESP command (an array of bulk strings)."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        raw = arg if isinstance(arg, bytes) else str(arg).encode()
        out += [b"$%d\r\n" % len(raw), raw, b"\r\n"]
    return b"".join(out)


async def reply(reader: asyncio.StreamReader) -> Any:
    """One RESP2 reply (what these commands answer: bulk strings, arrays, integers, errors)."""
    line = await reader.readline()
    kind, rest = line[:1], line[1:-2]
    if kind == b"$":
        size = int(rest)
        return None if size < 0 else (await reader.readexactly(size + 2))[:-2]
    if kind == b"*":
        return [await reply(reader) for _ in range(int(rest))]
    if kind == b"-":
        raise RuntimeError(rest.decode())
    return int(rest) if kind == b":" else rest


async def _kinds(url: str, host: str, port: int) -> dict[str, Callable[[], Awaitable[Any]]]:
    from gateway.store.redis_client.client import RedisIO

    io = RedisIO(url)
    script = io.register(LUA)
    await io.client.set("k", BODY)
    await io.script(script, ["k"], [], False)  # loaded
    connection = await io.client.connection_pool.get_connection()
    reader, writer = await asyncio.open_connection(host, port)
    evalsha = pack("EVALSHA", script.sha, 1, "k", "acme", "1")

    async def guarded_get() -> Any:
        async with io.guard("get"):
            return await io.client.get("k")

    async def guarded_script() -> Any:
        async with io.guard("script"):
            return await io.client.evalsha(script.sha, 1, "k", "acme", "1")

    async def lean_get() -> Any:
        async with io.guard("get"):
            return await io.command("GET", "k")

    async def lean_script() -> Any:
        async with io.guard("script"):
            return (await io.script(script, ["k"], ["acme", "1"], False))[0]

    async def lean_get_no_deadline() -> Any:
        return await io.command("GET", "k")

    async def direct_connection() -> Any:
        async with io.guard("script"):
            await connection.send_packed_command(evalsha, check_health=False)
            return await connection.read_response()

    async def bare_stream() -> Any:
        async with io.guard("script"):
            writer.write(evalsha)
            return await reply(reader)

    async def bare_stream_no_deadline() -> Any:
        writer.write(evalsha)
        return await reply(reader)

    return {"redis-py client: GET (guard, client.get)": guarded_get,
            "redis-py client: EVALSHA (guard, client.evalsha)": guarded_script,
            "RedisIO lean path: GET (guard, io.command)": lean_get,
            "RedisIO lean path: EVALSHA (guard, io.script)": lean_script,
            "RedisIO lean path: GET, no deadline (io.command)": lean_get_no_deadline,
            "redis-py connection, no pool (guard, packed here)": direct_connection,
            "asyncio stream (guard, packed and parsed here)": bare_stream,
            "asyncio stream, no deadline": bare_stream_no_deadline}


def _control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(os.getpid())], check=True, capture_output=True, timeout=120)


async def _count(url: str, host: str, port: int, ops: int) -> list[str]:
    kinds = await _kinds(url, host, port)
    for run in kinds.values():
        for _ in range(50):
            await run()
        _control("-i", "on")
        for _ in range(ops):
            await run()
        _control("-i", "off")
        _control("-d")
    return list(kinds)


def _worker(out_dir: str, ops: int, host: str, port: int) -> None:
    import uvloop

    names = uvloop.run(_count(f"redis://{host}:{port}/0", host, port, ops))
    dumps = sorted(Path(out_dir).glob(f"cg.{os.getpid()}.*"), key=lambda p: int(p.suffix[1:]))
    for name, dump in zip(names, dumps, strict=False):
        annotate = subprocess.run(["callgrind_annotate", str(dump)], capture_output=True, timeout=300)
        match = _TOTAL.search(annotate.stdout)
        total = int((match.group(1) or match.group(2)).replace(b",", b"")) if match else 0
        print(f"{total / ops / 1000:6.0f}k instructions per round trip: {name}", flush=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == WORKER:
        _worker(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=300, help="round trips counted per kind")
    args = parser.parse_args()
    from tests.redis_servers import HOST, spawn_redis

    out_dir = tempfile.mkdtemp(prefix="loopgate-round-trip-")
    store = spawn_redis(out_dir)
    try:
        subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out_dir}/cg.%p",
                        sys.executable, "-m", "bench.redis_round_trip", WORKER, out_dir, str(args.ops), HOST,
                        str(store.port)], check=True, stderr=subprocess.DEVNULL)
    finally:
        store.kill()


if __name__ == "__main__":
    main()
