"""One ``/metrics`` scrape summing every worker of ``loopgate serve --workers N``.

Each worker keeps its own registry (``gateway/observability/metrics.py``: an increment stays one dict
operation). With more than one worker, ``loopgate serve`` makes a private directory and hands
it to the workers (``LOOPGATE_METRICS_DIR``); every worker then writes a snapshot of its
registry there once a second (one small file per process, written off the event loop and
renamed into place, so a reader never sees half of one). A scrape, whichever worker answers
it, adds its own live values to the other workers' latest snapshots:

* counters and histograms are summed (a worker that exited keeps counting: its file stays);
* ``loopgate_upstream_connections`` is summed over live workers;
* ``loopgate_circuit_open`` is the maximum over live workers (a circuit open in one is open).

Another worker's numbers are therefore at most ``INTERVAL_S`` old. A single worker writes
nothing and reads nothing: its scrape is what it always was.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from gateway.cancellation import check_cancelled, stop_tasks
from gateway.observability import metrics

ENV = "LOOPGATE_METRICS_DIR"
INTERVAL_S = 1.0
# Gauges whose merged value is the maximum, not the sum, over workers.
_MAX = frozenset({metrics.CIRCUIT_STATE.name, metrics.CIRCUIT_HALF_OPEN.name})

log = logging.getLogger("loopgate.metrics")


def _snapshot() -> bytes:
    data: dict[str, list[Any]] = {}
    for metric in metrics.ALL:
        values = metric.series if isinstance(metric, metrics.Histogram) else metric.values
        data[metric.name] = [[list(key), value] for key, value in values.items()]
    return orjson.dumps(data)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SharedMetrics:
    def __init__(self, directory: str, refresh: Callable[[], None]) -> None:
        self.directory = Path(directory)
        self.pid = os.getpid()
        self._path = self.directory / f"{self.pid}.json"
        self._refresh = refresh  # sets the gauges (circuits, connections) from the live runtime
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def from_environment(cls, refresh: Callable[[], None]) -> SharedMetrics | None:
        directory = os.environ.get(ENV)
        return cls(directory, refresh) if directory else None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._publish_forever())

    async def stop(self) -> None:
        if self._task is not None:
            await stop_tasks([self._task], "shared metrics")
        await self.publish()  # the last numbers of a worker that exits stay counted

    async def _publish_forever(self) -> None:
        while True:
            check_cancelled()
            try:
                await self.publish()
            except OSError as exc:  # a full or vanished directory must not stop the worker
                log.warning("could not write the metrics snapshot to %s: %s", self.directory, exc)
            await asyncio.sleep(INTERVAL_S)

    async def publish(self) -> None:
        self._refresh()
        await asyncio.to_thread(self._write, _snapshot())

    def _write(self, data: bytes) -> None:
        temporary = self._path.with_suffix(".tmp")
        temporary.write_bytes(data)
        temporary.replace(self._path)

    async def render(self) -> str:
        """The text exposition of every worker's metrics, this one's live."""
        self._refresh()
        others = await asyncio.to_thread(self._read_others)
        lines: list[str] = []
        for metric in metrics.ALL:
            lines.extend(_merged(metric, others).render())
        return "\n".join(lines) + "\n"

    def _read_others(self) -> list[tuple[bool, dict[str, Any]]]:
        found = []
        for path in self.directory.glob("*.json"):
            try:
                pid = int(path.stem)
            except ValueError:
                continue
            if pid == self.pid:
                continue
            try:
                found.append((_alive(pid), orjson.loads(path.read_bytes())))
            except (OSError, orjson.JSONDecodeError):
                continue  # removed or replaced while read: the next scrape has it
        return found


def _merged(metric: Any, others: list[tuple[bool, dict[str, Any]]]) -> Any:
    if isinstance(metric, metrics.Histogram):
        merged_series = {key: list(series) for key, series in metric.series.items()}
        for _, data in others:
            for key, series in data.get(metric.name, ()):
                current = merged_series.setdefault(tuple(key), [0.0] * len(series))
                if len(current) == len(series):
                    for index, value in enumerate(series):
                        current[index] += value
        histogram = metrics.Histogram(metric.name, metric.help, metric.labels, metric.buckets)
        histogram.series = merged_series
        return histogram
    gauge = isinstance(metric, metrics.Gauge)
    merged = dict(metric.values)
    for alive, data in others:
        if gauge and not alive:
            continue  # a gauge describes a running process
        for key, value in data.get(metric.name, ()):
            key = tuple(key)
            if metric.name in _MAX:
                merged[key] = max(merged.get(key, 0.0), value)
            else:
                merged[key] = merged.get(key, 0.0) + value
    copy = type(metric)(metric.name, metric.help, metric.labels)
    copy.values = merged
    return copy
