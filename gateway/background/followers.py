"""Stream followers of background runs: one store poll per run per process, fanned out to its followers.

``GET /v1/responses/{id}?stream=true`` follows a run until it ends. Each follower polling the
store on its own made 200 idle followers cost Redis 7,000 commands a second; here the followers
of one run in one process share a *channel*: one task reads the run record every
``background.poll_s`` (or when this process's runner writes, for a run it owns) and, only when
new events were stored, reads them once and hands the same frames to every follower.

A follower first replays the stored events after its own position from the store (its
``starting_after``), then takes the channel's chunks, skipping what it already sent. Its buffer
is bounded (``FOLLOWER_BUFFER_BYTES``): a follower that falls behind drops what it buffered and
reads the gap from the store at its own pace when it catches up, so a slow reader never makes
the process buffer without bound, and never loses an event either.

How many followers there are is capped per run and per process (``background.max_followers_per_run``,
``background.max_followers``); past either, a new one is refused with a 429. The stream a run's
own ``POST`` answers with shares the channel but is not counted (it is bounded by the runs).
Everything a follower takes is given back by ``Following.aclose`` (the SSE response calls it,
however the stream ends, even when it never started).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from gateway.cancellation import check_cancelled
from gateway.config.model import BackgroundConfig
from gateway.errors import GatewayError
from gateway.store.background.base import BackgroundRun, BackgroundStore, RunNotFound

#: stored events read per store round trip (replay, gap, new events)
REPLAY_BATCH = 256
#: frames a follower may have waiting beyond the newest chunk; past it it reads the gap from the store
FOLLOWER_BUFFER_BYTES = 256 * 1024

#: the run as a reader sees it (``settle``: a run whose lease ran out is ended first)
ReadRun = Callable[[str, str], Awaitable[BackgroundRun]]


class Waker(Protocol):
    """The runner's side: this process's writes wake the channel of a run it owns."""

    def follower_event(self, run_id: str) -> asyncio.Event: ...

    def drop_follower_event(self, run_id: str, event: asyncio.Event) -> None: ...

    def is_local(self, run_id: str) -> bool: ...


@dataclass(slots=True)
class _Chunk:
    first_seq: int
    frames: list[bytes]
    size: int


@dataclass(eq=False, slots=True)
class _Follower:
    channel: _Channel
    counted: bool
    chunks: deque[_Chunk] = field(default_factory=deque)
    size: int = 0
    signal: asyncio.Event = field(default_factory=asyncio.Event)

    def push(self, chunk: _Chunk) -> None:
        if self.chunks and self.size + chunk.size > FOLLOWER_BUFFER_BYTES:
            self.chunks.clear()  # fallen behind: the gap is read from the store when it catches up
            self.size = 0
        self.chunks.append(chunk)
        self.size += chunk.size
        self.signal.set()

    async def next(self) -> _Chunk | None:
        """The next chunk; None once the channel ended and every chunk was taken."""
        while not self.chunks:
            channel = self.channel
            if channel.error is not None:
                raise channel.error
            if channel.ended:
                return None
            self.signal.clear()
            await self.signal.wait()
        chunk = self.chunks.popleft()
        self.size -= chunk.size
        return chunk


@dataclass(eq=False, slots=True)
class _Channel:
    tenant: str
    run_id: str
    followers: set[_Follower] = field(default_factory=set)
    counted: int = 0
    task: asyncio.Task[None] | None = None
    ended: bool = False
    error: BaseException | None = None
    #: the last sequence number the poll loop has read (None before its first read)
    last_seq: int | None = None

    def close(self, error: BaseException | None = None) -> None:
        self.ended = True
        self.error = error
        for follower in self.followers:
            follower.signal.set()


class FollowerHub:
    """This process's channels by run, and the follower caps."""

    def __init__(self, store: BackgroundStore, config: BackgroundConfig, waker: Waker) -> None:
        self.store = store
        self.config = config
        self._waker = waker
        self._channels: dict[tuple[str, str], _Channel] = {}
        self._counted = 0

    @property
    def followers(self) -> int:
        """Counted followers in this process (the run's own streams are not)."""
        return self._counted

    def follow(self, tenant: str, run_id: str, after: int, read: ReadRun, counted: bool = True) -> Following:
        """A follower of ``run_id`` from sequence number ``after`` on (429 past a cap), to close with ``aclose``."""
        config = self.config
        channel = self._channels.get((tenant, run_id))
        if counted:
            if self._counted >= config.max_followers:
                raise _refused(f"this gateway process has {config.max_followers} stream followers already "
                               "(background.max_followers)")
            if channel is not None and channel.counted >= config.max_followers_per_run:
                raise _refused(f"this response has {config.max_followers_per_run} stream followers on this gateway "
                               "process already (background.max_followers_per_run)")
        if channel is None or channel.ended:
            channel = self._channels[(tenant, run_id)] = _Channel(tenant, run_id)
            channel.task = asyncio.create_task(self._poll(channel, read), name=f"background followers {run_id}")
        follower = _Follower(channel, counted)
        channel.followers.add(follower)
        if counted:
            channel.counted += 1
            self._counted += 1
        return Following(self, follower, self._frames(follower, after, read))

    def _leave(self, follower: _Follower) -> None:
        channel = follower.channel
        if follower not in channel.followers:
            return
        channel.followers.discard(follower)
        if follower.counted:
            channel.counted -= 1
            self._counted -= 1
        if not channel.followers:
            if self._channels.get((channel.tenant, channel.run_id)) is channel:
                del self._channels[(channel.tenant, channel.run_id)]
            if channel.task is not None:
                channel.task.cancel()

    async def aclose(self) -> None:
        """Stop every channel (at shutdown); their followers end."""
        tasks = [c.task for c in self._channels.values() if c.task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- the channel's poll loop ---------------------------------------------------------------
    async def _poll(self, channel: _Channel, read: ReadRun) -> None:
        waker, run_id, tenant = self._waker, channel.run_id, channel.tenant
        after: int | None = None
        wake: asyncio.Event | None = None
        try:
            while True:
                check_cancelled()  # a store call may have swallowed the cancellation (gateway/cancellation.py)
                wake = waker.follower_event(run_id)
                # The run first, then its events: a run read as ended has stored every event already.
                run = await read(run_id, tenant)
                if after is None:
                    after = run.next_seq - 1  # followers replay what came before on their own
                    channel.last_seq = after
                while run.next_seq - 1 > after or not run.active:
                    batch = await self.store.events(run_id, tenant, after, REPLAY_BATCH)
                    if batch:
                        first = max(after, run.first_seq - 1) + 1
                        after = channel.last_seq = first + len(batch) - 1
                        chunk = _Chunk(first, batch, sum(len(frame) for frame in batch))
                        for follower in channel.followers:
                            follower.push(chunk)
                    if len(batch) < REPLAY_BATCH:
                        break
                if not run.active:
                    channel.close()
                    return
                # Woken at once by a write of this process; a run on another replica is polled.
                poll_s = self.config.poll_s
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(poll_s, 1.0) if waker.is_local(run_id) else poll_s):
                        await wake.wait()
        except RunNotFound:
            channel.close()  # deleted (or expired) while followed
        except asyncio.CancelledError:
            channel.close()
            raise
        except Exception as exc:  # the store failed: every follower's stream ends with it
            channel.close(exc)
        finally:
            if wake is not None:
                waker.drop_follower_event(run_id, wake)
            if self._channels.get((tenant, run_id)) is channel:
                del self._channels[(tenant, run_id)]

    # -- one follower ----------------------------------------------------------------------------
    async def _replay(self, run_id: str, tenant: str, after: int, until: int | None) -> AsyncIterator[list[bytes]]:
        """Stored events after sequence number ``after`` (up to ``until``; None: to the end), batch by batch."""
        while until is None or after < until:
            limit = REPLAY_BATCH if until is None else min(REPLAY_BATCH, until - after)
            batch = await self.store.events(run_id, tenant, after, limit)
            if not batch:
                return
            yield batch
            after += len(batch)
            if len(batch) < limit:
                return

    async def _frames(self, follower: _Follower, after: int, read: ReadRun) -> AsyncIterator[bytes]:
        channel = follower.channel
        run_id, tenant = channel.run_id, channel.tenant
        try:  # the run first, then its events: a run read as ended has stored every event already
            run = await read(run_id, tenant)
            after = max(after, run.first_seq - 1)
            async for batch in self._replay(run_id, tenant, after, None):
                after += len(batch)
                yield b"".join(batch)
            if not run.active:
                return
            while (chunk := await follower.next()) is not None:
                if chunk.first_seq > after + 1:  # fell behind, or joined while these were read: from the store
                    async for batch in self._replay(run_id, tenant, after, chunk.first_seq - 1):
                        yield b"".join(batch)
                    after = chunk.first_seq - 1
                skip = after + 1 - chunk.first_seq
                if skip < len(chunk.frames):
                    yield b"".join(chunk.frames[max(skip, 0):])
                    after = chunk.first_seq + len(chunk.frames) - 1
            # The channel ended: what it read before this follower was caught up is in the store.
            if channel.last_seq is not None and channel.last_seq > after:
                async for batch in self._replay(run_id, tenant, after, channel.last_seq):
                    yield b"".join(batch)
        except RunNotFound:
            return  # deleted (or expired) while followed


def _refused(message: str) -> GatewayError:
    return GatewayError(429, message + "; retry when one ends", "rate_limit_error", code="too_many_followers",
                        headers={"retry-after": "1"})


class Following:
    """A follower's frames; ``aclose`` leaves the channel (and gives back ``on_close``), started or not."""

    __slots__ = ("_follower", "_frames", "_hub", "on_close")

    def __init__(self, hub: FollowerHub, follower: _Follower, frames: AsyncIterator[bytes]) -> None:
        self._hub = hub
        self._follower = follower
        self._frames = frames
        #: what else the follower holds (its admission), given back after it leaves
        self.on_close: Callable[[], Awaitable[None]] | None = None

    def __aiter__(self) -> Following:
        return self

    async def __anext__(self) -> bytes:
        return await anext(self._frames)

    async def aclose(self) -> None:
        try:
            aclose = getattr(self._frames, "aclose", None)
            if aclose is not None:
                await aclose()
        finally:
            self._hub._leave(self._follower)
            on_close, self.on_close = self.on_close, None
            if on_close is not None:
                await on_close()
