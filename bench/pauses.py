"""What a pause and its way-A resume cost the gateway, against a plain loop of the same work (issue 46).

    python -m bench.pauses                      # 300 of each, concurrency 4, callgrind
    python -m bench.pauses --units 100          # quicker, slightly noisier

The unit is a **plain loop**: one request to route ``bench-agent``; the model asks for the server
tool ``bench_tool``, the gateway runs it and calls the model again, which answers (2 model calls,
1 tool). A **pause pair** is the same work with the tool on the client: one request to route
``bench`` declaring ``bench_tool`` as a client tool pauses (the continuation is written to Redis),
then the client sends its result back way A, as the openai SDK does (the conversation with the
assistant's ``tool_calls`` message and a ``tool`` message), and the resumed loop calls the model
again, which answers. Both run against the fake upstream (``--unique-call-ids``: concurrent
pauses never share a tool-call id) and a ``redis-server`` the bench starts on a free port, under
callgrind (instructions of the whole gateway process, counted over the measured units only; see
``bench/instructions.py``). Every resume is checked to have resumed its continuation (its record
reads ``resumed``), not to have been answered statelessly.

Printed: instructions per plain loop and per pause pair, what the pair costs on top of a loop
(``extra``), and the Redis a continuation holds, from ``INFO memory``'s ``used_memory`` over
``--held`` pauses: paused (its record, its way-A index entry, its listing entry), and once resumed
(the record kept until its TTL with the resume's answer, so a repeat gets 409 and ``GET`` shows
it), with ``MEMORY USAGE`` of the record and the stored body's bytes beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import orjson
import redis
import yaml

from bench import servers
from bench.instructions import _TOTAL, _control
from bench.loadgen import cpu_seconds
from tests.redis_servers import spawn_redis

PROMPT = [{"role": "user", "content": "Run bench_tool."}]
TOOL = {"type": "function", "function": {
    "name": "bench_tool", "description": "A benchmark tool that answers at once.",
    "parameters": {"type": "object", "properties": {"step": {"type": "integer"}}}}}
PLAIN = orjson.dumps({"model": "bench-agent", "messages": PROMPT})
PAUSE = orjson.dumps({"model": "bench", "messages": PROMPT, "tools": [TOOL]})
ANSWER = "Done after 1 tool results."
HEADERS = {"content-type": "application/json"}


class Client:
    """The bench's client: plain loops and pause pairs, each checked; the ids of the continuations it paused."""

    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session, self.url = session, f"{base}/v1/chat/completions"
        self.paused: list[str] = []

    async def post(self, body: bytes) -> dict[str, Any]:
        async with self.session.post(self.url, data=body, headers=HEADERS) as resp:
            raw = await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}: {raw[:500]!r}")
            answer: dict[str, Any] = orjson.loads(raw)
            return answer

    async def plain(self) -> None:
        answer = await self.post(PLAIN)
        if answer["choices"][0]["message"]["content"] != ANSWER or answer["gateway"]["iterations"] != 2:
            raise RuntimeError(f"not a plain loop's answer: {answer}")

    async def pause(self) -> dict[str, Any]:
        """One pausing request; the assistant message it handed back (with ``tool_calls``)."""
        answer = await self.post(PAUSE)
        if answer["gateway"]["status"] != "paused":
            raise RuntimeError(f"not a pause: {answer}")
        self.paused.append(answer["gateway"]["continuation_id"])
        message: dict[str, Any] = answer["choices"][0]["message"]
        return message

    async def resume(self, assistant: dict[str, Any]) -> None:
        """Way A: the conversation with the assistant's tool calls and their result, as the openai SDK sends it."""
        result = {"role": "tool", "tool_call_id": assistant["tool_calls"][0]["id"], "content": '{"ok":true,"step":1}'}
        body = orjson.dumps({"model": "bench", "messages": [*PROMPT, assistant, result], "tools": [TOOL]})
        answer = await self.post(body)
        if answer["choices"][0]["message"]["content"] != ANSWER or answer["gateway"]["status"] != "completed":
            raise RuntimeError(f"not a resumed loop's answer: {answer}")

    async def pair(self) -> None:
        await self.resume(await self.pause())


async def _times(base: str, count: int, concurrency: int, unit: Callable[[Client], Awaitable[None]]) -> list[str]:
    """``count`` units over ``concurrency`` clients; the continuations they paused."""
    remaining = count
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
        client = Client(session, base)

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                await unit(client)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return client.paused


def run(base: str, count: int, concurrency: int, unit: Callable[[Client], Awaitable[None]]) -> list[str]:
    return asyncio.run(_times(base, count, concurrency, unit))


def statuses(db: redis.Redis, ids: list[str]) -> dict[str, int]:
    """How many of the continuations ``ids`` are in each state (their record's ``s`` field)."""
    pipe = db.pipeline(transaction=False)
    for cid in ids:
        pipe.hget(f"loopgate:{{{cid}}}:rec", "s")
    counts: dict[str, int] = {}
    for status in pipe.execute():
        name = status.decode() if status else "missing"
        counts[name] = counts.get(name, 0) + 1
    return counts


