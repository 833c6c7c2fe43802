"""Each replica's rollups, written to the store every ``observability.rollups.resolution_s``.

One task per process: at each multiple of the resolution on the wall clock (so every replica's
records of one interval carry the same ``t`` and add up) it takes the counters' differences
(``gateway/observability/rollups.py``) and writes them with this replica's view of its circuits.
A store that does not answer costs that interval's record (logged once per outage), nothing
else: the request path never waits on it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from typing import Any

import orjson

from gateway.cancellation import stop_tasks
from gateway.config.observability_section import RollupConfig
from gateway.observability.rollups import RollupRecorder
from gateway.routing.health import TargetHealth
from gateway.store.errors import StoreError
from gateway.store.rollups.base import STATUS_INTERVALS, RollupStore

log = logging.getLogger("loopgate.console")


def replica_id() -> str:
    """Host and process: each worker of each replica writes its own records (they are summed)."""
    return f"{socket.gethostname()[:64]}:{os.getpid()}"


class ConsoleFeed:
    def __init__(self, store: RollupStore, config: RollupConfig, health: TargetHealth) -> None:
        self.store = store
        self.config = config
        self.health = health
        self.replica = replica_id()
        self._recorder = RollupRecorder()
        self._task: asyncio.Task[None] | None = None
        # target -> (since, last error class, when); kept here, off the request path
        self._since: dict[str, float] = {}
        self._last_error: dict[str, tuple[str, float]] = {}
        self._failing = False

    @classmethod
    def status_ttl(cls, config: RollupConfig) -> float:
        return config.resolution_s * STATUS_INTERVALS

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="console-rollups")

    async def stop(self) -> None:
        await stop_tasks([self._task], "console rollups")
        self._task = None

    async def _run(self) -> None:
        resolution = self.config.resolution_s
        while True:
            now = time.time()
            await asyncio.sleep(resolution - now % resolution)
            await self.tick(time.time())

    async def tick(self, now: float) -> None:
        """Take and write the interval that ends at the resolution boundary at or before ``now``."""
        resolution = self.config.resolution_s
        at = round(now - now % resolution, 3)
        record = self._recorder.take(at, resolution, self.replica)
        status = self._status(record, now)
        try:
            await self.store.write(self.replica, at, orjson.dumps(record), orjson.dumps(status))
        except StoreError as exc:
            if not self._failing:
                log.warning("console rollups not written (the overview misses this replica until the store "
                            "answers): %s", exc)
            self._failing = True
            return
        self._failing = False

    def _status(self, record: dict[str, Any], now: float) -> dict[str, Any]:
        latest: dict[str, tuple[str, float]] = {}
        for target, kind, count in record["e"]:
            if count > latest.get(target, ("", 0.0))[1]:
                latest[target] = (kind, count)
        for target, (kind, _) in latest.items():
            self._last_error[target] = (kind, now)
        circuits: dict[str, dict[str, Any]] = {}
        for target, detail in self.health.details().items():
            if detail["state"] == "closed":
                self._since.pop(target, None)
            else:
                detail["since"] = self._since.setdefault(target, detail["opened_at"] or now)
            error = self._last_error.get(target)
            if error is not None:
                detail["last_error"], detail["last_error_at"] = error
            circuits[target] = detail
        return {"r": self.replica, "t": now, "c": circuits}
