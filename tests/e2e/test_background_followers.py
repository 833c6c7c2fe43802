"""Stream followers of background responses (``GET /v1/responses/{id}?stream=true``) are bounded.

Two real gateways share their own redis-server (never the suite's: its command counter is measured).
``a`` runs the responses and caps followers low (3 per run, 5 per process); ``b`` follows from the other
replica, where a follower polls the store. A follower is a request: it is admitted under its key's
limits and holds a concurrency slot until it leaves; the followers of one run in one process share one
store poll, so 50 idle followers cost Redis about what one does (each polled on its own before).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import KEY, Gateway, gateway_config
from tests.fakes.upstream import FakeUpstream, Reply
from tests.redis_servers import RedisProcess, start_or_skip, start_redis

ONE_SLOT_KEY = "follow-one-key"  # tenant team-a (KEY's), max_concurrent: 1
MODEL = "bg_idle"


@pytest.fixture(scope="module")
def own_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    manager = start_redis(tmp_path_factory.mktemp("followers-redis"))
    server = start_or_skip(manager.__enter__)
    try:
        yield server
    finally:
        manager.__exit__(None, None, None)


def _config(fakes: dict[str, FakeUpstream], url: str, background: str) -> str:
    text = gateway_config(fakes, store_url=url, extra_models=f"""
  {MODEL}:
    targets: [{{provider: primary, model: up-model}}]
    tools: [sleepy]
