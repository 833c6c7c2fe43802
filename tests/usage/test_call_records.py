"""Work that runs no loop (embeddings, MCP sampling) is metered and recorded from its ``CallRecord`` as a loop is
from its state; a request that ran no model call at all is counted by its status."""

from __future__ import annotations

import io
import logging
import time

import orjson
import pytest

from gateway.api.request.exchange import Exchange
from gateway.canonical import CallRecord, Usage, WorkRecord
from gateway.config.model import ApiKey, Price
from gateway.loop.engine import LoopState
from gateway.loop.events import LoopResult
from gateway.observability import access_log
from gateway.store.usage.base import NO_MODEL
from gateway.store.usage.memory import MemoryUsage
from gateway.usage.meter import Metering
from gateway.usage.pricing import NANO, Pricing

KEY = ApiKey(key="sk", tenant="t", id="k1")
PRICES = {"openai:text-embedding-3-small": Price(0.02, 0.0), "anthropic:claude": Price(3.0, 15.0)}


def _metering() -> tuple[Metering, MemoryUsage]:
    store = MemoryUsage()
    targets = frozenset({"openai:text-embedding-3-small", "azure:text-embedding-3-small", "anthropic:claude"})
    return Metering(Pricing(PRICES), store, frozenset({"t"}), targets=targets), store


def _today() -> str:
    return time.strftime("%Y-%m-%d", time.gmtime())


def _embedding_call() -> CallRecord:
    """An embeddings call whose first target failed and whose second answered, as the walk leaves it."""
    record = CallRecord()
    record.attempts.append({"target": "azure:text-embedding-3-small", "error_class": "upstream_error",
                            "status": 503, "elapsed_ms": 4.0})
    record.attempts.append({"target": "openai:text-embedding-3-small", "error_class": None, "status": None,
                            "elapsed_ms": 9.0})
    record.answered("openai:text-embedding-3-small", "text-embedding-3-small-v2", Usage(prompt_tokens=1_000))
    return record


def test_a_call_record_reads_as_a_loops_state_does() -> None:
    record = _embedding_call()
    assert (record.iterations, record.model, record.answered_by) == (
        1, "text-embedding-3-small-v2", ["openai:text-embedding-3-small"])
    assert record.calls == [["openai:text-embedding-3-small", 1_000, 0, 0, 0]]
    assert len(record.tool_records) == 0 and len(record.attempts) == 2
    record.answered("anthropic:claude", "claude-x", Usage(prompt_tokens=10, completion_tokens=5, cached_tokens=2))
    assert record.iterations == 2 and record.model == "claude-x"
    assert (record.usage.prompt_tokens, record.usage.completion_tokens, record.usage.cached_tokens) == (1_010, 5, 2)
    # A loop's state builds the same per-call entries: pricing and the breakdown read both alike.
    state = LoopState()
    state.add_call("anthropic:claude", Usage(prompt_tokens=10, completion_tokens=5, cached_tokens=2))
    assert state.calls == record.calls[1:]
    readers: list[WorkRecord] = [record, state]  # both satisfy the protocol (mypy checks this line)
    assert all(item.usage.prompt_tokens for item in readers)


async def test_an_accounted_call_is_priced_and_recorded_on_the_target_that_answered() -> None:
    metering, store = _metering()
    meter = metering.meter(KEY)
    meter.route = "embed"
    record = _embedding_call()
    cost = meter.account(record)
    assert cost == metering.pricing.cost_nano(record.calls) and cost == 20_000  # 1,000 tokens at $0.02 a million
    assert meter.cost_nano == cost
    meter.close(200)
    (parts,) = await store.breakdown("t", "k1", [_today()])
    # one request, no error, its tokens and cost on the answering target (the failed attempt spent nothing)
    assert parts == {("embed", "openai:text-embedding-3-small"): [1, 0, 1_000, 0, 0, 0, 20_000, 0]}


async def test_a_sampled_call_records_its_completion_and_its_cost() -> None:
    metering, store = _metering()
    meter = metering.meter(KEY)
    meter.route = "sampler"
    record = CallRecord()
    record.answered("anthropic:claude", "claude-x", Usage(prompt_tokens=100, completion_tokens=20))
    assert meter.account(record) == 600_000  # 100 * $3 + 20 * $15 a million tokens, in nano-USD
    meter.close(200)
    (parts,) = await store.breakdown("t", "k1", [_today()])
    assert parts == {("sampler", "anthropic:claude"): [1, 0, 100, 20, 0, 0, 600_000, 0]}


@pytest.mark.parametrize(("status", "errors"), [(200, 0), (429, 1)])
async def test_a_request_that_ran_no_model_call_is_counted_by_its_status(status: int, errors: int) -> None:
    """A ``count_tokens``, a listing: nothing watched or accounted, so only its status can make it an error."""
    metering, store = _metering()
    meter = metering.meter(KEY)
    meter.route = "smart"
    meter.close(status)
    (parts,) = await store.breakdown("t", "k1", [_today()])
    assert parts == {("smart", NO_MODEL): [1, errors, 0, 0, 0, 0, 0, 0]}


async def test_a_watched_loop_that_never_finished_is_an_error_and_one_that_did_is_not() -> None:
    metering, store = _metering()
    unfinished = metering.meter(KEY)
    unfinished.route = "smart"
    unfinished.watch(LoopState())
    unfinished.close(200)  # a stream that ended in an error frame, or whose client went away
    (parts,) = await store.breakdown("t", "k1", [_today()])
    assert parts == {("smart", NO_MODEL): [1, 1, 0, 0, 0, 0, 0, 0]}
    finished = metering.meter(KEY)
    finished.route = "smart"
    state = LoopState()
    finished.watch(state)
    state.add_call("anthropic:claude", Usage(prompt_tokens=100, completion_tokens=20))
    result = LoopResult("completed", "stop", state.usage, {})
    finished.finish(result)
    assert result.gateway["usage_cost"] == pytest.approx(600_000 / NANO)
    finished.close(200)
    (parts,) = await store.breakdown("t", "k1", [_today()])
    assert parts[("smart", "anthropic:claude")] == [1, 0, 100, 20, 0, 0, 600_000, 0]


def test_the_access_record_of_a_call_record() -> None:
    stream = io.StringIO()
    writer = access_log.AccessLog(logging.StreamHandler(stream), "json")
    saved = access_log.ACCESS
    access_log.install(writer)
    try:
        exchange = Exchange("POST", "/v1/embeddings", b"rid-9", None)
        exchange.label = "embed"
        exchange.key = KEY
        exchange.state = _embedding_call()
        exchange.done(200)
        writer.flush()
    finally:
        access_log.install(saved)
    (line,) = stream.getvalue().splitlines()
    record = orjson.loads(line)
    assert (record["route"], record["iterations"], record["answered_by"]) == (
        "embed", 1, ["openai:text-embedding-3-small"])
    assert (record["prompt_tokens"], record["completion_tokens"], record["tool_calls"]) == (1_000, 0, 0)
