"""What this process's counters added since the last look: one rollup record per interval.

The console's overview charts a deployment's traffic over the last hour. Rather than count
anything again on the request path, a background task (``gateway/api/console/writer.py``) reads
the registry the request path already updates (``metrics.py``) every ``resolution_s`` and keeps
the difference from its previous reading; that difference, per route, is the record a replica
writes to the store. The request path pays nothing for it: the reading is a few dict copies per
interval, off the path, on the event loop between requests.

A record (JSON), short keys because a deployment writes one per replica per interval:

* ``t`` (interval end, epoch s), ``s`` (its length, s), ``r`` (replica id);
* ``q``: route -> ``[requests, errors]`` (errors: answers with status 5xx; ``/admin/`` calls left out);
* ``l``: surface path -> latency histogram buckets added (``metrics.LATENCY``'s bounds, then +Inf);
* ``k``: route -> tokens added (prompt + completion);
* ``o``: route -> gateway overhead histogram buckets added (``metrics.OVERHEAD``'s bounds, then +Inf;
  absent in records of replicas from before it);
* ``f``: ``[from target, error class, count]`` failovers added;
* ``e``: ``[target, error class, count]`` upstream errors added (the circuits' last errors).
"""

from __future__ import annotations

from typing import Any

from gateway.observability import metrics

#: token kinds that count toward throughput (cached and reasoning are parts of these)
_THROUGHPUT_KINDS = frozenset({"prompt", "completion"})
#: the operators' own calls (the console polls these) are not the traffic the overview shows
_OPERATOR_PATHS = ("/admin/",)


def _delta(now: dict[Any, float], before: dict[Any, float]) -> dict[Any, float]:
    return {key: value - before.get(key, 0.0) for key, value in now.items() if value != before.get(key, 0.0)}


class RollupRecorder:
    """Differences of the shared counters between two readings (one instance per process)."""

    def __init__(self) -> None:
        self._requests: dict[tuple[str, ...], float] = {}
        self._latency: dict[tuple[str, ...], list[float]] = {}
        self._overhead: dict[tuple[str, ...], list[float]] = {}
        self._tokens: dict[tuple[str, ...], float] = {}
        self._failovers: dict[tuple[str, ...], float] = {}
        self._errors: dict[tuple[str, ...], float] = {}
        self.take(0.0, 0.0, "")  # counts from before the first interval belong to no interval

    def take(self, at: float, length_s: float, replica: str) -> dict[str, Any]:
        """The record of the interval that ends now (``at``), and the reading the next one starts from."""
        requests = dict(metrics.REQUESTS.values)
        latency = {key: list(series) for key, series in metrics.LATENCY.series.items()}
        overhead = {key: list(series) for key, series in metrics.OVERHEAD.series.items()}
        tokens = dict(metrics.TOKENS.values)
        failovers = dict(metrics.FAILOVERS.values)
        errors = dict(metrics.UPSTREAM_ERRORS.values)

        per_route: dict[str, list[float]] = {}
        for (path, route, status), added in _delta(requests, self._requests).items():
            if path.startswith(_OPERATOR_PATHS):
                continue
            counts = per_route.setdefault(route, [0.0, 0.0])
            counts[0] += added
            if status.startswith("5"):
                counts[1] += added
        per_path = {key[0]: added for key, added in _added_buckets(latency, self._latency).items()
                    if not key[0].startswith(_OPERATOR_PATHS)}
        added_overhead = {key[0]: added for key, added in _added_buckets(overhead, self._overhead).items()}
        throughput: dict[str, float] = {}
        for (_tenant, route, kind), added in _delta(tokens, self._tokens).items():
            if kind in _THROUGHPUT_KINDS:
                throughput[route] = throughput.get(route, 0.0) + added

        self._requests, self._latency, self._tokens, self._overhead = requests, latency, tokens, overhead
        failed_over = _delta(failovers, self._failovers)
        upstream_errors = _delta(errors, self._errors)
        self._failovers, self._errors = failovers, errors
        return {"t": at, "s": length_s, "r": replica, "q": per_route, "l": per_path, "k": throughput,
                "o": added_overhead,
                "f": [[target, kind, count] for (target, kind), count in failed_over.items()],
                "e": [[target, kind, count] for (target, kind), count in upstream_errors.items()]}


def _added_buckets(now: dict[tuple[str, ...], list[float]],
                   before: dict[tuple[str, ...], list[float]]) -> dict[tuple[str, ...], list[float]]:
    """Per histogram series, the bucket counts added since ``before`` (the running sum left out); only
    the series that moved."""
    added = {}
    for key, series in now.items():
        old = before.get(key)
        buckets = series[:-1] if old is None else [a - b for a, b in zip(series[:-1], old[:-1], strict=True)]
        if any(buckets):
            added[key] = buckets
    return added


def latency_bounds() -> tuple[float, ...]:
    """The upper bound of each latency bucket in a record (the last one is +Inf)."""
    return (*metrics.LATENCY.buckets, float("inf"))


def overhead_bounds() -> tuple[float, ...]:
    """The upper bound of each gateway overhead bucket in a record (the last one is +Inf)."""
    return (*metrics.OVERHEAD.buckets, float("inf"))


def quantile(buckets: list[float], q: float, bounds: tuple[float, ...] | None = None) -> float | None:
    """The ``q`` quantile of a histogram, interpolated linearly inside its bucket (as Prometheus does).

    None when the histogram is empty; a quantile in the +Inf bucket is the last finite bound.
    ``bounds``: the histogram's bucket bounds (default the request latency's).
    """
    total = sum(buckets)
    if total <= 0:
        return None
    if bounds is None:
        bounds = latency_bounds()
    rank = q * total
    seen = 0.0
    for index, count in enumerate(buckets):
        if count and seen + count >= rank:
            upper = bounds[index]
            lower = bounds[index - 1] if index else 0.0
            if upper == float("inf"):
                return lower
            return lower + (upper - lower) * (rank - seen) / count
        seen += count
    return bounds[-2]
