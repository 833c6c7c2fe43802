"""Script calls made in the same event-loop turn go to Redis as one pipeline.

Every store round trip costs the gateway about as much CPU in redis-py and the socket calls as
the rest of a plain request (bench/README.md). Under load many requests reach the same call in
the same loop turn (the rate-limit take of new requests, the settle of finished ones): queued
here, they share one pipeline and one round trip. Nothing waits for company: the first call of a
turn schedules the send for the next turn, so a lone call goes out at once, as a plain EVALSHA.

Semantics are those of separate calls: each script runs atomically, in call order, and each
caller gets its own reply (or the batch's error, e.g. ``StoreUnavailable``). On one server and behind
Sentinel the batch goes through ``RedisIO``'s lean command path. On a Cluster nothing is batched:
redis-py's cluster client follows slot moves per command, and a pipeline across a failover would need
its own retry rules.
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.exceptions import NoScriptError

from gateway.store.redis_client.client import RedisIO, Script, evalsha

_Item = tuple[Script, list[str], list[Any], "asyncio.Future[Any]"]


class ScriptBatcher:
    """The script calls of one loop turn, sent as one pipeline through ``io`` (errors guarded as ``op``)."""

    def __init__(self, io: RedisIO, op: str, fail_open: bool = False) -> None:
        self._io = io
        self._op = op
        #: the callers go ahead without the store (rate limits): each send waits ``store.fail_open_ms`` at most
        self._fail_open = fail_open
        self._pending: list[_Item] | None = None  # the calls of this loop turn, until sent
        self._tasks: set[asyncio.Task[None]] = set()

    async def call(self, script: Script, keys: list[str], args: list[Any]) -> Any:
        """``script(keys, args)``'s reply, sent together with the other calls of this loop turn."""
        if self._io.cluster:  # the cluster client follows slot moves itself: one call each
            async with self._io.guard(self._op, fail_open=self._fail_open):
                return await script(keys=keys, args=args)
        # Shielded: a caller that goes away must not cancel the send the others wait for.
        return await asyncio.shield(self.queue(script, keys, args))

    def queue(self, script: Script, keys: list[str], args: list[Any]) -> asyncio.Future[Any]:
        """Add a call to this loop turn's batch, after those already in it (it runs before the calls
        queued next); its reply or error arrives in the future. Not on a Cluster (``call`` only)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        batch = self._pending
        if batch is None:
            batch = self._pending = []
            task = loop.create_task(self._send(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        batch.append((script, keys, args, future))
        return future

    async def _send(self, batch: list[_Item]) -> None:
        self._pending = None  # calls from now on make the next batch
        try:
            async with self._io.guard(self._op, fail_open=self._fail_open):
                replies = await self._execute(batch)
        except BaseException as exc:
            for *_, future in batch:
                if future.done():
                    continue
                if isinstance(exc, Exception):
                    future.set_exception(exc)
                    future.exception()  # retrieved: the caller may have gone away
                else:
                    future.cancel()
            if not isinstance(exc, Exception):
                raise
            return
        for (*_, future), reply in zip(batch, replies, strict=True):
            if not future.done():
                future.set_result(reply)

    async def _execute(self, batch: list[_Item]) -> list[Any]:
        io = self._io
        if len(batch) == 1:
            script, keys, args, _ = batch[0]
            return [(await io.script(script, keys, args, False))[0]]  # loaded on NOSCRIPT
        if io.lean is not None:
            replies = await io.lean.pipeline([("EVALSHA", s.sha, len(k), *k, *a) for s, k, a, _ in batch])
            return await self._checked(batch, replies)
        client = io.client
        async with client.pipeline(transaction=False) as pipe:
            for script, keys, args, _ in batch:
                evalsha(pipe, script, keys, args)
            replies = list(await pipe.execute(raise_on_error=False))
        return await self._checked(batch, replies)

    async def _checked(self, batch: list[_Item], replies: list[Any]) -> list[Any]:
        """``replies`` with every NOSCRIPT one run again: a script the server lacks (a restart, a failover) did
        not run, the others did, so only those go again (``io.script`` loads it), and nothing runs twice."""
        for i, reply in enumerate(replies):
            if isinstance(reply, NoScriptError):
                script, keys, args, _ = batch[i]
                replies[i] = (await self._io.script(script, keys, args, False))[0]
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply  # a script error is a bug: every caller of the batch hears of it
        return replies