def usage(db: redis.Redis, key: str) -> int:
    """``MEMORY USAGE`` of ``key``, counted whole (``SAMPLES 0``)."""
    return int(db.memory_usage(key, samples=0) or 0)


def held_bytes(db: redis.Redis, base: str, held: int) -> dict[str, float]:
    """The Redis a continuation holds, paused and once resumed, over ``held`` of them.

    ``MEMORY USAGE`` (exact): the record's (median), its way-A index entry's and its share of the tenant's
    listing (the sorted set and the hash over the entries they hold: the warm-up's were resumed, so only
    these). ``used_memory`` (INFO) over the same pauses, and then over their resumes, as a cross-check: it
    also moves with the allocator and whatever else the gateway writes meanwhile (usage rows).
    """
    messages: list[dict[str, Any]] = []

    async def pause_only(client: Client) -> None:
        messages.append(await client.pause())

    before = int(db.info("memory")["used_memory"])
    ids = run(base, held, 1, pause_only)
    used_paused = (int(db.info("memory")["used_memory"]) - before) / held
    listing = [f"loopgate:{{t:default}}:{kind}" for kind in ("conts", "contv")]
    if db.zcard(listing[0]) != held:
        raise RuntimeError(f"the listing holds {db.zcard(listing[0])} entries, not the {held} paused")
    records = [f"loopgate:{{{cid}}}:rec" for cid in ids]
    index = [f"loopgate:{{t:default}}:tc:{m['tool_calls'][0]['id']}" for m in messages]
    paused = {"record": statistics.median(usage(db, key) for key in records),
              "index": statistics.median(usage(db, key) for key in index),
              "listing": sum(usage(db, key) for key in listing) / held,
              "body": statistics.median(db.hstrlen(key, "b") for key in records)}

    async def resume_all() -> None:
        async with aiohttp.ClientSession() as session:
            client = Client(session, base)
            for message in messages:
                await client.resume(message)

    asyncio.run(resume_all())
    counts = statuses(db, ids)
    if counts != {"resumed": held}:
        raise RuntimeError(f"the held continuations were not all resumed: {counts}")
    return {**paused, "paused": paused["record"] + paused["index"] + paused["listing"], "used_paused": used_paused,
            "resumed": statistics.median(usage(db, key) for key in records),
            "used_resumed": (int(db.info("memory")["used_memory"]) - before) / held,
            "result": statistics.median(db.hstrlen(key, "r") for key in records)}


def config(fake_base: str, redis_url: str, tool_source: str = "python") -> dict[str, Any]:
    cfg = servers.gateway_config(fake_base, tool_source)
    # Under callgrind the gateway runs ~50x slower: generous store deadlines keep every operation on its normal path.
    cfg["store"] = {"url": redis_url, "timeout_ms": 30_000, "fail_open_ms": 10_000}
    return cfg


T = TypeVar("T")


def counted(pid: int, out_dir: Path, work: Callable[[], T]) -> tuple[float, float, T]:
    """Instructions of the gateway while ``work`` runs (a dump of their own), its wall time, what it returned."""
    before = {p.name for p in out_dir.glob(f"cg.{pid}.*")}
    _control(pid, "-i", "on")
    started = time.monotonic()
    result = work()
    wall = time.monotonic() - started
    _control(pid, "-i", "off")
    _control(pid, "-d")
    dumps = [p for p in out_dir.glob(f"cg.{pid}.*") if p.name not in before]
    if len(dumps) != 1:
        sys.exit(f"expected one new callgrind dump in {out_dir}, found {len(dumps)}")
    annotate = subprocess.run(["callgrind_annotate", str(dumps[0])], capture_output=True, timeout=300)
    match = _TOTAL.search(annotate.stdout)
    if match is None:
        sys.exit(f"no total in {dumps[0]}")
    return int((match.group(1) or match.group(2)).replace(b",", b"")), wall, result


