"""Instructions per request, counted by callgrind: the stable way to compare two builds on a noisy VM.

Wall-clock numbers here move by 30-40 % between minutes (steal time); callgrind's instruction
counts are repeatable to ~0.1 % for the same code and inputs, whatever else the machine does.
This is the "Profiling" recipe of bench/README.md as one command:

    python -m bench.instructions                 # 2,000 JSON requests to route ``bench``
    python -m bench.instructions --stream        # the same as streams
    python -m bench.instructions --requests 500  # quicker, slightly noisier
    python -m bench.instructions --limited       # as a managed key with rpm, tpm and max_concurrent
    python -m bench.instructions --limited --store redis://127.0.0.1:6379/3   # limits shared through Redis
    python -m bench.instructions --price --store redis://127.0.0.1:6379/9   # priced target, usage rows in Redis
    python -m bench.instructions --no-usage      # usage aggregates off (usage.record: false)
    python -m bench.instructions --budget --store redis://127.0.0.1:6379/9   # a key with a budget (vs --config-key)
    python -m bench.instructions --tracing       # traces at sample ratio 1 to a local OTLP receiver
    python -m bench.instructions --tracing --sample-ratio 0.1
    python -m bench.instructions --json-logs     # logging: {format: json, access: true}
    python -m bench.instructions --controls --store redis://127.0.0.1:6379/5   # every issue-15 control (bench controls)
    python -m bench.instructions --responses     # the same requests through POST /v1/responses
    python -m bench.instructions --messages      # the same requests through POST /v1/messages (Anthropic)
    python -m bench.instructions --agent         # 5-tool agent turns (route bench-agent, tools run server-side)
    python -m bench.instructions --responses --no-store   # Responses with store: false (no record written)
    python -m bench.instructions --websocket     # the Responses requests as turns over WebSocket connections
    python -m bench.instructions --websocket --per-socket 1   # each turn on a fresh socket, handshake counted
    python -m bench.instructions --responses --stream --fresh   # each request on a new HTTP connection
    python -m bench.instructions --conversation 10 [--websocket]   # 10-turn store: false conversations (ws_turns)
    python -m bench.instructions --embeddings    # POST /v1/embeddings, one input, floats (route bench-embed)
    python -m bench.instructions --embeddings --base64   # the same as base64 (the openai SDK's default)
    python -m bench.instructions --upstream responses    # the routes' target speaks the OpenAI Responses API

It starts the fake upstream and Loopgate (under ``valgrind --tool=callgrind``, counting off), sends
warm-up requests, counts only the measured requests, and prints instructions per request for the
whole gateway process. Traced, the exporter process of tracing (a child of the gateway) is
followed by callgrind too and its count printed on its own line. Run it in two checkouts
(``git worktree add``) to compare builds.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

from bench import servers

EXPORT_SETTLE_S = 6.0
#: Exports received by the local OTLP sink.
OTLP_POSTS = [0]
_TOTAL = re.compile(rb"([\d,]+)\s+\(100\.0%\)\s+PROGRAM TOTALS|([\d,]+)\s+PROGRAM TOTALS")


ADMIN_KEY = "bench-admin-key"
CONFIG_KEY = "bench-config-key"


_HIGH = {"rpm": 100_000_000, "tpm": 1_000_000_000, "max_concurrent": 10_000}


async def _managed_key(base: str, limits: list[str]) -> str:
    """A managed key with the named limits set, high enough never to refuse a bench request."""
    async with aiohttp.ClientSession() as session, session.post(
            f"{base}/admin/keys", headers={"authorization": f"Bearer {ADMIN_KEY}"},
            json={"tenant": "bench", **{name: _HIGH[name] for name in limits}}) as resp:
        resp.raise_for_status()
        return str((await resp.json())["key"])


EMBED_INPUT = "Loopgate is an OpenAI-compatible gateway that runs the tool loop server-side."


def _body(stream: bool, responses: bool, agent: bool, store: bool, messages: bool = False,
          embeddings: str | None = None) -> bytes:
    if embeddings is not None:
        return orjson.dumps({"model": "bench-embed", "input": EMBED_INPUT, "encoding_format": embeddings})
    model, prompt = ("bench-agent", "Run bench_tool.") if agent else ("bench", "Say hello in one short sentence.")
    if messages:
        return orjson.dumps({"model": model, "stream": stream, "max_tokens": 1024,
                             "messages": [{"role": "user", "content": prompt}]})
    if responses:
        body: dict[str, object] = {"model": model, "stream": stream, "input": prompt}
        if not store:
            body["store"] = False
        return orjson.dumps(body)
    return orjson.dumps({"model": model, "stream": stream, "messages": [{"role": "user", "content": prompt}]})


def _answered(status: int, raw: bytes, stream: bool, responses: bool, agent: bool, messages: bool = False,
              embeddings: bool = False) -> bool:
    """A 200 carrying a whole answer (a stream to its end; an agent turn to its final text; a vector)."""
    if status != 200:
        return False
    if embeddings:
        return b'"embedding":' in raw
    if stream:
        end = b"event: message_stop" if messages else b"event: response.completed" if responses else b"data: [DONE]"
        return end in raw
    return not agent or b"Done after 5 tool results." in raw


async def _send(url: str, count: int, concurrency: int, body: bytes, check: Callable[[int, bytes], bool],
                key: str | None = None, fresh: bool = False) -> int:
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
                ok += check(resp.status, await resp.read())

    connector = aiohttp.TCPConnector(force_close=fresh)  # fresh: a new connection per request
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120), connector=connector) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return ok


def _otlp_sink() -> str:
    """A local OTLP/HTTP endpoint that accepts and drops every export (the receiver's work is not counted)."""

    class Sink(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a collector does: no connection per export

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            OTLP_POSTS[0] += 1
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def _exporter(gateway_pid: int, timeout_s: float = 60.0) -> int | None:
    """The pid of the gateway's exporter process (its child), or None when it has none."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for task in Path(f"/proc/{gateway_pid}/task").iterdir():
            children = (task / "children").read_text().split()
            if children:
                return int(children[0])
        time.sleep(0.2)
    return None


def _total(out_dir: Path, pid: int) -> int | None:
    """Instructions counted for ``pid`` (its last dump), or None when it has no dump."""
    dumps = sorted(out_dir.glob(f"cg.{pid}.*"))
    if not dumps:
        return None
    annotate = subprocess.run(["callgrind_annotate", str(dumps[-1])], capture_output=True, timeout=300)
    match = _TOTAL.search(annotate.stdout)
    return int((match.group(1) or match.group(2)).replace(b",", b"")) if match else None


def _control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True, timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--responses", action="store_true", help="POST /v1/responses instead of chat completions")
    parser.add_argument("--messages", action="store_true", help="POST /v1/messages (Anthropic) instead")
    parser.add_argument("--agent", action="store_true", help="5-tool agent turns on route bench-agent")
    parser.add_argument("--embeddings", action="store_true", help="POST /v1/embeddings on route bench-embed")
    parser.add_argument("--base64", action="store_true", help="with --embeddings: encoding_format base64")
    parser.add_argument("--no-store", dest="keep", action="store_false", help="Responses with store: false")
    parser.add_argument("--websocket", action="store_true",
                        help="the Responses requests as response.create turns over WebSocket connections")
    parser.add_argument("--per-socket", type=int, default=0, metavar="N",
                        help="with --websocket: a new connection after every N turns (1: a turn on a fresh socket, "
                             "its handshake counted)")
    parser.add_argument("--fresh", action="store_true",
                        help="HTTP requests each on a new connection (the counterpart of --websocket --per-socket 1)")
    parser.add_argument("--conversation", type=int, default=0, metavar="N",
                        help="store: false conversations of N turns: over HTTP each turn resends the conversation, "
                             "with --websocket it sends its new message and previous_response_id")
    parser.add_argument("--limited", action="store_true", help="call as a managed key with rpm, tpm and max_concurrent")
    parser.add_argument("--limits", default="rpm,tpm,max_concurrent", help="with --limited: which limits the key has")
    parser.add_argument("--store", default=None, help="store.url (default memory://)")
    parser.add_argument("--price", action="store_true", help="price the target (every response gets a usage_cost)")
    parser.add_argument("--no-usage", action="store_true", help="usage.record: false")
    parser.add_argument("--config-key", action="store_true", help="call with a key from auth.keys")
    parser.add_argument("--budget", action="store_true", help="call with a key from auth.keys that has a (huge) budget")
    parser.add_argument("--tracing", action="store_true", help="export spans to a local OTLP/HTTP receiver")
    parser.add_argument("--sample-ratio", type=float, default=1.0, help="observability.sample_ratio with --tracing")
    parser.add_argument("--json-logs", action="store_true", help="JSON logs with an access record per request")
    parser.add_argument("--controls", nargs="?", const="all", default=None, metavar="LIST",
                        help="every control of the bench scenario 'controls' (needs --store redis://...), or "
                             "the ones named (limits,budget,price,redis,tracing,logs; a managed key always)")
    parser.add_argument("--upstream", choices=["chat", "responses"], default="chat",
                        help="the wire format of the routes' target: chat completions (type openai) or the "
                             "Responses API (type openai_responses)")
    parser.add_argument("--rollups", choices=["on", "off"], default="on",
                        help="the console's rollups (observability.rollups.enabled; on is the gateway's default)")
    args = parser.parse_args()
    if args.websocket or args.conversation:  # a turn is a Responses stream (bench/ws_turns.py)
        args.responses = args.stream = True
    embeddings = ("base64" if args.base64 else "float") if args.embeddings else None
    body = _body(args.stream, args.responses, args.agent, args.keep, args.messages, embeddings)

    def check(status: int, raw: bytes) -> bool:
        return _answered(status, raw, args.stream, args.responses, args.agent, args.messages, args.embeddings)

    out_dir = Path(tempfile.mkdtemp(prefix="loopgate-callgrind-"))
    with servers.start_fake(agent_tools=5 if args.agent else 0) as fake:
        port = servers.free_port()
        cfg = out_dir / "config.yaml"
        config = servers.gateway_config(fake.base)
        if args.limited:
            config["auth"] = {"admin_keys": [{"key": ADMIN_KEY, "name": "bench"}]}
        if args.store:
            config["store"] = {"url": args.store}
        if args.price:
            config["providers"]["fake"]["prices"] = {"fake-model": {"input_per_mtok": 2, "output_per_mtok": 8},
                                                     "text-embedding-3-small": {"input_per_mtok": 0.02,
                                                                                "output_per_mtok": 0}}
        if args.tracing:
            config["observability"] = {"otlp_endpoint": _otlp_sink(), "sample_ratio": args.sample_ratio}
        if args.json_logs:
            config["logging"] = {"format": "json", "access": True}
        if args.no_usage:
            config["usage"] = {"record": False}
        if args.config_key or args.budget:
            entry: dict[str, object] = {"key": CONFIG_KEY, "tenant": "bench"}
            if args.budget:
                entry["budget"] = {"limit": 1e12, "unit": "tokens", "period": "month"}
            config["auth"] = {**config.get("auth", {}), "keys": [entry]}
        if args.controls:
            from bench.controls import CONTROLS, controls_config  # bench.controls imports this module

            on = CONTROLS if args.controls == "all" else tuple(n.strip() for n in args.controls.split(",") if n.strip())
            args.tracing = args.tracing or "tracing" in on
            config = controls_config(fake.base, args.store or "redis://127.0.0.1:6379/5", _otlp_sink(), on)
            args.limited = True
            if "limits" not in on:
                args.limits = ""
        config.setdefault("observability", {})["rollups"] = {"enabled": args.rollups == "on"}
        if args.upstream == "responses":  # the chat routes' target (embeddings stay on the chat provider)
            config["providers"]["fake_responses"] = {**config["providers"]["fake"], "type": "openai_responses"}
            for route in ("bench", "bench-agent"):
                config["models"][route]["targets"] = [{"provider": "fake_responses", "model": "fake-model"}]
        cfg.write_text(yaml.safe_dump(config, sort_keys=False))
        # Traced, each worker has an exporter process (gateway/observability/exporter.py): callgrind follows
        # it too, so its instructions are counted apart from the gateway's.
        exporting = args.tracing or args.controls
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out_dir}/cg.%p",
               f"--trace-children={'yes' if exporting else 'no'}", sys.executable, "-m", "gateway", "serve",
               "--config", str(cfg), "--host", servers.HOST, "--port", str(port)]
        with servers.Proc("loopgate-callgrind", cmd, port, startup_timeout_s=300) as gateway:
            path = ("embeddings" if args.embeddings else "messages" if args.messages else "responses"
                    if args.responses else "chat/completions")
            url = f"{gateway.base}/v1/{path}"
            wanted = [name for name in args.limits.split(",") if name]
            key = asyncio.run(_managed_key(gateway.base, wanted)) if args.limited else None
            if args.config_key or args.budget:
                key = CONFIG_KEY
            send = functools.partial(_send, fresh=True) if args.fresh else _send
            if args.websocket or args.conversation:
                from bench import ws_turns

                def send(_url: str, count: int, concurrency: int, *_: object) -> Coroutine[Any, Any, int]:
                    if args.conversation:
                        converse = ws_turns.send_socket_conversations if args.websocket else \
                            ws_turns.send_conversations
                        return converse(gateway.base, count, concurrency, "bench", args.conversation, key)
                    return ws_turns.send_turns(gateway.base, count, concurrency, ws_turns.turn_message(body), key,
                                               args.per_socket)
            asyncio.run(send(url, args.warmup, args.concurrency, body, check, key))
            exporter = _exporter(gateway.pid) if exporting else None
            if exporter:
                # Its first post imports what the exporter imports lazily (requests, urllib3, ...): one-time
                # costs, kept out of the count. The batch processor posts every 5 s (OTEL_BSP_SCHEDULE_DELAY).
                deadline = time.monotonic() + 60
                while not OTLP_POSTS[0] and time.monotonic() < deadline:
                    time.sleep(0.2)
            time.sleep(1.0)
            _control(gateway.pid, "-i", "on")
            if exporter:
                _control(exporter, "-i", "on")
            ok = asyncio.run(send(url, args.requests, args.concurrency, body, check, key))
            _control(gateway.pid, "-d")
            _control(gateway.pid, "-i", "off")
            if exporter:
                time.sleep(EXPORT_SETTLE_S)  # the measured requests' spans posted
                _control(exporter, "-d")
            total = _total(out_dir, gateway.pid)
            exporter_total = _total(out_dir, exporter) if exporter else None
    if total is None or ok != args.requests:
        sys.exit(f"could not measure: {ok}/{args.requests} requests ok (dumps in {out_dir})")
    kind = ("Messages " if args.messages else "Responses " if args.responses else "chat ") + (
        "stream" if args.stream else "JSON")
    if embeddings is not None:
        kind = f"embeddings {embeddings}"
    kind += " agent turn" if args.agent else " request"
    kind += f" in {args.conversation}-turn conversations (store: false)" if args.conversation else ""
    kind += " over WebSocket" if args.websocket else ""
    kind += f", a new connection every {args.per_socket} turns" if args.websocket and args.per_socket else ""
    kind += ", a new connection each" if args.fresh else ""
    kind += "" if args.keep or not args.responses else " (store: false)"
    kind += "" if not args.controls else " all controls" if args.controls == "all" else f" controls {args.controls}"
    kind += (f" traced@{args.sample_ratio:g}" if args.tracing else "") + (" json-logs" if args.json_logs else "")
    kind += " rollups off" if args.rollups == "off" else ""
    kind += " to a Responses upstream" if args.upstream == "responses" else ""
    print(f"{total / args.requests / 1000:.0f}k instructions per {kind} "
          f"({total:,} over {args.requests} requests; dumps in {out_dir})")
    if exporter_total is not None:
        print(f"  + {exporter_total / args.requests / 1000:.0f}k per request in the exporter process "
              f"({exporter_total:,}; not in the number above)")


if __name__ == "__main__":
    main()
