"""The emitter (``emit`` and the named emission points) and the delivery worker every replica runs.

Request paths only call the synchronous ``emit``: it builds the event and appends one job per
subscribed receiver to a bounded in-process buffer (full: dropped and counted). A background
task pushes the buffer to the store's outbox in batches; a store outage is logged and counted,
never raised into a request. The delivery worker claims due jobs from the shared outbox
(leased: a replica that dies mid-delivery frees its jobs when the lease ends), POSTs them and
removes them, or puts them back with exponential backoff until ``retry_for_s`` after the event,
when they are dropped and counted.

Expiry: a pause (with ``expired`` subscribed) also queues a check, due shortly before the
continuation's TTL ends; whichever replica claims it looks the continuation up and emits
``expired`` when it is still waiting (pending, or claimed by a resume that died).

Delivery is at least once: a replica that dies after the receiver answered but before it
removed the job delivers nothing more, and after the lease another replica POSTs it again, with
the same event id (``X-Loopgate-Event-Id``) so the receiver can drop the repeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import deque
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from gateway.cancellation import check_cancelled, stop_tasks
from gateway.config.notifications_section import WEBHOOK_EVENTS, NotificationsConfig
from gateway.notify import events
from gateway.observability import metrics
from gateway.store.base import Store
from gateway.store.continuations.base import Continuation, ContinuationNotFound

if TYPE_CHECKING:
    import aiohttp

    from gateway.notify.delivery import Receiver
from gateway.store.outbox.base import Claimed, Outbox, now_ms
from gateway.upstream.proxy import environment_proxies

log = logging.getLogger("loopgate.notify")

#: The two outboxes: webhook deliveries, and the expiry checks of paused continuations (each capped apart,
#: so a day of pauses waiting for their TTL never crowds out deliveries).
DELIVERIES = "deliveries"
CHECKS = "checks"
#: Jobs waiting in a replica's memory for the store; past it new events are dropped (and counted).
MAX_BUFFER = 10_000
#: Jobs pushed to the store per round trip, and claimed per round trip.
BATCH = 200
CLAIM_BATCH = 32
#: Delivery attempts one replica runs at once.
MAX_IN_FLIGHT = 64
#: How often an idle worker looks for jobs other replicas queued (its own wake it at once).
POLL_S = 1.0
#: A claim outlives the longest attempt by this much; then another replica may take the job.
LEASE_MARGIN_S = 30.0
TTL_REASON = "the continuation expired unanswered"
#: An approval with ``approval_timeout_s`` counts as denied once its deadline passed (fail-closed).
APPROVAL_TIMEOUT_REASON = "approval timed out"
#: a running tool call's question (MCP elicitation) was not answered in time: the holding replica declined it
ELICITATION_TIMEOUT_REASON = "elicitation timed out"
#: The expiry check runs this long before the continuation's TTL ends (the record must still exist).
EXPIRY_LEAD_S = 2.0


class Notifier:
    def __init__(self, config: NotificationsConfig, public_url: str | None, store: Store,
                 proxies: Mapping[str, str] | None = None) -> None:
        self.config = config
        self.public_url = public_url
        self.store = store
        proxies = environment_proxies() if proxies is None else proxies
        self.receivers: dict[str, Receiver] = {}
        if config.webhooks:  # aiohttp and the delivery code load at start-up, and only where webhooks are set
            from gateway.notify.delivery import Receiver

            self.receivers = {r.key: r for r in (Receiver.build(h, proxies) for h in config.webhooks)}
        self._subscribers: dict[str, tuple[str, ...]] = {
            kind: tuple(r.key for r in self.receivers.values() if kind in r.config.events) for kind in WEBHOOK_EVENTS}
        self._lease_ms = int((max((h.timeout_s for h in config.webhooks), default=10.0) + LEASE_MARGIN_S) * 1000)
        # (outbox name, job id, due ms, body, event type)
        self._buffer: deque[tuple[str, str, int, bytes, str]] = deque()
        self._boxes: dict[str, Outbox] = {}
        self._session: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._running: set[asyncio.Task[None]] = set()  # delivery attempts in flight
        self._flush_wake = asyncio.Event()
        self._work_wake = asyncio.Event()

    @property
    def enabled(self) -> bool:
        return bool(self.receivers)

    def wants(self, event_type: str) -> bool:
        return bool(self._subscribers.get(event_type))

    # -- emitting (request paths: synchronous, never raises, never waits) ----------------------
    def emit(self, event_type: str, tenant: str, **fields: Any) -> None:
        """Queue ``event_type`` for every receiver subscribed to it (see ``events.build`` for ``fields``)."""
        targets = self._subscribers.get(event_type)
        if not targets:
            return
        try:
            event = events.build(event_type, tenant, **fields)
            first = now_ms()
            for key in targets:
                job = {"k": "deliver", "hook": key, "event": event, "attempts": 0, "first": first}
                self._enqueue(DELIVERIES, f"{event['id']}:{key}", first, orjson.dumps(job), event_type)
        except Exception:  # an emission point must never fail its request
            log.exception("could not queue a %s notification", event_type)
            metrics.WEBHOOK_EVENTS.inc(event_type, "dropped_error")

    def _enqueue(self, box: str, job_id: str, due: int, body: bytes, event_type: str) -> None:
        if len(self._buffer) >= MAX_BUFFER:
            metrics.WEBHOOK_EVENTS.inc(event_type, "dropped_buffer_full")
            return
        self._buffer.append((box, job_id, due, body, event_type))
        self._flush_wake.set()

    def paused(self, continuation: Continuation) -> None:
        if self.wants("paused"):  # the event's fields are built only for a subscriber (every pause passes here)
            self.emit("paused", continuation.tenant, **_about(continuation), expires_at=int(continuation.expires_at))
        if self.wants("expired"):
            due, reason = continuation.expires_at - EXPIRY_LEAD_S, TTL_REASON
            deadlines = [(float(p[field]), why) for p in continuation.pending
                         for field, why in (("approval_deadline", APPROVAL_TIMEOUT_REASON),
                                            ("elicitation_deadline", ELICITATION_TIMEOUT_REASON))
                         if isinstance(p.get(field), (int, float))]
            if deadlines and min(deadlines)[0] < due:
                due, reason = min(deadlines)
            self.watch(continuation, max(time.time(), due), reason)

    def watch(self, continuation: Continuation, due_s: float, reason: str) -> None:
        """Check at ``due_s`` whether ``continuation`` still waits; if so, emit ``expired`` with ``reason``.

        One check per continuation: watching it again moves the check.
        """
        job = {"k": "check", "tenant": continuation.tenant, "cid": continuation.id, "reason": reason}
        self._enqueue(CHECKS, continuation.id, int(due_s * 1000), orjson.dumps(job), "expired")

    def resumed(self, continuation: Continuation, way: str, result_id: str | None = None,
                result_status: str | None = None) -> None:
        """Emitted once the resumed loop ended and its result is stored: ``result_id`` is the answer's id
        (``GET /v1/continuations/{id}`` returns it), ``result_status`` ``completed`` or ``paused`` (again)."""
        if self.wants("resumed"):
            self.emit("resumed", continuation.tenant, **_about(continuation), way=way, result_id=result_id,
                      result_status=result_status)

    def decided(self, continuation: Continuation, decisions: Iterable[dict[str, Any]], decided_by: str | None) -> None:
        """An approval decision (way B): ``decisions`` are ``{tool_call_id, approved, reason?}``."""
        names = {p.get("tool_call_id"): p.get("name") for p in continuation.pending}
        listed = [{"tool_call_id": events.cut(d.get("tool_call_id"), 200), "name": events.cut(names.get(d.get(
            "tool_call_id")), 200), "approved": bool(d.get("approved")), "reason": events.cut(d.get("reason"))}
            for d in list(decisions)[:events.MAX_CALLS]]
        self.emit("decided", continuation.tenant, **_about(continuation), decided_by=decided_by, decisions=listed)

    def headless_denied(self, tenant: str, call: Mapping[str, Any], reason: str, key_name: str | None = None,
                        route: str | None = None) -> None:
        """``key_name``: the headless key that asked (its headless mode decided); ``route``: the model it asked for."""
        function = call.get("function") or {}
        item = {"tool_call_id": call.get("id"), "name": function.get("name"), "arguments": function.get("arguments")}
        self.emit("headless_denied", tenant, route=events.cut(route, 200) if route else None, calls=[item],
                  reason=events.cut(reason), decided_by=key_name or None, asked_by=key_name or None)

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the flusher and this replica's delivery worker (nothing when no webhook is configured)."""
        if not self.enabled:
            return
        import aiohttp

        self._boxes = {name: self.store.outbox(name) for name in (DELIVERIES, CHECKS)}
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64),
                                              timeout=aiohttp.ClientTimeout(total=None))
        self._tasks = [asyncio.create_task(self._flush_forever(), name="loopgate-notify-flush"),
                       asyncio.create_task(self._work_forever(), name="loopgate-notify-deliver")]

    async def stop(self) -> None:
        if self._buffer and self._boxes:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await self._flush_once()  # hand what is buffered to the other replicas
        await stop_tasks([*self._tasks, *self._running], "notifications")
        self._tasks = []
        if self._session is not None:
            await self._session.close()

    # -- buffer -> store -----------------------------------------------------------------------
    async def _flush_forever(self) -> None:
        while True:
            check_cancelled()  # a store call may have swallowed the cancellation (gateway/cancellation.py)
            await self._flush_wake.wait()
            self._flush_wake.clear()
            while self._buffer:
                await self._flush_once()

    async def _flush_once(self) -> None:
        batch = [self._buffer.popleft() for _ in range(min(BATCH, len(self._buffer)))]
        for name, outbox in self._boxes.items():
            jobs = [item for item in batch if item[0] == name]
            if jobs:
                await self._push(name, outbox, jobs)
        self._work_wake.set()

    async def _push(self, name: str, outbox: Outbox, jobs: list[tuple[str, str, int, bytes, str]]) -> None:
        try:
            refused = await outbox.push([(j, d, b) for _, j, d, b, _ in jobs], self.config.max_queue)
        except Exception as exc:
            log.warning("notifications: %d job(s) dropped, the store did not take them: %s", len(jobs), exc)
            for *_, kind in jobs:
                metrics.WEBHOOK_EVENTS.inc(kind, "dropped_store_error")
            return
        if refused:
            log.warning("notifications: the %s outbox is full (notifications.max_queue = %d): %d job(s) dropped",
                        name, self.config.max_queue, refused)
        for index, (*_, kind) in enumerate(jobs):
            metrics.WEBHOOK_EVENTS.inc(kind, "dropped_queue_full" if index >= len(jobs) - refused else "queued")

    # -- store -> receivers --------------------------------------------------------------------
    async def _work_forever(self) -> None:
        """Keep up to ``MAX_IN_FLIGHT`` jobs running; each is its own task, so a receiver that hangs
        until its timeout holds one slot, never the deliveries to the others."""
        while True:
            check_cancelled()  # a claim may have swallowed the cancellation (gateway/cancellation.py)
            claimed_any = False
            for outbox in self._boxes.values():
                free = MAX_IN_FLIGHT - len(self._running)
                if free <= 0:
                    break
                try:
                    claimed = await outbox.claim(self._lease_ms, min(CLAIM_BATCH, free))
                except Exception as exc:
                    log.warning("notifications: cannot claim jobs from the store: %s", exc)
                    claimed = []
                for job in claimed:
                    task = asyncio.create_task(self._handle(outbox, job))
                    self._running.add(task)
                    task.add_done_callback(self._finished)
                claimed_any = claimed_any or bool(claimed)
            if claimed_any and len(self._running) < MAX_IN_FLIGHT:
                continue  # more may be due right now
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(POLL_S):
                    await self._work_wake.wait()  # a local event, or a finished job when all slots were busy
            self._work_wake.clear()

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if len(self._running) == MAX_IN_FLIGHT - 1:
            self._work_wake.set()

    async def _handle(self, outbox: Outbox, job: Claimed) -> None:
        try:
            body = orjson.loads(job.body)
            if body.get("k") == "check":
                await self._check(body)
                await outbox.done(job.id, job.token)
            else:
                await self._deliver(outbox, job, body)
        except Exception:
            # Left claimed: the job comes back when its lease ends.
            log.exception("notifications: job %s failed; it is retried after its lease", job.id)

    async def _deliver(self, outbox: Outbox, job: Claimed, body: dict[str, Any]) -> None:
        assert self._session is not None
        receiver = self.receivers.get(str(body.get("hook")))
        if receiver is None:  # the receiver was removed from the config since the event was queued
            await outbox.done(job.id, job.token)
            metrics.WEBHOOK_DELIVERIES.inc("dropped")
            return
        problem = await receiver.attempt(self._session, body["event"], self.public_url)
        if problem is None:
            await outbox.done(job.id, job.token)
            metrics.WEBHOOK_DELIVERIES.inc("delivered")
            return
        attempts = int(body.get("attempts", 0)) + 1
        delay = min(self.config.backoff_max_s, self.config.backoff_base_s * 2 ** (attempts - 1))
        delay *= random.uniform(0.8, 1.0)  # replicas retrying a shared outage do not stampede together
        due = now_ms() + int(delay * 1000)
        if due > int(body.get("first", 0)) + int(self.config.retry_for_s * 1000):
            await outbox.done(job.id, job.token)
            metrics.WEBHOOK_DELIVERIES.inc("dropped")
            log.warning("webhook %s: event %s dropped after %d attempt(s) (notifications.retry_for_s = %g): %s",
                        receiver.key, body["event"]["id"], attempts, self.config.retry_for_s, problem)
            return
        body["attempts"] = attempts
        await outbox.retry(job.id, job.token, due, orjson.dumps(body))
        metrics.WEBHOOK_DELIVERIES.inc("retry")
        log.info("webhook %s: event %s attempt %d failed (%s); next in %.1fs", receiver.key, body["event"]["id"],
                 attempts, problem, delay)

    async def _check(self, body: dict[str, Any]) -> None:
        try:
            continuation = await self.store.get_continuation(str(body["cid"]), str(body["tenant"]))
        except ContinuationNotFound:
            return  # cancelled (or already gone)
        lease_over = continuation.status == "claimed" and (continuation.claimed_until or 0.0) < time.time()
        if continuation.status == "pending" or lease_over:
            self.emit("expired", continuation.tenant, **_about(continuation), reason=body.get("reason"))


def _about(continuation: Continuation) -> dict[str, Any]:
    """What every event about a continuation carries, ``asked_by`` being the name of the key that paused it."""
    asker = continuation.data.get("asker")
    name = asker.get("name") if isinstance(asker, dict) else None
    return {"continuation_id": continuation.id, "route": continuation.model, "calls": continuation.pending,
            "asked_by": events.cut(name, 200) if name else None}
