"""A fake provider for the soak: it answers from the loop's script and injects the request's fault.

Unlike ``FakeUpstream`` (a queue of replies per test), it is stateless per conversation: the
request's transcript says which loop and turn it is, the script (``soak_plan``) says what the
model answers there, and the seeded fault of that request decides how the answer is broken.
Many loops can run through it at once. Every request is checked (the provider's strict rules,
exactly-once pairing, the script) and summarised in ``records``; bodies are not kept, so a run
of thousands of loops stays small. Tool results seen in transcripts are kept per call token, so
the harness can compare them with the tool server's executions.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from tests.fakes.soak_plan import ECHO, Fault, fault_for
from tests.fakes.soak_transcript import read_transcript
from tests.fakes.upstream import FakeUpstream, Reply, Rules

# A stalled answer goes silent for longer than any bound of the soak: only the gateway's read timeout
# (or the gateway leaving, which cancels this handler) ends it.
STALL_S = 60.0


# Frames a little apart, as a real provider's are: the gateway then mostly reads them one by one, so
# whether a stream fault strikes before or after its commit point (first delta forwarded) repeats run to run.
FRAME_GAP_S = 0.001


@dataclass(frozen=True, slots=True)
class SoakRecord:
    upstream: str
    loop: int
    turn: int
    attempt: int
    fault: str  # the injected kind; "rejected" when the request broke the rules and got a 400
    stream: bool
    problems: tuple[str, ...]


def call_token(loop: int, turn: int, upstream: str, attempt: int, index: int) -> str:
    """Unique per call the model ever made (one upstream answer, one position): the call's identity."""
    return f"L{loop}-t{turn}-{upstream}-a{attempt}-c{index}"


