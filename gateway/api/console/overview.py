"""``GET /admin/console/overview``: the console's overview, from every replica's rollups (admin keys only).

Query: ``minutes`` (the window, 1 to the retention, default 60). The answer (besides ``now``,
``minutes``, ``resolution_s``, ``retention_s``, and ``first_traffic_at``: the end of the earliest
interval in the window with a request, or null, which the console's *Fit the data* range uses):

* ``series``: one point per interval (``t``, epoch s, the interval's end), zeros where nothing
  happened: per route requests/s, error rate (5xx share), tokens/s and the added latency (the
  gateway overhead: a request's time less its waiting on upstreams and tools) p50/p99 in ms
  (``overhead_ms``, ``null`` where no request ended), and over every surface the request latency
  p50/p99 in ms (``null`` where no request ended);
* ``failovers``: moves from one target to the next in the window, by the target left and why (its
  error class, or ``circuit_open`` when it was skipped), as ``loopgate_failovers_total`` counts them;
* ``circuits``: every configured target (and any other the replicas know), its worst state over
  the replicas as of now (open: skipped until ``open_until``; half_open: the cooldown is over and
  the next request probes it, or ``probing``: a probe is under way; closed), since when, its last
  error and when;
* ``paused``: live continuations waiting, per tenant (each counted up to ``MAX_PAUSED_COUNT``);
* ``replicas``: the replicas (processes) that wrote a status within the last few intervals.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from starlette.requests import Request

from gateway.api.driver import Operation
from gateway.api.request.lifecycle import Work
from gateway.api.services import ConsoleServices, console_services
from gateway.errors import GatewayError, bad_request
from gateway.http.json_response import JSONResponse
from gateway.observability.rollups import overhead_bounds, quantile

PATH = "/admin/console/overview"
#: paused continuations are counted per tenant up to this many (the listing's page bound)
MAX_PAUSED_COUNT = 100
#: tenants whose paused loops are counted in one answer (the known tenants, sorted)
MAX_PAUSED_TENANTS = 200
_STATE_RANK = {"closed": 0, "half_open": 1, "open": 2}


def _minutes(raw: str | None, retention_s: float) -> int:
    most = max(1, int(retention_s // 60))
    if raw is None or raw == "":
        return min(60, most)
    try:
        minutes = int(raw)
    except ValueError:
        minutes = 0
    if not 1 <= minutes <= most:
        raise bad_request(f"'minutes' must be an integer from 1 to {most} (the rollup retention)", "minutes")
    return minutes


def series(records: list[dict[str, Any]], start: float, end: float, resolution: float) -> dict[str, Any]:
    """Records summed per interval end, on a regular timeline from ``start`` to ``end``."""
    first = start - start % resolution + resolution
    times = []
    t = first
    while t <= end + 1e-6:
        times.append(round(t, 3))
        t += resolution
    index = {t: i for i, t in enumerate(times)}
    size = len(times)
    routes: dict[str, dict[str, list[float]]] = {}
    latency: list[list[float] | None] = [None] * size
    overhead: dict[str, list[list[float] | None]] = {}
    for record in records:
        i = index.get(round(record["t"], 3))
        if i is None:
            continue
        length = record["s"] or resolution
        for route, (count, errors) in record["q"].items():
            row = routes.setdefault(route, {"requests": [0.0] * size, "errors": [0.0] * size,
                                            "tokens": [0.0] * size})
            row["requests"][i] += count / length
            row["errors"][i] += errors
        for route, tokens in record["k"].items():
            row = routes.setdefault(route, {"requests": [0.0] * size, "errors": [0.0] * size,
                                            "tokens": [0.0] * size})
            row["tokens"][i] += tokens / length
        for route, buckets in record.get("o", {}).items():
            routes.setdefault(route, {"requests": [0.0] * size, "errors": [0.0] * size, "tokens": [0.0] * size})
            points = overhead.setdefault(route, [None] * size)
            merged_o = points[i]
            points[i] = list(buckets) if merged_o is None else [a + b for a, b in zip(merged_o, buckets, strict=True)]
        for buckets in record["l"].values():
            merged = latency[i]
            latency[i] = list(buckets) if merged is None else [a + b for a, b in zip(merged, buckets, strict=True)]
    out_routes = {}
    for route, row in sorted(routes.items()):
        rates = [round(r, 4) for r in row["requests"]]
        errors = [round(e / (r * resolution), 4) if r else 0.0 for e, r in zip(row["errors"], row["requests"],
                                                                               strict=True)]
        added = overhead.get(route, [None] * size)
        bounds = overhead_bounds()
        out_routes[route] = {"requests_per_s": rates, "error_rate": errors,
                             "tokens_per_s": [round(k, 2) for k in row["tokens"]],
                             "overhead_ms": {q_name: [None if b is None else _ms(quantile(b, q, bounds), 3)
                                                      for b in added] for q_name, q in (("p50", 0.5), ("p99", 0.99))},
                             "overhead_window_ms": _window(added, bounds)}
    p50 = [None if b is None else _ms(quantile(b, 0.5)) for b in latency]
    p99 = [None if b is None else _ms(quantile(b, 0.99)) for b in latency]
    return {"t": times, "routes": out_routes, "latency_ms": {"p50": p50, "p99": p99}}


def _window(points: list[list[float] | None], bounds: tuple[float, ...]) -> dict[str, float | None]:
    """p50/p99 over the whole window: every interval's buckets summed."""
    total: list[float] | None = None
    for buckets in points:
        if buckets is not None:
            total = list(buckets) if total is None else [a + b for a, b in zip(total, buckets, strict=True)]
    if total is None:
        return {"p50": None, "p99": None}
    return {"p50": _ms(quantile(total, 0.5, bounds), 3), "p99": _ms(quantile(total, 0.99, bounds), 3)}


