"""The randomized fault-injection soak of tool loops, a few hundred loops in CI (``python -m bench.soak``: thousands).

300 loops on the memory store, and a third as many on Redis with two gateway workers.

Seeded: a failure names its seed and loop, and ``python -m bench.soak --seed S --only L``
replays that loop alone. ``LOOPGATE_SOAK_SEED`` / ``LOOPGATE_SOAK_LOOPS`` explore other runs.
The checker tests below show each invariant check can fail.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import orjson
import pytest

from tests.e2e.test_continuations import REDIS_URL, require_redis
from tests.fakes.soak_plan import ECHO, FAULT_KINDS, LoopPlan, plan_for
from tests.fakes.soak_tools import SoakToolServer
from tests.fakes.soak_transcript import read_transcript
from tests.fakes.soak_upstream import SoakUpstream
from tests.soak.client import http_failure, read_stream
from tests.soak.harness import MODELS, record_violations, run_soak

SEED = int(os.environ.get("LOOPGATE_SOAK_SEED", "20261203"))
LOOPS = int(os.environ.get("LOOPGATE_SOAK_LOOPS", "300"))


@pytest.mark.long(seconds=11)
def test_soak_of_tool_loops_under_faults() -> None:
    # Real clients re-serialise the arguments they send back: way A must still find the continuation.
    result = run_soak(LOOPS, SEED, concurrency=16, reserialize=True)
    print(f"\nsoak: {LOOPS} loops, seed {SEED}\n{result.table()}")
    assert not result.violations, (
        f"{len(result.violations)} invariant violations; reproduce with `python -m bench.soak --loops {LOOPS} "
        f"--seed {SEED}` (one loop: `--only L`):\n" + "\n".join(result.violations[:20]))
    # The run exercised what it claims to check.
    assert result.stats["loops completed"] + result.stats["loops failed cleanly"] == LOOPS
    assert result.stats["loops failed cleanly"] < LOOPS // 10
    assert all(result.faults[kind] for kind in FAULT_KINDS), result.faults
    assert all(result.upstream_requests[name] for name in MODELS), result.upstream_requests
    for count in ("pauses", "resumes accepted", "resume retries", "failovers", "replayed resumes",
                  "race losers refused (409)", "server tool ok", "server tool denied"):
        assert result.stats[count], count
    assert any(code.startswith("stream ") for code in result.failures), result.failures


@pytest.mark.long(seconds=12)
def test_soak_on_redis_across_two_workers() -> None:
    """The production shape: pauses and resumes (and races of two resumes) land on either worker."""
    require_redis(REDIS_URL)
    loops = max(1, LOOPS // 3)
    result = run_soak(loops, SEED + 1, concurrency=16, store_url=REDIS_URL, workers=2)
    print(f"\nsoak on Redis, 2 workers: {loops} loops, seed {SEED + 1}\n{result.table()}")
    assert not result.violations, (
        f"{len(result.violations)} invariant violations; reproduce with `python -m bench.soak --loops {loops} "
        f"--seed {SEED + 1} --store {REDIS_URL} --workers 2`:\n" + "\n".join(result.violations[:20]))
    assert result.stats["resumes accepted"] and result.stats["race losers refused (409)"]
    assert result.stats["loops completed"] + result.stats["loops failed cleanly"] == loops


# -- the checks themselves ------------------------------------------------------------------
def _plan_with_two_echo_calls() -> LoopPlan:
    return next(p for p in (plan_for(1, loop) for loop in range(200)) if p.turns[0].calls == (ECHO, ECHO))


def _args(plan: LoopPlan, index: int) -> dict[str, object]:
    return {"loop": plan.loop, "turn": 0, "token": f"tok{index}"}


def _openai_body(plan: LoopPlan, results: list[tuple[str, str]]) -> dict[str, object]:
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": ECHO, "arguments": orjson.dumps(
        _args(plan, i)).decode()}} for i in range(2)]
    return {"messages": [{"role": "user", "content": plan.prompt}, {"role": "assistant", "content": None,
                                                                     "tool_calls": calls},
                         *({"role": "tool", "tool_call_id": cid, "content": text} for cid, text in results)]}


def test_transcript_check_wants_exactly_one_result_per_call() -> None:
    plan = _plan_with_two_echo_calls()
    good = read_transcript("openai", _openai_body(plan, [("c0", "echo tok0"), ("c1", "echo tok1")]))
    assert not good.problems and good.turn == 1 and good.plan == plan
    twice = read_transcript("openai", _openai_body(plan, [("c0", "echo tok0"), ("c1", "x"), ("c1", "x")]))
    assert any("has 2 tool results" in p for p in twice.problems)
    anthropic = {"messages": [
        {"role": "user", "content": plan.prompt},
        {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": ECHO, "input": _args(plan, i)}
                                          for i in range(2)]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t0", "content": "echo tok0"}]}]}
    assert any("has 0 tool results" in p for p in read_transcript("anthropic", anthropic).problems)
    gemini = {"contents": [
        {"role": "user", "parts": [{"text": plan.prompt}]},
        {"role": "model", "parts": [{"functionCall": {"name": ECHO, "args": _args(plan, i)}} for i in range(2)]},
        {"role": "user", "parts": [{"functionResponse": {"name": "other", "response": {"output": "x"}}}]}]}
    problems = read_transcript("gemini", gemini).problems
    assert any("answers 'soak_echo'" in p for p in problems) and any("0 tool results" in p for p in problems)


def test_transcript_check_follows_the_script() -> None:
    plan = _plan_with_two_echo_calls()
    body = _openai_body(plan, [("c0", "echo tok0")])
    body["messages"][1]["tool_calls"] = body["messages"][1]["tool_calls"][:1]  # type: ignore[index]
    assert any("the script asked for" in p for p in read_transcript("openai", body).problems)
    stranger = read_transcript("openai", {"messages": [{"role": "user", "content": "hello"}]})
    assert stranger.plan is None and stranger.problems


async def _lines(*lines: str) -> AsyncIterator[str]:
    for line in lines:
        yield line


async def test_stream_check_wants_one_error_then_done() -> None:
    chunk = 'data: {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": null}]}'
    error = 'data: {"error": {"message": "m", "type": "upstream_error", "param": null, "code": "stream_interrupted"}}'
    clean = await read_stream(_lines(chunk, error, "data: [DONE]"), "s")
    assert clean.kind == "failed" and clean.text == "Hi" and clean.failure == "stream stream_interrupted"
    assert not clean.problems
    assert (await read_stream(_lines(chunk, error), "s")).problems  # no [DONE]
    assert (await read_stream(_lines(error, chunk, "data: [DONE]"), "s")).problems  # data after the error
    internal = error.replace("stream_interrupted", "internal_error")
    assert (await read_stream(_lines(internal, "data: [DONE]"), "s")).problems


async def test_stream_check_pairs_tool_progress_events() -> None:
    def event(name: str) -> str:
        return "data: " + orjson.dumps({"choices": [], "gateway": {"event": name, "tool_call_id": "c1"}}).decode()

    summary = 'data: {"choices": [], "gateway": {"status": "completed", "tool_calls": []}}'
    paired = await read_stream(_lines(event("tool_started"), event("tool_finished"), summary, "data: [DONE]"), "s")
    assert paired.kind == "completed" and not paired.problems
    unfinished = await read_stream(_lines(event("tool_started"), summary, "data: [DONE]"), "s")
    assert any("do not pair up" in p for p in unfinished.problems)


def test_http_failure_check() -> None:
    def body(code: str) -> bytes:
        return orjson.dumps({"error": {"message": "m", "type": "t", "param": None, "code": code}})

    assert not http_failure(502, body("upstream_unreachable"), "x").problems
    assert http_failure(500, body("internal_error"), "x").problems
    assert http_failure(400, body("invalid_request"), "x").problems  # a strict fake rejected what was sent
    assert http_failure(503, b"<html>busy</html>", "x").problems
    assert http_failure(409, body("continuation_conflict"), "x").kind == "conflict"


def test_record_check_catches_a_tool_run_twice_and_a_wrong_result() -> None:
    tools = SoakToolServer()
    fake = SoakUpstream("oa", "openai")
    tools.runs[("/echo", "once")] = 1
    tools.runs[("/echo", "twice")] = 2
    fake.results_seen.update({"once": (ECHO, "echo once"), "twice": (ECHO, "echo twice"),
                              "never": (ECHO, "echo never")})
    violations = record_violations({"oa": fake}, tools, 1)
    assert len(violations) == 2
    assert "ran 2 times for call twice" in violations[0] and "call never (executions: 0)" in violations[1]
