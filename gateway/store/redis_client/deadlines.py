"""One timer for every store operation's deadline of the same length.

Every store operation runs under a deadline (``RedisIO.guard``). ``asyncio.timeout`` arms and cancels an
event-loop timer for each: ~32k instructions of a ~60k round trip on the lean command path
(bench/README.md, "A lean command path"). The deadlines of one length (``store.timeout_ms``, ``fail_open_ms``,
the durable one) are set in the order they end, so a queue per length and one timer for the queue's head do
the same work: an operation appends an entry and marks it done; the timer, once it fires, skips what is done,
cancels the task of what is due, and re-arms for the next entry still running (at most one firing per length of
time under steady load, instead of one timer per operation).

Cancellation follows ``asyncio.timeout`` (Python 3.11): the task is cancelled, and the guard that cancelled it
turns the ``CancelledError`` into a timeout only when no one else asked for a cancellation meanwhile
(``Task.cancelling``/``uncancel``), so an outer cancellation (a client gone) still propagates as one.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

#: an entry's state: running, done (its operation left the guard) or expired (its task was cancelled)
RUNNING, DONE, EXPIRED = 0, 1, 2
#: a timer may fire up to the loop's clock resolution early: entries due within this are due
_SLACK_S = 0.001


class DeadlineQueue:
    """The deadlines of one length on one event loop; entries are ``[when, task, state]``."""

    __slots__ = ("_handle", "_queue", "length", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop | None, length: float) -> None:
        self.loop = loop
        self.length = length
        self._queue: deque[list[Any]] = deque()
        self._handle: asyncio.TimerHandle | None = None

    def start(self, task: asyncio.Task[Any]) -> list[Any]:
        """A deadline ``length`` seconds from now for ``task``; its entry (set its state to DONE when it ends)."""
        loop = task.get_loop()
        if loop is not self.loop:  # another event loop (tests run one per test): start afresh there
            self.loop, self._queue, self._handle = loop, deque(), None
        when = loop.time() + self.length
        entry = [when, task, RUNNING]
        self._queue.append(entry)
        if self._handle is None:
            self._handle = loop.call_at(when, self._fire)
        return entry

    def _fire(self) -> None:
        self._handle = None
        loop = self.loop
        assert loop is not None, "armed by start"
        due = loop.time() + _SLACK_S
        queue = self._queue
        while queue:
            entry = queue[0]
            if entry[2] != RUNNING:
                queue.popleft()
            elif entry[0] <= due:
                queue.popleft()
                entry[2] = EXPIRED
                entry[1].cancel()
            else:
                self._handle = loop.call_at(entry[0], self._fire)
                return

    def __len__(self) -> int:
        return len(self._queue)


class Deadlines:
    """The queues of one ``RedisIO``, by length (each follows the event loop of the tasks it is given)."""

    __slots__ = ("_queues",)

    def __init__(self) -> None:
        self._queues: dict[float, DeadlineQueue] = {}

    def queue(self, length: float) -> DeadlineQueue:
        found = self._queues.get(length)
        if found is None:
            found = self._queues[length] = DeadlineQueue(None, length)
        return found
