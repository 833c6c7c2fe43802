"""Background tasks stop on the first cancellation, even when a library swallowed it.

A forever-loop (webhook delivery, outbox claiming, key sync, lease keeping, metric publishing,
MCP refresh) is stopped by cancelling its task. If the ``CancelledError`` lands inside a library
call that catches it and returns normally (redis-py's asyncio client does, for a command cut
short while its connection is released), the loop goes round again and the process never exits:
``loopgate serve`` that cannot bind hung with its webhook worker still claiming jobs from the
shared outbox. The request is not lost, though: ``Task.cancelling()`` stays above zero until
someone calls ``uncancel()``. So every loop calls :func:`check_cancelled` on each turn, and every
stop goes through :func:`stop_tasks`, which never waits longer than a bound and never swallows a
cancellation of its own caller.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

log = logging.getLogger("loopgate")

#: The ``BaseException``s that end a task or the process rather than fail the work: a holder gives
#: back what it holds and lets them through. Any other ``BaseException`` (a Rust panic from a native
#: library is a ``pyo3_runtime.PanicException``) is a failure like an ``Exception``: answered, not passed on.
EXITS: tuple[type[BaseException], ...] = (asyncio.CancelledError, KeyboardInterrupt, SystemExit, GeneratorExit)

#: How long a stop waits for its tasks to end before giving up on them (logged): shutdown never hangs.
STOP_GRACE_S = 5.0


def check_cancelled() -> None:
    """Raise ``CancelledError`` when the current task was asked to stop, swallowed on the way or not."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def stop_tasks(tasks: Iterable[asyncio.Future[Any] | None], what: str,
                     grace_s: float = STOP_GRACE_S) -> None:
    """Cancel ``tasks`` and wait (at most ``grace_s``) for them to end; their errors are theirs, not the stop's.

    A task still running after the grace period is cancelled once more and left behind with a
    warning, so one misbehaving task cannot hold up the process's exit. A cancellation of the
    caller itself propagates (``asyncio.wait`` does not swallow it).
    """
    pending = [task for task in tasks if task is not None and not task.done()]
    for task in pending:
        task.cancel()
    if not pending:
        return
    done, stuck = await asyncio.wait(pending, timeout=grace_s)
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            log.debug("%s: a task ended with %r while stopping", what, task.exception())
    for task in stuck:
        task.cancel()
        log.warning("%s: a task did not stop within %gs of its cancellation; leaving it behind", what, grace_s)
