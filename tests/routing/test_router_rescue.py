"""The stream rescue in the failover walk (routing/router.py, routing/rescue.py), against real local upstreams."""

from __future__ import annotations

import time

import pytest

from gateway.canonical import StreamDelta, TextDelta
from gateway.config.model import TargetConfig
from gateway.routing.rescue import DEFAULT_STREAM_POLICY, NO_RESCUE, StreamPolicy
from gateway.routing.router import Answer, Attempt, Router, StreamInterrupted
from tests.fakes.upstream import Reply
from tests.routing.test_router import REQUEST, Upstreams, _fresh, classes, route, router_for, upstreams

__all__ = ["_fresh", "upstreams"]  # the fixtures, shared with test_router.py

FULL = "One two three four five six seven eight nine ten."


async def run(router: Router, names: tuple[str, ...], attempts: list[Attempt], *, retries: int = 0,
              policy: StreamPolicy = DEFAULT_STREAM_POLICY, first_token_s: float | None = None) -> tuple[str, Answer]:
    targets = router.resolve([TargetConfig(name, "m", first_token_timeout_s=first_token_s) for name in names])
    text: list[str] = []
    answer = None
    async for item in router.stream(targets, REQUEST, attempts, retries, time.monotonic() + 20, policy):
        if isinstance(item, Answer):
            answer = item
        else:
            batch: list[StreamDelta] = item
            text += [d.text for d in batch if isinstance(d, TextDelta)]
    assert answer is not None
    return "".join(text), answer


async def streamed_until_interrupted(router: Router, names: tuple[str, ...], attempts: list[Attempt],
                                     policy: StreamPolicy = DEFAULT_STREAM_POLICY) -> tuple[str, StreamInterrupted]:
    text: list[str] = []
    with pytest.raises(StreamInterrupted) as caught:
        async for item in router.stream(route(router, *names), REQUEST, attempts, 0, time.monotonic() + 20, policy):
            assert not isinstance(item, Answer)
            text += [d.text for d in item if isinstance(d, TextDelta)]
    return "".join(text), caught.value


async def test_a_cut_stream_is_continued_by_a_restart_on_the_same_target(upstreams: Upstreams) -> None:
    upstreams.a.queue(Reply(text=FULL, pieces=5, cut_after=2, fault="cut"), Reply(text=FULL, pieces=3))
    attempts: list[Attempt] = []
    async with router_for(upstreams) as router:
        text, answer = await run(router, ("a",), attempts, retries=1)
    assert text == FULL
    assert answer.response.message["content"] == FULL
    assert answer.rescued == {"after_chars": len(FULL[:20]), "how": "restart", "by": "a:m"}
    assert classes(attempts) == [("a:m", "connection"), ("a:m", None)]


async def test_no_target_left_ends_with_the_original_failure(upstreams: Upstreams) -> None:
    upstreams.a.queue(Reply(text=FULL, pieces=5, cut_after=2, fault="cut"))
    upstreams.b.queue(Reply(status=500))
    attempts: list[Attempt] = []
    async with router_for(upstreams) as router:
        text, interrupted = await streamed_until_interrupted(router, ("a", "b"), attempts)
    assert text == FULL[:20]
    assert interrupted.target == "a:m" and interrupted.error.error_class.value == "connection", \
        "the first failure is named, never the fallback's 500"
    assert classes(attempts) == [("a:m", "connection"), ("b:m", "server_error")]


async def test_rescue_off_is_todays_clean_error(upstreams: Upstreams) -> None:
    upstreams.a.queue(Reply(text=FULL, pieces=5, cut_after=2, fault="cut"))
    attempts: list[Attempt] = []
    async with router_for(upstreams) as router:
        text, interrupted = await streamed_until_interrupted(router, ("a", "b"), attempts, NO_RESCUE)
    assert text == FULL[:20] and interrupted.target == "a:m"
    assert not upstreams.b.requests


async def test_first_token_deadline_counts_content_not_bytes(upstreams: Upstreams) -> None:
    # ``drip`` answers its head at once, then a byte every 0.1 s: the read timeout (1 s) never fires.
    upstreams.b.queue(Reply(text="from b"))
    attempts: list[Attempt] = []
    async with router_for(upstreams) as router:
        text, answer = await run(router, ("drip", "b"), attempts, first_token_s=0.5)
    assert text == "from b"
    assert classes(attempts) == [("drip:m", "timeout"), ("b:m", None)]
    assert attempts[0]["elapsed_ms"] < 5_000, "the drip lasts 10 s: only the first-token deadline ends it early"
    assert answer.rescued is None


async def test_an_idle_stream_is_rescued_after_stream_idle_timeout(upstreams: Upstreams) -> None:
    upstreams.a.queue(Reply(text=FULL, pieces=5, cut_after=2, fault="stall"))
    upstreams.b.queue(Reply(text=FULL))
    attempts: list[Attempt] = []
    async with router_for(upstreams, timeout_s=20.0) as router:
        text, answer = await run(router, ("a", "b"), attempts, policy=StreamPolicy(idle_s=0.3))
    assert text == FULL
    assert classes(attempts) == [("a:m", "timeout"), ("b:m", None)]
    assert attempts[0]["elapsed_ms"] < 15_000, "the read timeout is 20 s: only the idle timeout ends it early"
    assert answer.rescued is not None and answer.rescued["how"] == "restart"


async def test_a_streams_idle_timeout_does_not_outlive_it_on_a_reused_connection(upstreams: Upstreams) -> None:
    upstreams.a.queue(Reply(text=FULL), Reply(text="slow but in time", delay_s=0.6))
    async with router_for(upstreams, timeout_s=3.0) as router:
        text, _ = await run(router, ("a",), [], policy=StreamPolicy(idle_s=0.3))
        assert text == FULL
        attempts: list[Attempt] = []
        # The same keep-alive connection: its read timeout is the provider's (3 s) again, not the stream's 0.3 s.
        answer = await router.complete(route(router, "a"), REQUEST, attempts, 0, time.monotonic() + 10)
    assert answer.response.message["content"] == "slow but in time"
    assert classes(attempts) == [("a:m", None)]
