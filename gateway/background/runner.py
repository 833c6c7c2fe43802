"""Running background responses: a task owned by this process, not by the request that started it.

The request that creates a background response returns at once; the Responses event stream of
its loop is driven here by an ``asyncio`` task. Two tasks per run:

- the *driver* pulls the events, keeps the latest response snapshot (with every output item
  finished so far, so a poll shows a long loop's progress), and queues the events as SSE frames
  (only for runs created with ``stream: true``);
- the *writer* is the run's only store writer: it appends what was queued (batching whatever
  accumulated during the previous round trip) and the snapshot when it changed, and when idle
  renews the lease every ``heartbeat_s``. Every store reply carries the cancel flag, so a cancel issued on any replica
  reaches this one within a heartbeat; the driver is then cancelled, which unwinds the engine's
  generator (running tools are cancelled, the upstream connection is released).

The driver ends the run with ``finish`` (completed, incomplete, failed or cancelled). When the
store says the run is no longer ours (``RunLost``: a reader found the lease expired and marked it
failed), the run stops without writing. Stream followers of the same process are woken on every
write instead of polling the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.cancellation import EXITS, check_cancelled
from gateway.config.model import BackgroundConfig
from gateway.errors import GatewayError
from gateway.http.sse_response import event_frame
from gateway.store.background.base import BackgroundRun, BackgroundStore, EventsLimit, RunLost
from gateway.store.errors import StoreUnavailable

log = logging.getLogger("loopgate.background")
# Events per store write at most (a Lua call's argument count is bounded); the rest go in the next one.
MAX_BATCH = 512
# Events whose item goes into the polled snapshot (added: in progress; done: finished).
_ITEM_EVENTS = frozenset({"response.output_item.added", "response.output_item.done"})
# How a run ends; its stream's last event is ``response.<status>`` (stored by ``finish``, past the caps).
_TERMINAL_STATUSES = ("completed", "incomplete", "failed")
_TERMINAL_EVENTS = frozenset("response." + status for status in _TERMINAL_STATUSES)
SHUTDOWN = "the gateway replica running this background response shut down before it ended"
FAILED = "the gateway failed while running this response"
# How long the end of a run may take to store (the last events and the final snapshot).
FINISH_TIMEOUT_S = 10.0


def sse_frame(event: dict[str, Any]) -> bytes:
    """One Responses stream event as an SSE frame (``event:`` line + ``data:`` line), as OpenAI sends it."""
    return event_frame(str(event.get("type", "")), orjson.dumps(event))


def failed_snapshot(response: dict[str, Any], code: str, message: str) -> dict[str, Any]:
    return {**response, "status": "failed", "error": {"code": code, "message": message}}


@dataclass(slots=True)
class _Run:
    run: BackgroundRun
    driver: asyncio.Task[None] | None = None
    frames: list[bytes] = field(default_factory=list)
    next_seq: int | None = None  # the sequence number of frames[0]
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    done: bool = False
    cancel_requested: bool = False
    lost: bool = False
    limit: str | None = None  # why the events cap ended the run
    failure: str | None = None  # why storing the run's progress failed (not an outage: those are retried)
    snapshot: dict[str, Any] | None = None  # a newer in-progress snapshot the writer has not stored yet
    # A task cancelled before its first step never runs a line (no finally): the driver is only
    # cancelled once started; until then it checks the flags itself when it starts.
    started: bool = False


class BackgroundRunner:
    """Starts, drives, cancels and wakes the followers of this process's background runs."""

    def __init__(self, store: BackgroundStore, config: BackgroundConfig, ttl_s: int) -> None:
        self.store = store
        self.config = config
        self.ttl_s = ttl_s
        #: fences this process's writes: a run whose record names another owner is not ours
        self.owner = "gw_" + secrets.token_hex(8)
        self._runs: dict[str, _Run] = {}
        self._followers: dict[str, asyncio.Event] = {}
        self._starting = 0  # runs between their capacity check and their registration (awaits in between)
        self._closing = False

    @property
    def running(self) -> int:
        return len(self._runs)

    def lease_until(self) -> float:
        return time.time() + self.config.lease_s

    def check_capacity(self) -> None:
        if self._closing or len(self._runs) + self._starting >= self.config.max_concurrent:
            raise GatewayError(429, f"this gateway runs {self.config.max_concurrent} background responses at once "
                               "already (background.max_concurrent); retry later", "rate_limit_error",
                               code="too_many_background_responses", headers={"retry-after": "1"})

    async def launch(self, tenant: str, events: AsyncIterator[dict[str, Any]], stream: bool) -> BackgroundRun:
        """Start a run; returns once it is stored (any replica can poll it), with the first snapshot.

        ``events`` is the Responses event stream of the request; its first event must carry the
        response object (``response.created``). An error before that event is raised here (the
        request gets it as its HTTP error) and nothing is stored.
        """
        self.check_capacity()
        self._starting += 1  # the slot is held from here: concurrent launches cannot overshoot the cap
        try:
            return await self._launch(tenant, events, stream)
        finally:
            self._starting -= 1

    async def _launch(self, tenant: str, events: AsyncIterator[dict[str, Any]], stream: bool) -> BackgroundRun:
        first = await anext(events, None)
        response = first.get("response") if isinstance(first, dict) else None
        if first is None or not isinstance(response, dict) or not isinstance(response.get("id"), str):
            await close_events(events)
            raise RuntimeError("a Responses event stream must start with an event carrying the response")
        response = {**response, "background": True, "status": "in_progress"}
        now = time.time()
        run = BackgroundRun(id=response["id"], tenant=tenant, status="in_progress", owner=self.owner,
                            lease_until=now + self.config.lease_s, stream=stream, response=response, created_at=now)
        state = _Run(run)
        try:
            await self.store.create(run, self.ttl_s)
        except BaseException:
            await close_events(events)
            raise
        self._runs[run.id] = state
        if stream:
            self._queue(state, first)
        state.driver = asyncio.create_task(self._drive(state, events), name=f"background {run.id}")
        return run

    # -- the driver ------------------------------------------------------------------------------
    def _queue(self, state: _Run, event: dict[str, Any]) -> bool:
        """Queue one event for the writer; False (nothing queued) when the queue is at the events cap.

        The queue only grows while the store is unreachable; the cap keeps it bounded then too.
        """
        if len(state.frames) >= self.config.max_events:
            return False
        seq = event.get("sequence_number")
        if state.next_seq is None:
            state.next_seq = seq if isinstance(seq, int) else 0
        state.frames.append(sse_frame(event))
        state.wake.set()
        return True

    async def _drive(self, state: _Run, events: AsyncIterator[dict[str, Any]]) -> None:
        run = state.run
        writer = asyncio.create_task(self._write(state), name=f"background writer {run.id}")
        response = run.response
        status = "in_progress"
        terminal: dict[str, Any] | None = None  # the stream's last event, stored with the run's end
        exit_: BaseException | None = None
        state.started = True
        try:
            if state.cancel_requested or self._closing:
                raise asyncio.CancelledError  # asked to stop before it started
            async for event in events:
                snapshot = event.get("response")
                if isinstance(snapshot, dict):
                    response = {**snapshot, "background": True}
                    status = str(snapshot.get("status") or status)
                elif event.get("type") in _ITEM_EVENTS and isinstance(event.get("item"), dict):
                    output = list(response.get("output") or [])
                    index = event.get("output_index")
                    if isinstance(index, int) and 0 <= index <= len(output):
                        output[index:index + 1] = [event["item"]]
                        response = {**response, "output": output}
                        state.snapshot = response
                        state.wake.set()
                if not run.stream:
                    continue
                if event.get("type") in _TERMINAL_EVENTS:
                    terminal = event
                elif not self._queue(state, event):
                    state.limit = self._limit_text()
                    state.frames.clear()  # past the cap they would be refused anyway: only the end is stored
                    break
            else:
                if status not in ("completed", "incomplete", "failed"):
                    status = "completed"
        except asyncio.CancelledError:
            if state.lost or not (state.cancel_requested or state.limit or state.failure or self._closing):
                # Lost to an expired lease (someone else ended it), or cancelled by nobody we know of.
                await close_events(events)
                writer.cancel()
                self._forget(run.id)
                if not state.lost:
                    raise
                return
            if state.limit or state.failure:
                pass  # the writer stopped the run: ``_verdict`` says how it ended
            elif state.cancel_requested:
                status, response = "cancelled", {**response, "status": "cancelled"}
            else:  # this process is shutting down: say so now rather than when the lease runs out
                status, response = "failed", failed_snapshot(response, "server_error", SHUTDOWN)
        except BaseException as exc:  # an engine or renderer failure, a native library's panic too: the run fails
            log.error("background response %s failed", run.id, exc_info=exc)
            status, response = "failed", failed_snapshot(response, "server_error", FAILED)
            exit_ = exc if isinstance(exc, EXITS) else None  # KeyboardInterrupt, SystemExit: ended, then passed on
        finally:
            with contextlib.suppress(Exception):
                await close_events(events)
        response["status"] = status
        await self._end(state, writer, status, response, terminal)
        if exit_ is not None:
            raise exit_

    async def _end(self, state: _Run, writer: asyncio.Task[None], status: str, response: dict[str, Any],
                   terminal: dict[str, Any] | None) -> None:
        run = state.run
        state.done = True
        state.wake.set()
        try:
            async with asyncio.timeout(FINISH_TIMEOUT_S):
                await writer  # the queued events go first: a follower sees them all before the end
                if not state.lost:
                    status, response, last = self._verdict(state, status, response, terminal)
                    await self.store.finish(run.id, self.owner, status, response, self.ttl_s, last,
                                            state.next_seq or 0)
        except RunLost:
            pass
        except Exception as exc:  # the store is down: a reader ends the run when its lease runs out
            log.warning("could not store the end of background response %s: %s", run.id, exc)
            writer.cancel()
        finally:
            self._forget(run.id)

    def _verdict(self, state: _Run, status: str, response: dict[str, Any],
                 terminal: dict[str, Any] | None) -> tuple[str, dict[str, Any], bytes | None]:
        """How the run ends, once the writer stored all it could, and the stream's last event.

        A cap or a store failure met by the writer fails the run even when the loop ended first (some of
        its events were not stored). Every stream ends with its ``response.<status>`` event, numbered after
        the stored ones; a cancelled run's stream just ends (the Responses API has no event for it).
        """
        if state.limit or state.failure:
            code = "events_limit_exceeded" if state.limit else "server_error"
            status, response = "failed", failed_snapshot(response, code, state.limit or state.failure or "")
            terminal = None
        if not state.run.stream or status not in _TERMINAL_STATUSES:
            return status, response, None
        kind = "response." + status
        if terminal is None or terminal.get("type") != kind:
            terminal = {"type": kind, "response": response}
        return status, response, sse_frame({**terminal, "sequence_number": state.next_seq or 0})

    def _forget(self, run_id: str) -> None:
        self._runs.pop(run_id, None)
        self.wake_followers(run_id)

    # -- the writer ------------------------------------------------------------------------------
    async def _write(self, state: _Run) -> None:
        run, store, config = state.run, self.store, self.config
        while True:
            check_cancelled()  # a store call may have swallowed the cancellation (gateway/cancellation.py)
            if not state.frames and not state.done:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(config.heartbeat_s):
                        await state.wake.wait()
            state.wake.clear()
            batch = state.frames[:MAX_BATCH]
            snapshot, state.snapshot = state.snapshot, None
            try:
                if snapshot is not None and not state.done:
                    cancel = await store.update(run.id, self.owner, "in_progress", snapshot, self.lease_until())
                    if not batch:
                        self._check_cancel(state, cancel)
                        continue
                if batch:
                    assert state.next_seq is not None
                    # One of max_events is kept for the terminal event, which ``finish`` stores.
                    cancel = await store.append(run.id, self.owner, batch, state.next_seq, self.lease_until(),
                                                config.max_events - 1, config.max_event_bytes)
                    del state.frames[:len(batch)]
                    state.next_seq += len(batch)
                    self.wake_followers(run.id)
                elif state.done:
                    return
                else:
                    cancel = await store.heartbeat(run.id, self.owner, self.lease_until())
            except StoreUnavailable as exc:
                if state.snapshot is None:
                    state.snapshot = snapshot
                # Kept queued and retried: the lease outlasts a short outage; a long one ends the run.
                log.warning("background response %s: store unavailable (%s); retrying", run.id, exc)
                await asyncio.sleep(min(config.heartbeat_s, 1.0))
                continue
            except RunLost:
                state.lost = True
                self._stop(state)
                return
            except EventsLimit:
                state.frames.clear()
                state.limit = self._limit_text()
                self._stop(state)
                return
            except Exception as exc:  # a bug or an unexpected store answer: end the run, keep the process
                log.error("background response %s: storing its progress failed", run.id, exc_info=exc)
                state.frames.clear()
                state.failure = "the gateway could not store this response's progress"
                self._stop(state)
                return
            self._check_cancel(state, cancel)

    def _limit_text(self) -> str:
        config = self.config
        return (f"the response produced more than background.max_events ({config.max_events}) stream events or "
                f"background.max_event_bytes ({config.max_event_bytes}) bytes of them")

    def _check_cancel(self, state: _Run, cancel: bool) -> None:
        if cancel and not state.cancel_requested:
            state.cancel_requested = True
            self._stop(state)

    def _stop(self, state: _Run) -> None:
        if state.driver is not None and state.started and not state.done:
            state.driver.cancel()

    # -- the API's side --------------------------------------------------------------------------
    def cancel_local(self, run_id: str) -> bool:
        """Cancel a run of this process at once (a cancel from elsewhere arrives with the next heartbeat)."""
        state = self._runs.get(run_id)
        if state is None:
            return False
        state.cancel_requested = True
        self._stop(state)
        return True

    async def wait_local(self, run_id: str, timeout_s: float) -> None:
        """Wait (bounded) until a run of this process has stored its end."""
        state = self._runs.get(run_id)
        if state is not None and state.driver is not None:
            await asyncio.wait({state.driver}, timeout=timeout_s)  # never raises the driver's outcome

    def is_local(self, run_id: str) -> bool:
        return run_id in self._runs

    def follower_event(self, run_id: str) -> asyncio.Event:
        event = self._followers.get(run_id)
        if event is None:
            event = self._followers[run_id] = asyncio.Event()
        return event

    def drop_follower_event(self, run_id: str, event: asyncio.Event) -> None:
        if self._followers.get(run_id) is event and run_id not in self._runs:
            del self._followers[run_id]

    def wake_followers(self, run_id: str) -> None:
        event = self._followers.pop(run_id, None)
        if event is not None:
            event.set()

    async def aclose(self) -> None:
        """Stop every run of this process (at shutdown): each ends ``failed`` at once (bounded wait).

        A run whose end cannot be stored in time is ended by the first reader once its lease runs out.
        """
        self._closing = True
        drivers = [s.driver for s in self._runs.values() if s.driver is not None]
        for state in self._runs.values():
            self._stop(state)  # one not started yet sees ``_closing`` when it starts
        if drivers:
            await asyncio.gather(*drivers, return_exceptions=True)


async def close_events(events: AsyncIterator[Any]) -> None:
    """Close an event generator now (cancelling what it runs), not at garbage collection."""
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()
