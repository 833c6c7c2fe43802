"""Background tasks stop on the first cancellation, even when a library call swallowed it (issue 29).

redis-py's asyncio client can catch a ``CancelledError`` that lands while a command's connection is
released and return normally; the webhook worker's loop then went round again, and the process
never exited. The outbox below does exactly that, so the test does not depend on when a real
Redis call happens to be cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from gateway.cancellation import check_cancelled, stop_tasks
from gateway.config.model import NotificationsConfig, WebhookConfig
from gateway.notify import Notifier
from gateway.store.memory import MemoryStore
from gateway.store.outbox.base import Claimed
from gateway.store.outbox.memory import MemoryOutbox


class SwallowingOutbox(MemoryOutbox):
    """A claim that takes a while and swallows a cancellation that lands meanwhile, as the library does."""

    def __init__(self) -> None:
        super().__init__()
        self.claiming = asyncio.Event()
        self.claims = 0

    async def claim(self, lease_ms: int, limit: int) -> list[Claimed]:
        self.claims += 1
        self.claiming.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0.05)
        return []


@pytest.mark.slow
async def test_the_webhook_worker_stops_though_its_claim_swallowed_the_cancellation() -> None:
    store = MemoryStore()
    outbox = SwallowingOutbox()
    store.outbox = lambda name: outbox  # type: ignore[method-assign]
    notifier = Notifier(NotificationsConfig(webhooks=(WebhookConfig(url="http://127.0.0.1:9/h", secret="s"),)),
                        None, store, proxies={})
    await notifier.start()
    await outbox.claiming.wait()
    stopping = asyncio.ensure_future(notifier.stop())
    done, _ = await asyncio.wait([stopping], timeout=10)
    assert stopping in done, "stop() waited for a worker that never ends"
    claims = outbox.claims
    await asyncio.sleep(0.2)
    assert outbox.claims == claims  # nothing claims from the shared outbox any more


async def test_check_cancelled_sees_a_swallowed_request() -> None:
    turns = 0

    async def loop() -> None:
        nonlocal turns
        while True:
            check_cancelled()
            turns += 1
            with contextlib.suppress(asyncio.CancelledError):  # a library swallowing it
                await asyncio.sleep(0.01)

    task = asyncio.ensure_future(loop())
    await asyncio.sleep(0.02)
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=5)
    assert task in done and task.cancelled()


async def test_stop_tasks_is_bounded_and_does_not_swallow_its_callers_cancellation(
        caplog: pytest.LogCaptureFixture) -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await release.wait()

    task = asyncio.ensure_future(stubborn())
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING):
        await stop_tasks([task], "test", grace_s=0.1)  # returns although the task would not stop
    assert "did not stop within 0.1s" in caplog.text

    async def stopper() -> None:
        await stop_tasks([task], "test", grace_s=30)

    outer = asyncio.ensure_future(stopper())
    await asyncio.sleep(0.05)
    outer.cancel()
    done, _ = await asyncio.wait([outer], timeout=5)
    assert outer in done and outer.cancelled()
    release.set()
    await asyncio.wait([task], timeout=5)
