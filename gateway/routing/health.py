"""Per-target circuit breaker, so a dead provider costs one timeout rather than one per request.

State is kept in process for the hot path, which never waits on the store. With a shared store
(Redis) a background refresher reads every known target's shared "open until" every
``refresh_s`` (1 s) into the local state, so every replica skips a target that any replica found
dead within about a second; failures (and successes that change something: after failures or a
probe) are reported to the store by a background writer through a bounded queue
(``REPORT_QUEUE_MAX``: past it reports are dropped and counted), fire-and-forget. A store that
is down or hung (connections open, no answers) therefore costs requests nothing: routing goes on
with the local state, and ``loopgate_store_fail_open_total{domain="health"}`` counts what could
not be shared.

A half-open circuit lets exactly one probe through. The probe always ends in a verdict or a
release: an answer closes the circuit, a failure (a timeout at the request deadline included)
re-opens it, and a probe abandoned without a verdict (the request cancelled, the client gone)
is released, so the next request probes again instead of the target staying skipped for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from gateway.observability import fail_open

log = logging.getLogger("loopgate.health")

#: reports waiting for the writer; past it new ones are dropped (counted): a hung store must not grow memory
REPORT_QUEUE_MAX = 1024


# What ``admit`` lets through: a closed circuit, the one half-open probe, or nothing.
Admission = Literal["closed", "probe", "refused"]


class SharedHealth(Protocol):
    async def health_report(self, target: str, failed: bool, threshold: int, cooldown_s: float) -> float | None: ...

    async def health_open_until(self, target: str) -> float | None: ...


@dataclass(slots=True)
class _State:
    failures: int = 0
    open_until: float = 0.0
    probing: bool = False


class TargetHealth:
    #: how often the refresher reads the shared state of every known target
    SHARED_REFRESH_S = 1.0

    def __init__(self, failures_to_open: int, cooldown_s: float, shared: SharedHealth | None = None,
                 refresh_s: float | None = None) -> None:
        self._threshold = failures_to_open
        self._cooldown = cooldown_s
        self._shared = shared
        self._states: dict[str, _State] = {}
        #: the targets whose shared state the refresher reads (every resolved one: bounded by the config)
        self._tracked: set[str] = set()
        self.refresh_s = self.SHARED_REFRESH_S if refresh_s is None else refresh_s
        self._reports: asyncio.Queue[tuple[str, bool]] | None = None
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """With a shared store: start the refresher and the report writer (inside the event loop)."""
        if self._shared is None or self._tasks:
            return
        self._reports = asyncio.Queue(REPORT_QUEUE_MAX)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._refresh_forever()), loop.create_task(self._write_forever())]

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    def track(self, target: str) -> None:
        """Know ``target`` (a resolved one): its shared state is refreshed from now on."""
        self._tracked.add(target)

    async def refresh(self) -> None:
        """Read the shared "open until" of every known target into the local state (the refresher's step)."""
        shared = self._shared
        if shared is None:
            return
        targets = list(self._tracked.union(self._states))
        found = await asyncio.gather(*(shared.health_open_until(t) for t in targets), return_exceptions=True)
        failure = None
        for target, until in zip(targets, found, strict=True):
            if isinstance(until, BaseException):
                failure = until
                continue
            if until and until > (state := self._state(target)).open_until:
                state.open_until = until
        if failure is not None:
            raise failure

    async def _refresh_forever(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception as exc:  # the store is down or hung: routing goes on with the local state
                fail_open.HEALTH.failed(exc)
            else:
                fail_open.HEALTH.answered()
            await asyncio.sleep(self.refresh_s)

    async def _write_forever(self) -> None:
        assert self._reports is not None
        while True:
            target, failed = await self._reports.get()
            shared_until = await self._report(target, failed)
            state = self._states.get(target)
            if failed and state is not None and shared_until and shared_until > state.open_until:
                state.open_until = shared_until

    def _share(self, target: str, failed: bool) -> None:
        """Queue an outcome for the writer; never waits (a full queue drops it, counted)."""
        if self._reports is None:
            return  # not started (tests, tools): nothing is shared
        try:
            self._reports.put_nowait((target, failed))
        except asyncio.QueueFull:
            fail_open.HEALTH.failed("too many target health reports waiting for the store")

    def _state(self, target: str) -> _State:
        state = self._states.get(target)
        if state is None:
            state = self._states[target] = _State()
        return state

    def state(self, target: str) -> str:
        state = self._state(target)
        now = time.time()
        if state.open_until > now:
            return "open"
        if state.open_until and (state.probing or now >= state.open_until):
            return "half_open"
        return "closed"

    def healthy(self, target: str) -> bool:
        """The common case, decided without awaiting: a closed circuit (the shared state is refreshed
        in the background, never on the request path), so the walk needs no coroutine per target."""
        state = self._states.get(target)
        return state is None or not state.open_until

    def is_open(self, target: str) -> bool:
        """Whether requests must skip ``target`` now (checked before a retry, so none goes to a just-opened circuit)."""
        state = self._states.get(target)
        return state is not None and state.open_until > time.time()

    async def admit(self, target: str) -> Admission:
        """May a request go to ``target`` now? After the cooldown exactly one probe is let through."""
        state = self._state(target)
        now = time.time()
        if not state.open_until:
            return "closed"
        if now < state.open_until or state.probing:
            return "refused"
        state.probing = True
        return "probe"

    def release_probe(self, target: str) -> None:
        """The probe ended without a verdict (cancelled, the client left): let the next request probe."""
        state = self._states.get(target)
        if state is not None:
            state.probing = False

    def success_is_news(self, target: str) -> bool:
        """Whether a success changes anything (after failures or a probe); False on the common path."""
        state = self._states.get(target)
        return state is not None and bool(state.failures or state.open_until or state.probing)

    async def record(self, target: str, failed: bool) -> None:
        """An outcome of ``target``: applied here at once, shared through the writer (never awaited)."""
        state = self._state(target)
        if not failed:
            changed = state.failures or state.open_until
            state.failures, state.open_until, state.probing = 0, 0.0, False
            if changed and self._shared is not None:
                self._share(target, False)
            return
        state.failures += 1
        if state.probing or state.failures >= self._threshold:
            state.open_until = time.time() + self._cooldown
            state.probing = False
            log.warning("circuit open for %s for %.1fs after %d failures", target, self._cooldown, state.failures)
        if self._shared is not None:
            self._share(target, True)

    async def _report(self, target: str, failed: bool) -> float | None:
        try:
            until = await self._shared.health_report(target, failed, self._threshold, self._cooldown)  # type: ignore[union-attr]
        except Exception as exc:
            fail_open.HEALTH.failed(exc)
            return None
        fail_open.HEALTH.answered()
        return until

    def snapshot(self) -> dict[str, str]:
        return {target: self.state(target) for target in self._states}

    def details(self) -> dict[str, dict[str, Any]]:
        """Each known target's state, open-until time, consecutive failures and whether a probe is under
        way (for the console: half-open is either a probe running or the cooldown over, no request since)."""
        return {target: {"state": self.state(target), "open_until": state.open_until or None,
                         "opened_at": state.open_until - self._cooldown if state.open_until else None,
                         "failures": state.failures, "probing": state.probing}
                for target, state in list(self._states.items())}