def _ms(seconds: float | None, digits: int = 1) -> float | None:
    return None if seconds is None else round(seconds * 1000, digits)


def first_traffic(records: list[dict[str, Any]]) -> float | None:
    """The end of the earliest interval in the window that served a request (the console fits its range to it)."""
    times = [record["t"] for record in records if any(count for count, _ in record["q"].values())]
    return min(times) if times else None


def failovers(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for record in records:
        for target, reason, count in record["f"]:
            entry = found.setdefault((target, reason), {"from_target": target, "reason": reason, "count": 0,
                                                        "last_at": 0.0})
            entry["count"] += int(count)
            entry["last_at"] = max(entry["last_at"], record["t"])
    return sorted(found.values(), key=lambda e: (-e["count"], e["from_target"], e["reason"]))


def _circuit(target: str) -> dict[str, Any]:
    return {"target": target, "state": "closed", "since": None, "open_until": None, "probing": False,
            "last_error": None, "last_error_at": None, "replicas_open": 0}


def _state_now(detail: dict[str, Any], now: float) -> str:
    """A replica's state as of ``now``: its status may be an interval old, and an ``open`` whose
    ``open_until`` has passed is half-open by now (the breaker derives it from the time the same way)."""
    state: str = detail["state"]
    until = detail.get("open_until")
    if state == "open" and until is not None and until <= now:
        return "half_open"
    return state


def circuits(statuses: list[dict[str, Any]], configured: list[str], now: float) -> list[dict[str, Any]]:
    """Every target's worst state over the replicas; ``replicas_open`` counts the replicas where it is
    not closed, ``probing`` whether any of them has a half-open probe under way."""
    merged: dict[str, dict[str, Any]] = {t: _circuit(t) for t in configured}
    for status in statuses:
        for target, detail in status["c"].items():
            entry = merged.setdefault(target, _circuit(target))
            state = _state_now(detail, now)
            if state != "closed":
                entry["replicas_open"] += 1
            if state == "half_open" and detail.get("probing"):
                entry["probing"] = True
            if _STATE_RANK[state] > _STATE_RANK[entry["state"]]:
                entry["state"], entry["open_until"] = state, detail.get("open_until")
            since = detail.get("since")
            if state != "closed" and since is not None and (entry["since"] is None or since < entry["since"]):
                entry["since"] = since
            at = detail.get("last_error_at")
            if at is not None and (entry["last_error_at"] is None or at > entry["last_error_at"]):
                entry["last_error"], entry["last_error_at"] = detail.get("last_error"), at
    return sorted(merged.values(), key=lambda e: (-_STATE_RANK[e["state"]], e["target"]))


async def paused(services: ConsoleServices) -> dict[str, Any]:
    counts: dict[str, int] = {}
    capped = False
    tenants = await services.tenants.known()
    for tenant in tenants[:MAX_PAUSED_TENANTS]:
        entries, more = await services.continuations.page(tenant, MAX_PAUSED_COUNT)
        waiting = sum(1 for entry in entries if entry.get("status") == "pending")
        capped = capped or more
        if waiting:
            counts[tenant] = waiting
    return {"total": sum(counts.values()), "by_tenant": counts, "capped": capped or len(tenants) > MAX_PAUSED_TENANTS}


async def get_overview(request: Request, services: ConsoleServices, work: Work) -> JSONResponse:
    work.authenticate_admin()
    feed = services.feed
    if feed is None:
        raise GatewayError(404, "the console's rollups are off: observability.rollups.enabled is false",
                           "not_found_error", code="rollups_disabled")
    config = feed.config
    minutes = _minutes(request.query_params.get("minutes"), config.retention_s)
    now = time.time()
    start = now - minutes * 60
    records = [orjson.loads(raw) for raw in await feed.store.read(start)]
    statuses = [orjson.loads(raw) for raw in (await feed.store.statuses()).values()]
    body = {"object": "console.overview", "now": now, "minutes": minutes, "resolution_s": config.resolution_s,
            "first_traffic_at": first_traffic(records),
            "retention_s": config.retention_s, "series": series(records, start, now, config.resolution_s),
            "failovers": failovers(records), "circuits": circuits(statuses, services.routes.target_labels(), now),
            "paused": await paused(services), "replicas": sorted(s["r"] for s in statuses)}
    return JSONResponse(orjson.dumps(body))


OVERVIEW = Operation("GET", PATH, get_overview, console_services, metered=True)