class SoakUpstream(FakeUpstream):
    def __init__(self, name: str, wire: str, rules: Rules | None = None) -> None:
        super().__init__(wire, rules)
        self.name = name
        self.records: list[SoakRecord] = []
        self.results_seen: dict[str, tuple[str, str]] = {}  # call token -> (tool name, result text)
        self._attempts: Counter[tuple[int, int]] = Counter()
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)

    def build(self) -> web.Application:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("POST", "/{tail:.*}", self._answer)
        return app

    # -- checking --------------------------------------------------------------------
    def _inspect(self, body: dict[str, Any], model: str, stream: bool) -> tuple[Reply | None, Fault, SoakRecord]:
        problems = list(self.rules(body, model)) if self.rules else []
        body, prefix = _without_prefill(body)  # a rescued stream's continuation: the turn goes on from ``prefix``
        transcript = read_transcript(self.wire, body)
        problems += transcript.problems
        plan = transcript.plan
        loop, turn = (plan.loop, transcript.turn) if plan else (-1, transcript.turn)
        with self._lock:
            self._attempts[(loop, turn)] += 1
            attempt = self._attempts[(loop, turn)]
            for exchanges in transcript.turns:
                for exchange in exchanges:
                    if not exchange.results:
                        continue
                    token, result = str(exchange.args.get("token")), (exchange.name, exchange.results[0])
                    known = self.results_seen.setdefault(token, result)
                    if known != result:
                        problems.append(f"the result of call {token} changed between requests: {known} -> {result}")
        if plan is None or problems:
            record = SoakRecord(self.name, loop, turn, attempt, "rejected", stream, tuple(problems))
            return None, Fault("rejected"), record
        fault = fault_for(plan.seed, loop, turn, self.name, attempt, self.wire, stream)
        script = plan.turns[min(turn, plan.final_turn)]
        calls = [(name, {"loop": loop, "turn": turn, "token": call_token(loop, turn, self.name, attempt, i)})
                 for i, name in enumerate(script.calls)]
        prompt_size = max(1, len(orjson.dumps(body)) // 3)
        text = script.text[len(prefix):] if prefix and script.text.startswith(prefix) else script.text
        reply = Reply(text=text, tool_calls=calls, usage=(prompt_size, 5 + len(script.text) // 4))
        return reply, fault, SoakRecord(self.name, loop, turn, attempt, fault.kind, stream, ())

    # -- serving ---------------------------------------------------------------------
    async def _answer(self, request: web.Request) -> web.StreamResponse:
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            self.records.append(SoakRecord(self.name, -1, -1, 0, "rejected", False, ("request body is not JSON",)))
            return web.json_response(self._error_payload(400, "body is not JSON"), status=400)
        path = request.path
        model = body.get("model") or path.split("/models/")[-1].split(":")[0]
        stream = bool(body.get("stream")) or "streamGenerateContent" in path
        reply, fault, record = self._inspect(body, model, stream)
        self.records.append(record)
        if reply is None:
            return web.json_response(self._error_payload(400, "; ".join(record.problems)[:2000]), status=400)
        if fault.delay_s:
            await asyncio.sleep(fault.delay_s)
        if fault.kind == "reset_before_head":
            request.transport.close()  # type: ignore[union-attr]
            return web.Response(status=500)
        if fault.status:
            headers = {"retry-after": fault.retry_after} if fault.retry_after is not None else {}
            return web.Response(body=orjson.dumps(self._error_payload(fault.status, "injected fault")),
                                status=fault.status, headers=headers, content_type="application/json")
        n = next(self._numbers)
        if stream:
            return await self._stream(request, reply, fault, model, n)
        return await self._whole_reply(request, reply, fault, model, n)

    async def _whole_reply(self, request: web.Request, reply: Reply, fault: Fault, model: str,
                           n: int) -> web.StreamResponse:
        if fault.kind == "invalid_json":
            return web.Response(body=b'{"id": "x", "choices": [{not json', content_type="application/json")
        if fault.kind == "error_event":
            return web.Response(body=self._stream_error().split(b"data: ", 1)[1].strip(),
                                content_type="application/json")
        raw = orjson.dumps(self._whole(reply, model, n))
        if fault.kind in ("cut", "reset_after_head", "stall"):
            response = web.StreamResponse(headers={"content-type": "application/json",
                                                   "content-length": str(len(raw))})
            await response.prepare(request)
            if fault.kind != "reset_after_head":
                await response.write(raw[: len(raw) // 2])
            if fault.kind == "stall":
                await asyncio.sleep(STALL_S)
            request.transport.close()  # type: ignore[union-attr]
            return response
        return web.Response(body=raw, content_type="application/json")

    async def _stream(self, request: web.Request, reply: Reply, fault: Fault, model: str,
                      n: int) -> web.StreamResponse:
        frames = self._frames(reply, model, n)
        close_after: int | None = None
        if fault.kind == "reset_after_head":
            frames, close_after = [], 0
        elif fault.kind == "error_event":
            frames = [self._stream_error()]
        elif fault.kind == "invalid_json":
            frames, close_after = [b"data: {broken\n\n"], 1
        elif fault.kind in ("cut", "stall"):
            close_after = max(1, len(frames) // 2)
        elif fault.kind == "bad_event":
            middle = max(1, len(frames) // 2)
            frames = [*frames[:middle], b"data: {broken\n\n", *frames[middle:]]
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        try:
            for index, frame in enumerate(frames):
                if close_after is not None and index >= close_after:
                    break
                await response.write(frame)
                await asyncio.sleep(FRAME_GAP_S)
            if close_after is not None:
                if fault.kind == "stall":
                    await asyncio.sleep(STALL_S)
                request.transport.close()  # type: ignore[union-attr]
                return response
            await response.write_eof()
        except ConnectionResetError:  # the gateway went away (it failed over, or its client left): fine
            self.cancelled += 1
        return response

    # -- results ---------------------------------------------------------------------
    def echo_results(self) -> dict[str, str]:
        """Call token -> result text, for the server tool's calls seen answered in any transcript."""
        return {token: result for token, (name, result) in self.results_seen.items() if name == ECHO}


def _without_prefill(body: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The body without a final assistant (Gemini: model) turn, and that turn's text: a prefill, as the gateway
    sends when it continues a stream cut after its commit point; the body as is and "" when there is none."""
    key = "contents" if "contents" in body else "messages"
    turns = body.get(key) or []
    last = turns[-1] if turns else None
    if not isinstance(last, dict) or last.get("role") not in ("assistant", "model"):
        return body, ""
    content = last.get("content", last.get("parts"))
    if isinstance(content, list):
        content = "".join(str(part.get("text") or "") for part in content if isinstance(part, dict))
    return {**body, key: turns[:-1]}, str(content or "")