""")
    text = text.replace(f"    - {{key: {KEY}, tenant: team-a}}\n",
                        f"    - {{key: {KEY}, tenant: team-a}}\n"
                        f"    - {{key: {ONE_SLOT_KEY}, tenant: team-a, max_concurrent: 1}}\n", 1)
    return text + f"background: {{{background}}}\n"


@pytest.fixture(scope="module")
def pair(fakes: dict[str, FakeUpstream], own_redis: RedisProcess) -> Iterator[tuple[Gateway, Gateway]]:
    url = f"redis://{own_redis.address}/0"
    a = Gateway(_config(fakes, url, "max_followers_per_run: 3, max_followers: 5")).start()
    try:
        # b: the default poll_s (0.1 s); room for the 50 followers of the measurement
        b = Gateway(_config(fakes, url, "max_followers_per_run: 64, max_followers: 100")).start()
    except BaseException:
        a.stop()
        raise
    yield a, b
    a.stop()
    b.stop()


def _start_idle_run(gw: Gateway, fakes: dict[str, FakeUpstream]) -> str:
    """A background stream run (on ``gw``) that sits in a 25 s tool call; its creator leaves at once.

    Only the call asking for the tool is queued: the tests cancel the run long before it would ask again,
    and a second queued answer would be taken by the next run's first call.
    """
    fakes["primary"].queue(Reply(tool_calls=[("sleepy", {"ms": 25_000})]))
    with gw.client().responses.create(model=MODEL, input="idle", background=True, stream=True) as stream:
        first = next(iter(stream))
    return str(first.response.id)


class Follower:
    """One open ``?stream=true`` follower: its response head and first replayed bytes have arrived."""

    def __init__(self, stack: contextlib.AsyncExitStack, response: httpx.Response, first: bytes,
                 chunks: AsyncIterator[bytes]) -> None:
        self.stack = stack
        self.response = response
        self.first = first  # what arrived first (the start of the replay)
        self.chunks = chunks  # the rest of the stream

    async def close(self) -> None:
        await self.stack.aclose()


async def _follow(client: httpx.AsyncClient, url: str, run_id: str, key: str = KEY) -> Follower | httpx.Response:
    """An open follower, or the refusal (its body read)."""
    stack = contextlib.AsyncExitStack()
    response = await stack.enter_async_context(client.stream(
        "GET", f"{url}/v1/responses/{run_id}", params={"stream": "true"},
        headers={"authorization": f"Bearer {key}"}))
    if response.status_code != 200:
        await response.aread()
        await stack.aclose()
        return response
    chunks: AsyncIterator[bytes] = response.aiter_bytes()
    first = await anext(chunks)
    assert b"response.created" in first  # the stored events are replayed first
    return Follower(stack, response, first, chunks)


def _refused(result: Follower | httpx.Response, code: str | None = None) -> dict[str, Any]:
    assert isinstance(result, httpx.Response), "expected a refusal, the follower was let in"
    assert result.status_code == 429, result.text
    error = result.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    if code is not None:
        assert error["code"] == code
    return dict(error)


def _warnings(*gateways: Gateway) -> list[str]:
    return [line for gw in gateways for line in gw.logs().splitlines() if " WARNING " in line or " ERROR " in line]


def _commands(server: RedisProcess) -> int:
    with server.client() as c:
        return int(c.info("stats")["total_commands_processed"])


async def _rate(server: RedisProcess, window_s: float = 3.0) -> float:
    """Redis commands a second over a measurement window."""
    before, started = _commands(server), time.monotonic()
    await asyncio.sleep(window_s)  # a measurement window, not a wait for a condition
    return (_commands(server) - before) / (time.monotonic() - started)


def test_a_key_with_one_slot_cannot_open_forty_followers(pair: tuple[Gateway, Gateway],
                                                         fakes: dict[str, FakeUpstream]) -> None:
    a, b = pair
    run_id = _start_idle_run(a, fakes)

    async def scenario() -> None:
        async with httpx.AsyncClient(timeout=20, limits=httpx.Limits(max_connections=100)) as client:
            first = await _follow(client, b.url, run_id, ONE_SLOT_KEY)
            assert isinstance(first, Follower), first.text  # type: ignore[union-attr]
            others = await asyncio.gather(*[_follow(client, gw.url, run_id, ONE_SLOT_KEY)
                                            for gw in ([a, b] * 20)[:39]])
            for other in others:
                if isinstance(other, Follower):  # say whether a limiter failed open (a store slower than 1 s)
                    raise AssertionError(f"a second follower was let in; warnings: {_warnings(a, b)}")
                error = _refused(other, "rate_limit_exceeded")
                assert "concurrent" in error["message"]
            await first.close()
            # A follower that left gave its slot back: a new one gets in (bounded wait: the release is async).
            deadline = time.monotonic() + 10
            while True:
                again = await _follow(client, b.url, run_id, ONE_SLOT_KEY)
                if isinstance(again, Follower):
                    await again.close()
                    break
                assert time.monotonic() < deadline, "the disconnected follower never gave its slot back"
                await asyncio.sleep(0.05)

    try:
        asyncio.run(scenario())
    finally:
        a.client().responses.cancel(run_id)


def test_followers_are_capped_per_run_and_per_process(pair: tuple[Gateway, Gateway],
                                                      fakes: dict[str, FakeUpstream]) -> None:
    a, _ = pair
    first_run, second_run = _start_idle_run(a, fakes), _start_idle_run(a, fakes)

    async def scenario() -> None:
        async with httpx.AsyncClient(timeout=20) as client:
            opened: list[Follower] = []
            try:
                for _ in range(3):
                    follower = await _follow(client, a.url, first_run)
                    assert isinstance(follower, Follower)
                    opened.append(follower)
                error = _refused(await _follow(client, a.url, first_run), "too_many_followers")
                assert "background.max_followers_per_run" in error["message"]
                for _ in range(2):  # another run still has room, up to the process's 5
                    follower = await _follow(client, a.url, second_run)
                    assert isinstance(follower, Follower)
                    opened.append(follower)
                error = _refused(await _follow(client, a.url, second_run), "too_many_followers")
                assert "(background.max_followers)" in error["message"]
                # Leaving frees the place (bounded wait: the server sees the disconnect asynchronously).
                await opened.pop(0).close()
                deadline = time.monotonic() + 10
                while not isinstance(again := await _follow(client, a.url, first_run), Follower):
                    assert time.monotonic() < deadline, "a follower that left still counts"
                    await asyncio.sleep(0.05)
                opened.append(again)
            finally:
                for follower in opened:
                    await follower.close()

    try:
        asyncio.run(scenario())
    finally:
        for run_id in (first_run, second_run):
            a.client().responses.cancel(run_id)


def test_fifty_idle_followers_poll_the_store_about_as_much_as_one(pair: tuple[Gateway, Gateway],
                                                                  fakes: dict[str, FakeUpstream],
                                                                  own_redis: RedisProcess) -> None:
    a, b = pair
    run_id = _start_idle_run(a, fakes)
    rates: dict[int, float] = {}

    async def scenario() -> None:
        async with httpx.AsyncClient(timeout=20, limits=httpx.Limits(max_connections=100)) as client:
            opened: list[Follower] = []
            try:
                for count in (1, 50):
                    while len(opened) < count:
                        follower = await _follow(client, b.url, run_id)
                        assert isinstance(follower, Follower)
                        opened.append(follower)
                    rates[count] = await _rate(own_redis)
            finally:
                for follower in opened:
                    await follower.close()

    try:
        asyncio.run(scenario())
        final = a.client().responses.retrieve(run_id)
        assert final.status == "in_progress"  # idle the whole time: the followers were all there was
    finally:
        a.client().responses.cancel(run_id)
    # One follower on b polls every 0.1 s (about 20 commands a second with the replicas' own traffic);
    # 50 that each polled made about 50 times that.
    print("redis commands/s by followers:", rates)
    assert rates[50] < 3 * rates[1], rates


def test_cancelled_run_ends_every_follower(pair: tuple[Gateway, Gateway], fakes: dict[str, FakeUpstream]) -> None:
    a, b = pair
    run_id = _start_idle_run(a, fakes)

    async def scenario() -> list[bytes]:
        async with httpx.AsyncClient(timeout=20) as client:
            followers = [await _follow(client, gw.url, run_id) for gw in (a, b, b)]
            assert all(isinstance(f, Follower) for f in followers)
            await asyncio.to_thread(a.client().responses.cancel, run_id)
            tails = []
            for follower in followers:
                assert isinstance(follower, Follower)
                tails.append(follower.first + b"".join([chunk async for chunk in follower.chunks]))
                await follower.close()
            return tails

    streams = asyncio.run(scenario())  # every follower's stream ended (none waits for its read timeout)
    # Each had the whole stream, the same bytes, whether it followed the run's own replica or polled from another.
    assert streams[0] == streams[1] == streams[2]
    assert streams[0].startswith(b"event: response.created")
    assert a.client().responses.retrieve(run_id).status == "cancelled"


def test_openai_sdk_follows_to_the_end(pair: tuple[Gateway, Gateway], fakes: dict[str, FakeUpstream]) -> None:
    a, b = pair
    fakes["primary"].queue(Reply(tool_calls=[("sleepy", {"ms": 300})]), Reply(text="Followed to the end."))
    with a.client().responses.create(model=MODEL, input="short", background=True, stream=True) as stream:
        run_id = next(iter(stream)).response.id
    followed = [list(gw.client().responses.retrieve(run_id, stream=True)) for gw in (b, a)]
    for events in followed:
        assert [e.sequence_number for e in events] == list(range(len(events)))
        assert events[-1].type == "response.completed"
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert text == "Followed to the end."

