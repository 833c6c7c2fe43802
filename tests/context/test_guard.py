"""The context guard: none / compressed / pruned / skip, pairing kept after every rebuild."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from gateway.canonical import Message
from gateway.context import offload as offload_module
from gateway.context import tokens as tokens_module
from gateway.context.guard import ContextGuard, GuardOutcome, split_transcript
from gateway.context.summary import is_summary, summary_message
from gateway.context.tokens import COUNT_CACHE, TokenEstimator
from gateway.loop.pairing import pairing_problem
from tests.context.transcripts import SYSTEM, TOOLS, current_turn, exchange

LABEL = "openai:gpt-4o"
RESERVE = 256
SUMMARY = "The user asked about the weather in Paris twice; it was 21C and clear both times."


def size(messages: list[Message]) -> int:
    """What the guard compares with the limit (uncalibrated estimator): prompt estimate + reserve."""
    return TokenEstimator().count(messages, TOOLS, model="gpt-4o") + RESERVE


class Summarizer:
    """Records what it was asked to summarise; answers ``reply`` or raises ``error``."""

    def __init__(self, reply: str = SUMMARY, error: Exception | None = None) -> None:
        self.reply = reply
        self.error = error
        self.calls: list[list[Message]] = []

    async def __call__(self, old: list[Message]) -> str:
        self.calls.append(old)
        if self.error is not None:
            raise self.error
        return self.reply


async def never(old: list[Message]) -> str:
    raise AssertionError(f"the summariser must not be called (got {len(old)} messages)")


async def fit(transcript: list[Message], limit: int, summarize: Any = None,
              guard: ContextGuard | None = None) -> GuardOutcome:
    """Run the guard with ``threshold * window == limit`` and check what must hold after every rebuild."""
    outcome = await (guard or ContextGuard()).fit(transcript, TOOLS, window=limit, threshold=1.0,
                                                  reserve_output=RESERVE, target_label=LABEL, summarize=summarize)
    assert pairing_problem(outcome.transcript) is None
    if outcome.action != "skip":
        assert outcome.estimated_tokens <= outcome.limit
    return outcome


def same_objects(actual: list[Message], expected: list[Message]) -> bool:
    return len(actual) == len(expected) and all(a is e for a, e in zip(actual, expected, strict=True))


@pytest.fixture
def history() -> tuple[list[Message], list[Message], list[Message]]:
    """Two old exchanges with large tool results and a current turn of two tool rounds."""
    return exchange("a", 400), exchange("b", 400), current_turn("now", rounds=2, result_tokens=60)


async def test_no_action_under_the_threshold(history: Any) -> None:
    ex1, ex2, cur = history
    transcript = [SYSTEM, *ex1, *ex2, *cur]
    outcome = await fit(transcript, size(transcript), never)  # exactly at the limit still fits
    assert outcome.action == "none"
    assert outcome.transcript is transcript
    assert outcome.estimated_tokens == size(transcript)
    assert outcome.pruned_messages == 0 and outcome.summary is None
    # threshold * window is the limit: 0.8 of a window just too small for this transcript acts.
    acted = await ContextGuard().fit(transcript, TOOLS, window=int(size(transcript) / 0.8) - 5, threshold=0.8,
                                     reserve_output=RESERVE, target_label=LABEL, summarize=None)
    assert acted.action == "pruned"


async def test_compress_summarises_the_old_part_only(history: Any) -> None:
    ex1, ex2, cur = history
    transcript = [SYSTEM, *ex1, *ex2, *cur]
    before = copy.deepcopy(transcript)
    summarize = Summarizer()
    limit = size([SYSTEM, *cur]) + 100
    assert size(transcript) > limit
    outcome = await fit(transcript, limit, summarize)

    assert outcome.action == "compressed"
    assert len(summarize.calls) == 1
    assert summarize.calls[0] == [*ex1, *ex2]
    assert same_objects(summarize.calls[0], [*ex1, *ex2])
    rebuilt = outcome.transcript
    assert rebuilt[0] is SYSTEM
    assert rebuilt[1] == summary_message(SUMMARY) and is_summary(rebuilt[1])
    assert rebuilt[1]["role"] == "user"
    assert same_objects(rebuilt[2:], cur)
    assert outcome.summary == SUMMARY
    assert outcome.summarized_messages == len(ex1) + len(ex2)
    assert outcome.pruned_messages == 0
    assert outcome.estimated_tokens == size(rebuilt)
    # Artifacts of kept messages are untouched, and the input list was not modified.
    assert transcript == before
    kept_assistants = [m for m in rebuilt if m.get("tool_calls")]
    assert len(kept_assistants) == 2
    for message in kept_assistants:
        assert message["reasoning_content"] and message["thinking_blocks"][0]["signature"]
        assert all(call["extra_content"]["google"]["thought_signature"] for call in message["tool_calls"])


async def test_system_messages_are_never_summarised(history: Any) -> None:
    ex1, ex2, cur = history
    developer = {"role": "developer", "content": "From now on answer in French."}
    transcript = [SYSTEM, *ex1, developer, *ex2, *cur]
    summarize = Summarizer()
    outcome = await fit(transcript, size([SYSTEM, developer, *cur]) + 100, summarize)
    assert outcome.action == "compressed"
    assert summarize.calls == [[*ex1, *ex2]]
    assert same_objects([outcome.transcript[0], outcome.transcript[1]], [SYSTEM, developer])
    assert is_summary(outcome.transcript[2])
    assert same_objects(outcome.transcript[3:], cur)


@pytest.mark.parametrize("summarize", [
    Summarizer(error=RuntimeError("summariser route is down")),
    Summarizer(reply="   "),
    Summarizer(reply="a very long summary " * 2000),  # the rebuild would not fit
])
async def test_a_summariser_that_fails_falls_back_to_pruning(history: Any, summarize: Summarizer) -> None:
    ex1, ex2, cur = history
    transcript = [SYSTEM, *ex1, *ex2, *cur]
    outcome = await fit(transcript, size([SYSTEM, *ex2, *cur]), summarize)
    assert outcome.action == "pruned"
    assert same_objects(outcome.transcript, [SYSTEM, *ex2, *cur])  # the oldest exchange went first
    assert outcome.pruned_messages == len(ex1)
    assert outcome.summary is None and outcome.error


async def test_prune_drops_oldest_exchanges_first_and_stops_once_it_fits() -> None:
    ex1, ex2, ex3 = exchange("a", 300), exchange("b", 300), exchange("c", 300)
    cur = current_turn("now")
    transcript = [SYSTEM, *ex1, *ex2, *ex3, *cur]
    outcome = await fit(transcript, size([SYSTEM, *ex3, *cur]), None)
    assert outcome.action == "pruned"
    assert same_objects(outcome.transcript, [SYSTEM, *ex3, *cur])
    assert outcome.pruned_messages == len(ex1) + len(ex2)
    one = await fit(transcript, size([SYSTEM, *ex2, *ex3, *cur]), None)
    assert same_objects(one.transcript, [SYSTEM, *ex2, *ex3, *cur])


async def test_prune_never_orphans_a_call_or_a_result_at_any_limit() -> None:
    greeting = {"role": "assistant", "content": "Hello! Where are you travelling?"}
    developer = {"role": "developer", "content": "Prefer trains."}
    chat = [{"role": "user", "content": "Thanks!"}, {"role": "assistant", "content": "You are welcome."}]
    parallel = exchange("p", 120, cities=("Paris", "Lyon", "Nice"))
    two_rounds = [*exchange("r", 80)[:-1], *current_turn("r2", rounds=1, result_tokens=80)[1:],
                  {"role": "assistant", "content": "Done."}]
    cur = current_turn("now", rounds=3, result_tokens=40)
    transcript = [SYSTEM, greeting, *parallel, developer, *chat, *two_rounds, *exchange("q", 50), *cur]
    assert pairing_problem(transcript) is None
    droppable = [m for m in transcript[: len(transcript) - len(cur)] if m not in (SYSTEM, developer)]
    floor, full = size([SYSTEM, developer, *cur]), size(transcript)
    seen_sizes = set()
    for limit in range(floor, full, 37):
        outcome = await fit(transcript, limit, None)
        assert outcome.action == "pruned"
        kept = outcome.transcript
        assert kept[0] is SYSTEM and any(m is developer for m in kept)
        assert same_objects(kept[len(kept) - len(cur):], cur)
        dropped = [m for m in droppable if not any(m is k for k in kept)]
        assert same_objects(dropped, droppable[: len(dropped)])  # oldest first, nothing skipped over
        # What is left of the old part starts at an exchange boundary (a user message).
        remaining_old = [m for m in kept[: len(kept) - len(cur)] if m not in (SYSTEM, developer)]
        assert not remaining_old or remaining_old[0]["role"] == "user" or remaining_old[0] is greeting
        seen_sizes.add(outcome.pruned_messages)
    assert len(seen_sizes) >= 5


async def test_skip_when_even_the_current_turn_does_not_fit() -> None:
    ex1 = exchange("a", 100)
    cur = current_turn("now", rounds=3, result_tokens=500)
    transcript = [SYSTEM, *ex1, *cur]
    outcome = await fit(transcript, size([SYSTEM, *cur]) - 1, never)  # the summariser is not even tried
    assert outcome.action == "skip"
    assert same_objects(outcome.transcript, [SYSTEM, *cur])
    assert outcome.pruned_messages == len(ex1)
    assert outcome.estimated_tokens > outcome.limit


async def test_a_previous_summary_is_kept_and_not_summarised_again(history: Any) -> None:
    _, ex2, cur = history
    old_summary = summary_message("Earlier: the user lives in Berlin and prefers trains.")
    transcript = [SYSTEM, old_summary, *ex2, *cur]
    summarize = Summarizer(reply="They asked about Paris.")
    outcome = await fit(transcript, size([SYSTEM, old_summary, *cur]) + 60, summarize)
    assert outcome.action == "compressed"
    assert summarize.calls == [ex2]  # only what came after the old summary
    assert outcome.transcript[0] is SYSTEM and outcome.transcript[1] is old_summary
    assert outcome.transcript[2] == summary_message("They asked about Paris.")
    assert same_objects(outcome.transcript[3:], cur)

    # The loop goes on (or is resumed from the store): more rounds in the same turn. Nothing old is
    # left to summarise, so the summariser is not called; summaries are dropped, oldest first.
    grown = [*outcome.transcript, *current_turn("more", rounds=2, result_tokens=60)[1:]]
    assert split_transcript(grown).exchanges == []
    again = await fit(grown, size([SYSTEM, outcome.transcript[2], *grown[3:]]), never)
    assert again.action == "pruned"
    assert same_objects(again.transcript, [SYSTEM, outcome.transcript[2], *grown[3:]])
    assert again.pruned_messages == 1


async def test_calibration_makes_the_guard_act_earlier(history: Any) -> None:
    ex1, ex2, cur = history
    transcript = [SYSTEM, *ex1, *ex2, *cur]
    guard = ContextGuard()
    limit = size(transcript) + 10
    assert (await fit(transcript, limit, None, guard)).action == "none"
    raw = size(transcript) - RESERVE
    guard.estimator.observe(LABEL, raw, raw * 2)  # this target counts twice what we estimate
    outcome = await fit(transcript, limit, None, guard)
    assert outcome.action in ("pruned", "skip")
    assert outcome.estimated_tokens == guard.estimator.calibrated(LABEL, outcome.raw_tokens) + RESERVE


async def test_no_user_message_means_nothing_is_old() -> None:
    transcript = [SYSTEM, {"role": "assistant", "content": "x " * 400}]
    outcome = await fit(transcript, size([SYSTEM]) + 10, never)
    assert outcome.action == "skip"
    assert same_objects(outcome.transcript, transcript)


async def test_a_large_cold_transcript_is_encoded_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    transcript = [SYSTEM, *exchange("cold-a", 4000), *exchange("cold-b", 4000), *current_turn("cold")]
    COUNT_CACHE.clear()
    offloaded: list[str] = []
    real = asyncio.to_thread

    async def spy(func: Any, *args: Any) -> Any:
        offloaded.append(getattr(func, "__name__", "?"))
        return await real(func, *args)

    monkeypatch.setattr(offload_module.asyncio, "to_thread", spy)
    outcome = await fit(transcript, 10_000_000, never)
    assert offloaded == ["encode"]
    assert outcome.raw_tokens == size(transcript) - RESERVE
    offloaded.clear()
    await fit(transcript, 10_000_000, never)  # warm: all hits, nothing to offload
    assert offloaded == []


async def test_twenty_iterations_encode_each_message_once(monkeypatch: pytest.MonkeyPatch) -> None:
    encoded: list[Message] = []
    real = tokens_module._message_tokens

    def counting(message: Message, encoding: Any) -> int:
        encoded.append(message)
        return real(message, encoding)

    monkeypatch.setattr(tokens_module, "_message_tokens", counting)
    COUNT_CACHE.clear()
    guard = ContextGuard()
    transcript = [SYSTEM, *exchange("w", 200), *current_turn("loop", rounds=0)]
    for iteration in range(20):
        transcript.extend(current_turn(f"loop{iteration}", rounds=1, result_tokens=300)[1:])
        assert (await fit(transcript, 10_000_000, never, guard)).action == "none"
    assert len(encoded) == len(transcript)  # 20 checks of a growing transcript: each message encoded once
    assert same_objects(encoded, transcript)