def timed(pid: int, out_dir: Path, work: Callable[[], T]) -> tuple[float, float, T]:
    """CPU seconds (utime + stime) of the gateway while ``work`` runs, its wall time, what it returned."""
    before, started = cpu_seconds(pid), time.monotonic()
    result = work()
    return cpu_seconds(pid) - before, time.monotonic() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--units", type=int, default=300, help="plain loops and pause pairs counted, each")
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--held", type=int, default=200, help="continuations paused to read Redis memory per one")
    parser.add_argument("--memory-store", action="store_true",
                        help="store.url memory:// instead (what the pair costs without Redis; no memory figures)")
    parser.add_argument("--tool-source", choices=["python", "http"], default="python",
                        help="the plain loop's server tool: a Python function (default) or the fake's HTTP tool")
    parser.add_argument("--idle-seconds", type=float, default=20.0,
                        help="how long the gateway's cost with no request (its timers) is measured")
    parser.add_argument("--cpu-time", action="store_true",
                        help="the gateway's CPU time instead of callgrind's count (load-sensitive: use many --units)")
    args = parser.parse_args()
    out_dir = Path(tempfile.mkdtemp(prefix="loopgate-pauses-"))
    store = spawn_redis(out_dir)
    try:
        with servers.start_fake(agent_tools=1, unique_call_ids=True) as fake:
            cfg = out_dir / "config.yaml"
            url = "memory://" if args.memory_store else f"redis://{store.address}/0"
            cfg.write_text(yaml.safe_dump(config(fake.base, url, args.tool_source), sort_keys=False))
            port = servers.free_port()
            cmd = [sys.executable, "-m", "gateway", "serve", "--config", str(cfg), "--host", servers.HOST,
                   "--port", str(port)]
            if not args.cpu_time:
                cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                       f"--callgrind-out-file={out_dir}/cg.%p", *cmd]
            with servers.Proc("loopgate-pauses", cmd, port, startup_timeout_s=300) as gateway:
                costs, memory = measure(gateway, store.client(), out_dir, args)
    finally:
        store.kill()
    report(costs, memory, args, out_dir)


@dataclass(frozen=True, slots=True)
class Costs:
    """What each kind of unit cost the gateway, with its timers' share taken out (see ``measure``)."""

    plain: float
    pair: float
    #: the gateway's cost per second with no request (its timers), and the two windows' wall times
    idle_rate: float
    plain_wall: float
    pair_wall: float
    units: int

    def per_unit(self, total: float, wall: float) -> float:
        return (total - self.idle_rate * wall) / self.units


def measure(gateway: servers.Proc, db: redis.Redis, out_dir: Path,
            args: argparse.Namespace) -> tuple[Costs, dict[str, float] | None]:
    """Plain loops' and pause pairs' cost, and the Redis a continuation holds (None on memory://).

    The gateway's timers (key sync every 0.25 s, target health every second, ...) cost the same per
    second whatever it serves, and under callgrind a window lasts minutes, longer for pairs than for
    loops and longer on a busy machine: their cost over a window (its rate measured first, with no
    request) is taken out of it.
    """
    base = gateway.base
    run(base, args.warmup, args.concurrency, Client.plain)
    run(base, args.warmup, args.concurrency, Client.pair)
    memory = None if args.memory_store else held_bytes(db, base, args.held)
    time.sleep(1.0)
    window = timed if args.cpu_time else counted
    idle, idle_wall, _ = window(gateway.pid, out_dir, lambda: time.sleep(args.idle_seconds))
    plain, plain_wall, _ = window(gateway.pid, out_dir,
                                  lambda: run(base, args.units, args.concurrency, Client.plain))
    pair, pair_wall, ids = window(gateway.pid, out_dir, lambda: run(base, args.units, args.concurrency, Client.pair))
    counts = statuses(db, ids)
    if not args.memory_store and counts != {"resumed": args.units}:
        sys.exit(f"not every pause was resumed way A: {counts}")
    return Costs(plain, pair, idle / idle_wall, plain_wall, pair_wall, args.units), memory


def report(costs: Costs, memory: dict[str, float] | None, args: argparse.Namespace, out_dir: Path) -> None:
    def shown(value: float) -> str:
        return f"{value * 1e6:.0f} us of CPU" if args.cpu_time else f"{value / 1000:.0f}k instructions"

    plain, pair = costs.per_unit(costs.plain, costs.plain_wall), costs.per_unit(costs.pair, costs.pair_wall)
    raw_plain, raw_pair = costs.plain / costs.units, costs.pair / costs.units
    print(f"plain loop (2 model calls, 1 server tool, {args.tool_source}): {shown(plain)} "
          f"(with the timers: {shown(raw_plain)})")
    print(f"pause + way-A resume (2 model calls, 1 client tool): {shown(pair)} (with the timers: {shown(raw_pair)})")
    print(f"extra: {(pair - plain) / plain * 100:.0f} % of a plain loop ({shown(pair - plain)}; with the timers "
          f"{(raw_pair - raw_plain) / raw_plain * 100:.0f} %)")
    print(f"timers: {shown(costs.idle_rate)} per second; windows {costs.plain_wall:.0f} s (loops), "
          f"{costs.pair_wall:.0f} s (pairs)")
    if memory is not None:
        print(f"Redis per paused continuation (MEMORY USAGE): {memory['paused']:.0f} bytes = record "
              f"{memory['record']:.0f} (its body {memory['body']:.0f}) + way-A index {memory['index']:.0f} + listing "
              f"{memory['listing']:.0f}; used_memory {memory['used_paused']:.0f}")
        print(f"Redis per resumed continuation (its record, kept until its TTL): {memory['resumed']:.0f} bytes "
              f"(with the answer, {memory['result']:.0f}); used_memory {memory['used_resumed']:.0f}")
    where = "" if args.cpu_time else f"; dumps in {out_dir}"
    print(f"({'memory://' if memory is None else 'Redis'} store; {args.units} of each, concurrency {args.concurrency}"
          f"{where})")


if __name__ == "__main__":
    main()
