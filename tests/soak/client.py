"""One soak loop from the client's side: ask, resume every pause, retry clean failures, check each answer.

Chat requests (the first ask and resume way A) go through the official ``openai`` SDK; streams are
read line by line through its ``with_streaming_response`` so the exact end of the stream (an error
event, ``[DONE]``) can be checked. Resume way B is a plain ``POST /v1/continuations/{id}``.
Every request is bounded in time: a request that does not end within ``bound_s`` is a hang.

What a response must look like (else a violation is recorded):
* completed: status ``completed``, exactly the script's text for the turns it covered (no
  duplicated or lost text, stream and non-stream alike), no tool-call deltas;
* paused: exactly the script's pending calls of the turn it stopped at, its text so far;
* failed: an OpenAI-shaped error with a status a failed upstream explains (429/502/503/504) and
  never ``internal_error``; a stream that already started ends with one error event and
  ``[DONE]``, its text a prefix of the script's;
* a failed resume leaves the continuation resumable; a completed one is never accepted again.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai
import orjson

from tests.fakes.soak_plan import APPROVE, CLIENT, LoopPlan

CLIENT_TOOL = {"type": "function", "function": {
    "name": CLIENT, "description": "Looks something up on the client",
    "parameters": {"type": "object", "properties": {"loop": {"type": "integer"}, "turn": {"type": "integer"},
                                                    "token": {"type": "string"}}}}}
FAILURE_STATUSES = {429, 502, 503, 504}
ERROR_KEYS = {"message", "type", "param", "code"}
CLIENT_RETRIES = 3  # a client retries a cleanly failed request this often before giving up


@dataclass(slots=True)
class Answer:
    kind: str  # "completed" | "paused" | "failed" | "conflict" (409: already resumed)
    text: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)  # the pending calls handed to the client
    extension: dict[str, Any] = field(default_factory=dict)
    failure: str = ""  # "<status> <code>" or "stream <code>"
    problems: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Session:
    sdk: openai.AsyncOpenAI
    http: httpx.AsyncClient
    url: str
    key: str
    bound_s: float
    stats: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    examples: dict[str, list[int]] = field(default_factory=dict)  # failure -> the first loops that saw it
    # Way A: send the paused calls' arguments back re-serialised (spaces after separators), as clients that
    # parse and re-dump them do; the gateway must compare them as JSON, not as bytes.
    reserialize: bool = False
    retries: int = CLIENT_RETRIES  # clean failures of one request a loop retries before giving up
    retry_pause_s: float = 0.0  # retry n waits n times this (the chaos run waits out a store failover)


def error_problems(payload: Any, where: str) -> tuple[str, list[str]]:
    """(code, problems) of an error body or event."""
    error = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(error, dict) or not error.keys() >= ERROR_KEYS:
        return "?", [f"{where}: error is not OpenAI-shaped: {str(payload)[:200]}"]
    code = str(error.get("code"))
    if code == "internal_error":
        return code, [f"{where}: raw internal error: {error.get('message')}"]
    return code, []


def http_failure(status: int, raw: bytes, where: str) -> Answer:
    try:
        payload = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return Answer("failed", failure=f"{status} ?", problems=[f"{where}: HTTP {status} with a non-JSON body"])
    code, problems = error_problems(payload, where)
    if status == 409 and code == "continuation_conflict":
        return Answer("conflict", failure=f"{status} {code}", problems=problems)
    if status not in FAILURE_STATUSES:
        problems.append(f"{where}: HTTP {status} {code}: {str(payload)[:300]}")
    return Answer("failed", failure=f"{status} {code}", problems=problems)


def read_body(body: dict[str, Any]) -> Answer:
    choice = body["choices"][0]
    message, extension = choice["message"], body.get("gateway") or {}
    answer = Answer(extension.get("status", "?"), message.get("content") or "", list(message.get("tool_calls") or ()),
                    extension)
    if answer.kind == "completed" and (answer.calls or choice.get("finish_reason") == "tool_calls"):
        answer.problems.append(f"completed response with tool calls / finish {choice.get('finish_reason')}")
    if answer.kind == "paused" and choice.get("finish_reason") != "tool_calls":
        answer.problems.append(f"paused response with finish_reason {choice.get('finish_reason')}")
    return answer


async def read_stream(lines: AsyncIterator[str], where: str) -> Answer:
    """A chat.completion.chunk stream: its text, pending calls, summary, and how it ended."""
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    extension: dict[str, Any] = {}
    finish: str | None = None
    error: Any = None
    problems: list[str] = []
    done = False
    received = 0
    progress: dict[str, list[str]] = {"tool_started": [], "tool_finished": []}
    try:
        async for line in lines:
            received += 1
            if line.startswith("data: "):
                data = line[6:]
                if done or (error is not None and data != "[DONE]"):
                    problems.append(f"{where}: data after the end of the stream: {data[:120]}")
                if data == "[DONE]":
                    done = True
                    continue
                event = orjson.loads(data)
                if "error" in event:
                    error = event
                    continue
                summary = event.get("gateway")
                if summary and summary.get("event") in progress:
                    progress[summary["event"]].append(summary["tool_call_id"])
                elif summary and "event" not in summary:
                    extension = summary
                for choice in event.get("choices") or ():
                    delta = choice.get("delta") or {}
                    text.append(delta.get("content") or "")
                    for call in delta.get("tool_calls") or ():
                        calls.append({"id": call["id"], "type": "function", "function": call["function"]})
                    finish = choice.get("finish_reason") or finish
    except httpx.HTTPError as exc:
        problems.append(f"{where}: the gateway dropped the stream after {received} lines: {exc!r}")
    if not done:
        problems.append(f"{where}: the stream ended without [DONE]")
    if error is not None:
        code, more = error_problems(error, where)
        return Answer("failed", "".join(text), failure=f"stream {code}", problems=problems + more)
    if not done:
        return Answer("failed", "".join(text), failure="stream dropped", problems=problems)
    started, finished = progress["tool_started"], progress["tool_finished"]
    if len(set(started)) != len(started) or sorted(started) != sorted(finished):
        problems.append(f"{where}: tool progress events do not pair up: started {started}, finished {finished}")
    answer = Answer(extension.get("status", "?"), "".join(text), calls, extension, problems=problems)
    if answer.kind == "completed" and (calls or finish == "tool_calls"):
        problems.append(f"{where}: completed stream with tool_calls deltas / finish {finish}")
    if answer.kind == "paused" and finish != "tool_calls":
        problems.append(f"{where}: paused stream with finish_reason {finish}")
    return answer


class LoopRun:
    """Drives one loop of the script to its end and checks every answer on the way."""

    def __init__(self, session: Session, plan: LoopPlan) -> None:
        self.s = session
        self.plan = plan
        self.where = f"loop {plan.loop} ({plan.route}, {'stream' if plan.stream else 'non-stream'}, " \
                     f"resume {plan.resume_way}{'/stream' if plan.resume_stream else ''})"
        self.messages: list[dict[str, Any]] = [{"role": "user", "content": plan.prompt}]
        self.attempt_failed = False  # an attempt of the resume in progress failed on this side

    def violation(self, text: str) -> None:
        self.s.violations.append(f"seed {self.plan.seed} {self.where}: {text}")

    # -- requests ----------------------------------------------------------------------
    async def _chat(self, messages: list[dict[str, Any]], stream: bool) -> Answer:
        kwargs: dict[str, Any] = {"model": self.plan.route, "messages": messages, "tools": [CLIENT_TOOL]}
        sdk = self._sdk()
        try:
            if not stream:
                completion = await sdk.chat.completions.create(**kwargs)
                return read_body(completion.model_dump())
            async with sdk.chat.completions.with_streaming_response.create(stream=True, **kwargs) as response:
                return await read_stream(response.iter_lines(), "chat stream")
        except openai.APIStatusError as exc:
            return http_failure(exc.status_code, await exc.response.aread(), "chat")

    async def _resume_b(self, continuation_id: str, decisions: list[dict[str, Any]], stream: bool) -> Answer:
        url = f"{self._url()}/v1/continuations/{continuation_id}"
        body = {"decisions": decisions, "stream": stream}
        headers = {"authorization": f"Bearer {self.s.key}"}
        async with self._http().stream("POST", url, json=body, headers=headers) as response:
            if response.status_code != 200:
                return http_failure(response.status_code, await response.aread(), "resume B")
            if not stream:
                return read_body(orjson.loads(await response.aread()))
            return await read_stream(response.aiter_lines(), "resume B stream")

    async def _bounded(self, request: Callable[[], Awaitable[Answer]]) -> Answer:
        self.s.stats["requests"] += 1
        try:
            answer = await asyncio.wait_for(request(), self.s.bound_s)
        except TimeoutError:
            return Answer("failed", failure="hang", problems=[f"no answer within {self.s.bound_s:g}s (hang)"])
        except (openai.APIConnectionError, httpx.HTTPError) as exc:
            return Answer("failed", failure="connection", problems=[f"the gateway dropped the request: {exc!r}"])
        self._count_attempts(answer.extension.get("attempts") or ())
        return answer

    def _count_attempts(self, attempts: Any) -> None:
        for this, following in itertools.pairwise(attempts):
            if this.get("error_class"):
                self.s.stats["failovers" if following["target"] != this["target"] else "same-target retries"] += 1

    # Where requests go: one gateway here; the chaos run (``tests/soak/chaos.py``) spreads them over replicas.
    def _sdk(self) -> openai.AsyncOpenAI:
        return self.s.sdk

    def _http(self) -> httpx.AsyncClient:
        return self.s.http

    def _url(self) -> str:
        return self.s.url

    async def _on_conflict(self, continuation_id: str, expected: str = "") -> str:
        """A resume refused with 409: "retry" it, the loop "ended" for a documented reason, or "violation".

        ``expected``: the text the rest of the loop answers with (an answer kept elsewhere is checked against it).
        Only after an attempt of this resume failed on the client's side (a hang past ``bound_s`` on a loaded
        machine, a dropped stream) while the gateway went on with it: that attempt still holds the claim (it ends,
        then the resume is retried if it was given back), or it finished the resume, and the continuation keeps
        the answer (the asker can always read the final answer there). Any other 409 is a violation."""
        if not self.attempt_failed:
            return "violation"
        deadline = time.monotonic() + self.s.bound_s
        status, result = await self._kept(continuation_id)
        while status == "claimed" and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            status, result = await self._kept(continuation_id)
        if status == "pending":
            return "retry"
        content = content_of(result)
        if status != "resumed" or not content or not expected.startswith(content):
            return "violation"
        completed = ((result or {}).get("gateway") or {}).get("status") == "completed"
        self.s.stats["loops completed" if completed else "loops failed cleanly"] += 1
        self.s.stats["loops ended: answer read from the continuation after a failed attempt"] += 1
        return "ended"

    async def _kept(self, continuation_id: str) -> tuple[str, dict[str, Any] | None]:
        """A continuation's status and the result it keeps once resumed (``GET /v1/continuations/{id}``)."""
        try:
            response = await self._http().get(f"{self._url()}/v1/continuations/{continuation_id}",
                                              headers={"authorization": f"Bearer {self.s.key}"})
        except httpx.HTTPError as exc:
            return f"unreachable ({exc!r})", None
        if response.status_code != 200:
            return f"HTTP {response.status_code}", None
        body = response.json()
        result = body.get("result")
        return str(body.get("status")), result if isinstance(result, dict) else None

    # -- the loop ----------------------------------------------------------------------
    async def run(self) -> None:
        plan, first = self.plan, 0
        request: Callable[[], Awaitable[Answer]] = functools.partial(self._chat, self.messages, plan.stream)
        resume: tuple[str, list[dict[str, Any]]] | None = None  # (continuation id, decisions) being resumed
        tries = 0
        while True:
            answer = await self._bounded(request)
            for problem in answer.problems:
                self.violation(problem)
            if answer.kind in ("failed", "conflict"):
                self.attempt_failed = self.attempt_failed or (answer.kind == "failed" and resume is not None)
                self.s.failures[answer.failure] += 1
                seen = self.s.examples.setdefault(answer.failure, [])
                if len(seen) < 3 and plan.loop not in seen:
                    seen.append(plan.loop)
                outcome = "violation"
                if answer.kind == "conflict":
                    outcome = await self._on_conflict(resume[0] if resume else "",
                                                      plan.expected_text(first, plan.final_turn))
                    if outcome == "retry":
                        continue
                    if outcome == "ended":
                        return
                    self.violation(f"a resume nobody else holds was refused ({answer.failure}); the continuation "
                                   "is no longer resumable")
                expected = plan.expected_text(first, plan.final_turn)
                if not expected.startswith(answer.text):
                    self.violation(f"text before the failure {answer.text!r} is not a prefix of {expected!r}")
                tries += 1
                if tries > self.s.retries or answer.kind == "conflict":
                    self.s.stats["loops failed cleanly"] += 1
                    return
                self.s.stats["client retries" if resume is None else "resume retries"] += 1
                if self.s.retry_pause_s:
                    await asyncio.sleep(self.s.retry_pause_s * tries)
                continue
            tries = 0
            if resume is not None:
                self.s.stats["resumes accepted"] += 1
            last = self._check_answer(answer, first)
            if answer.kind != "paused":
                self.s.stats["loops completed" if answer.kind == "completed" else "loops unfinished"] += 1
                if resume is not None and plan.replay:
                    await self._replay(*resume)
                return
            self.s.stats["pauses"] += 1
            first = last + 1
            self.attempt_failed = False
            resume, request = self._resumption(answer)

    def _check_answer(self, answer: Answer, first: int) -> int:
        """Checks text and pending calls against the script; returns the last turn the answer covered."""
        plan = self.plan
        if answer.kind == "completed":
            last = plan.final_turn
        elif answer.kind == "paused":
            turns = {orjson.loads(c["function"]["arguments"]).get("turn") for c in answer.calls}
            if len(turns) != 1 or not isinstance(next(iter(turns)), int):
                self.violation(f"paused with calls from turns {turns}")
                return plan.final_turn
            last = turns.pop()
            if not first <= last < plan.final_turn:
                self.violation(f"paused at turn {last}, outside turns {first}..{plan.final_turn - 1}")
                return plan.final_turn
            pending = tuple(c["function"]["name"] for c in answer.calls)
            wanted = tuple(name for name in plan.turns[last].calls if name in (CLIENT, APPROVE))
            if pending != wanted:
                self.violation(f"paused at turn {last} on {pending}, the script's turn has {wanted}")
            listed = [p["tool_call_id"] for p in answer.extension.get("pending") or ()]
            if listed != [c["id"] for c in answer.calls]:
                self.violation(f"gateway.pending {listed} differs from the tool calls handed over")
        else:
            self.violation(f"response with gateway.status {answer.kind!r}")
            return plan.final_turn
        expected = plan.expected_text(first, last)
        if answer.text != expected:
            self.violation(f"turns {first}..{last}: text {answer.text!r} != script {expected!r}")
        records = answer.extension.get("tool_calls") or ()
        for record in records:
            self.s.stats[f"server tool {record['status']}"] += 1
        ids = [record["id"] for record in records]
        if len(set(ids)) != len(ids):
            self.violation(f"gateway.tool_calls lists a call more than once: {ids}")
        return last

    def _resumption(self, answer: Answer) -> tuple[tuple[str, list[dict[str, Any]]],
                                                   Callable[[], Awaitable[Answer]]]:
        plan = self.plan
        continuation_id = answer.extension.get("continuation_id") or ""
        decisions: list[dict[str, Any]] = []
        # Way A hands back the client's own results; a call awaiting approval is decided through way B only
        # (a follow-up that answers it is refused: approval_pending), so such a pause always goes that way.
        way_a = plan.resume_way == "a" and all(call["function"]["name"] == CLIENT for call in answer.calls)
        for call in answer.calls:
            token = orjson.loads(call["function"]["arguments"]).get("token")
            if call["function"]["name"] == CLIENT:
                decisions.append({"tool_call_id": call["id"], "output": f"client {token}"})
            elif plan.approve:
                decisions.append({"tool_call_id": call["id"], "approve": True})
            else:
                decisions.append({"tool_call_id": call["id"], "approve": False, "reason": f"no {token}"})
        if way_a:
            calls = answer.calls
            if self.s.reserialize:
                calls = [{**c, "function": {**c["function"], "arguments": json.dumps(
                    json.loads(c["function"]["arguments"]), ensure_ascii=False)}} for c in calls]
            assistant: dict[str, Any] = {"role": "assistant", "content": answer.text or None, "tool_calls": calls}
            self.messages = [*self.messages, assistant,
                             *({"role": "tool", "tool_call_id": d["tool_call_id"], "content": d["output"]}
                               for d in decisions)]
            snapshot = list(self.messages)
            return (continuation_id, decisions), functools.partial(self._chat, snapshot, plan.resume_stream)
        if plan.race:
            return (continuation_id, decisions), functools.partial(self._race, continuation_id, decisions)
        return (continuation_id, decisions), functools.partial(self._resume_b, continuation_id, decisions,
                                                               plan.resume_stream)

    async def _race(self, continuation_id: str, decisions: list[dict[str, Any]]) -> Answer:
        """Two resumes of one continuation at once: at most one is accepted, the other gets 409."""
        self.s.stats["resume races"] += 1
        both = await asyncio.gather(self._resume_b(continuation_id, decisions, self.plan.resume_stream),
                                    self._resume_b(continuation_id, decisions, False))
        accepted = [a for a in both if a.kind in ("completed", "paused")]
        if len(accepted) > 1:
            self.violation(f"continuation {continuation_id} was resumed twice at once")
        for other in both:
            # The loser gets 409, or failed cleanly before the winner's claim (then released it).
            if other.kind == "conflict":
                self.s.stats["race losers refused (409)"] += 1
            elif accepted and other is not accepted[0]:
                self.s.stats["race losers failed cleanly (before the winner's claim)"] += 1
        if accepted:
            return accepted[0]
        return next((a for a in both if a.kind == "failed"), both[0])

    async def _replay(self, continuation_id: str, decisions: list[dict[str, Any]]) -> None:
        """A resume that completed must never be accepted again."""
        self.s.stats["replayed resumes"] += 1
        again = await self._bounded(lambda: self._resume_b(continuation_id, decisions, False))
        if again.kind != "conflict":
            self.violation(f"resuming {continuation_id} again after it completed gave {again.kind} {again.failure}")


def content_of(result: dict[str, Any] | None) -> str:
    """The answer text of a kept chat completion result ("" when it is not one)."""
    if result is None or result.get("object") != "chat.completion" or not result.get("choices"):
        return ""
    content = (result["choices"][0].get("message") or {}).get("content")
    return content if isinstance(content, str) else ""
