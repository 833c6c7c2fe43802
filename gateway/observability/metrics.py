"""A minimal Prometheus registry: counters, gauges and histograms keyed by label tuples.

prometheus_client would add a lock and a label-validation pass per increment; here an
increment is one dict operation, which matters on a path every request takes. Each worker
process keeps its own registry (scrape each worker, or run one worker per pod).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence


class Counter:
    def __init__(self, name: str, help_text: str, labels: Sequence[str] = ()) -> None:
        self.name, self.help, self.labels = name, help_text, tuple(labels)
        self.values: dict[tuple[str, ...], float] = {}

    def inc(self, *label_values: str, amount: float = 1.0) -> None:
        self.values[label_values] = self.values.get(label_values, 0.0) + amount

    def get(self, *label_values: str) -> float:
        return self.values.get(label_values, 0.0)

    def render(self, kind: str = "counter") -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {kind}"]
        for key, value in self.values.items():
            lines.append(f"{self.name}{_labels(self.labels, key)} {_num(value)}")
        return lines


class Gauge(Counter):
    def set(self, value: float, *label_values: str) -> None:
        self.values[label_values] = value

    def render(self, kind: str = "gauge") -> list[str]:
        return super().render(kind)


class Histogram:
    def __init__(self, name: str, help_text: str, labels: Sequence[str] = (),
                 buckets: Sequence[float] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
                 ) -> None:
        self.name, self.help, self.labels = name, help_text, tuple(labels)
        self.buckets = tuple(buckets)
        self.series: dict[tuple[str, ...], list[float]] = {}  # bucket counts..., +Inf count, sum

    def observe(self, value: float, *label_values: str) -> None:
        series = self.series.get(label_values)
        if series is None:
            series = self.series[label_values] = [0.0] * (len(self.buckets) + 2)
        series[bisect.bisect_left(self.buckets, value)] += 1
        series[-1] += value

    def count(self, *label_values: str) -> float:
        series = self.series.get(label_values)
        return sum(series[:-1]) if series else 0.0

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        for key, series in self.series.items():
            cumulative = 0.0
            for bound, count in zip((*self.buckets, float("inf")), series[:-1], strict=True):
                cumulative += count
                le = "+Inf" if bound == float("inf") else _num(bound)
                lines.append(f"{self.name}_bucket{_labels((*self.labels, 'le'), (*key, le))} {_num(cumulative)}")
            lines.append(f"{self.name}_sum{_labels(self.labels, key)} {series[-1]}")
            lines.append(f"{self.name}_count{_labels(self.labels, key)} {_num(cumulative)}")
        return lines


def _labels(names: Sequence[str], values: Sequence[str]) -> str:
    if not names:
        return ""
    inner = ",".join(f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=False))
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


REQUESTS = Counter("loopgate_requests_total", "HTTP requests by route, model and status", ("path", "model", "status"))
LATENCY = Histogram("loopgate_request_duration_seconds", "Request latency (to last byte)", ("path",))
#: the request's time less its time waiting on upstream model calls and tools (docs/operations/console.md)
OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
OVERHEAD = Histogram("loopgate_gateway_overhead_seconds", "Time a request spent in the gateway itself: its "
                     "duration (to last byte) less its time waiting on upstream model calls and server tools, by "
                     "route (a configured route, PROVIDER/* or unknown)", ("route",), buckets=OVERHEAD_BUCKETS)
UPSTREAM_ATTEMPTS = Counter("loopgate_upstream_attempts_total", "Upstream model calls by target and outcome",
                            ("target", "outcome"))
UPSTREAM_ERRORS = Counter("loopgate_upstream_errors_total", "Upstream failures by target and error class",
                          ("target", "error_class"))
FAILOVERS = Counter("loopgate_failovers_total", "Moves from one target to the next, by the target left and why: "
                    "its error class, or circuit_open when it was skipped (its circuit open)",
                    ("from_target", "error_class"))
CIRCUIT_STATE = Gauge("loopgate_circuit_open", "1 while a target's circuit is open (requests skip it)", ("target",))
CIRCUIT_HALF_OPEN = Gauge("loopgate_circuit_half_open", "1 while a target's circuit is half-open (its cooldown is "
                          "over: the next request probes it, or a probe is under way)", ("target",))
UPSTREAM_CONNECTIONS = Gauge("loopgate_upstream_connections", "Upstream connections per provider: in_use, idle "
                             "(kept alive), waiting (requests queued for a connection at max_connections)",
                             ("provider", "state"))
STREAM_ABORTS = Counter("loopgate_stream_aborts_total", "Streams ended with an error after bytes reached the client",
                        ("target", "error_class"))
STREAM_RESCUES = Counter("loopgate_stream_rescues_total",
                         "Streams that failed after bytes reached the client and were continued (outcome: prefill, "
                         "restart) or could not be (diverged, failed)", ("outcome",))
UPSTREAM_MALFORMED_EVENTS = Counter("loopgate_upstream_malformed_events_total",
                                    "Stream events skipped because they were not JSON or had the wrong shape",
                                    ("target",))
TOOL_CALLS = Counter("loopgate_tool_calls_total", "Server-side tool executions by tool and status", ("tool", "status"))
LOOP_ITERATIONS = Histogram("loopgate_loop_iterations", "Model calls per request", (),
                            buckets=(1, 2, 3, 5, 8, 13, 25, 50))
CONTINUATIONS = Counter("loopgate_continuations_total", "Continuation events", ("event",))
CONTEXT_ACTIONS = Counter("loopgate_context_actions_total", "Context guard actions", ("action",))
WEBHOOK_EVENTS = Counter("loopgate_webhook_events_total", "Notification jobs by event type and outcome (queued; "
                         "dropped_buffer_full, dropped_store_error, dropped_queue_full, dropped_error)",
                         ("event", "outcome"))
WEBHOOK_DELIVERIES = Counter("loopgate_webhook_deliveries_total", "Webhook delivery attempts by outcome "
                             "(delivered, retry, dropped: retry period over or receiver removed)", ("outcome",))

TOKENS = Counter("loopgate_tokens_total", "Tokens used by tenant (configured tenants, else other), route and kind "
                 "(prompt, completion, cached, reasoning)", ("tenant", "route", "kind"))
COST = Counter("loopgate_cost_usd_total", "Cost in USD of priced model calls by tenant and route", ("tenant", "route"))
USAGE_STORE_FAILURES = Counter("loopgate_usage_store_failures_total",
                               "Usage store operations that failed: write, dropped (too many writes waiting), "
                               "budget_check (the request was let through)", ("op",))
STORE_FAIL_OPEN = Counter("loopgate_store_fail_open_total",
                          "Operations that went ahead without the store because it did not answer within "
                          "store.fail_open_ms (limits, budgets) or store.timeout_ms (usage, health)", ("domain",))
TRACE_SPANS_DROPPED = Counter("loopgate_trace_spans_dropped_total",
                              "Trace spans not exported, by reason (buffer_full: the buffer for the exporter "
                              "process was full; exporter_down: that process had died; too_large: over "
                              "observability.max_frame_bytes; unencodable: an integer past 64 bits)", ("reason",))
STORE_MEMORY_BYTES = Gauge("loopgate_store_memory_bytes", "Bytes the embedded (memory://) store holds, by domain "
                           "(responses, background, continuations, ledger, artifacts, audit); each is capped by its "
                           "share of store.memory_max_bytes", ("domain",))
STORE_EVICTIONS = Counter("loopgate_store_evictions_total", "Entries the embedded (memory://) store dropped before "
                          "their TTL to stay under store.memory_max_bytes, by domain", ("domain",))
STORE_QUOTA_REFUSALS = Counter("loopgate_store_quota_refusals_total", "Requests refused because their tenant's stored "
                               "Responses bytes reached store.tenant_max_stored_bytes", ())

KEY_LOOKUPS = Counter("loopgate_key_lookups_total", "Store look-ups of secrets this replica's key snapshot lacked, by "
                      "outcome (found, unknown, miss_cached: a recent miss answered it, shed: too many at once, "
                      "store_error)", ("outcome",))

WEBSOCKET_CONNECTIONS = Gauge("loopgate_websocket_connections", "Open WebSocket connections of the Responses API's "
                              "WebSocket mode", ())
WEBSOCKET_CLOSES = Counter("loopgate_websocket_closes_total", "WebSocket connections ended, by why: client (it "
                           "closed or went away), idle, lifetime, messages (websocket.max_messages), too_big, "
                           "key_refused, shutdown", ("reason",))

ALL = (REQUESTS, LATENCY, OVERHEAD, UPSTREAM_ATTEMPTS, UPSTREAM_ERRORS, FAILOVERS, CIRCUIT_STATE, CIRCUIT_HALF_OPEN,
       UPSTREAM_CONNECTIONS,
       STREAM_ABORTS, STREAM_RESCUES, UPSTREAM_MALFORMED_EVENTS, TOOL_CALLS,
       LOOP_ITERATIONS, CONTINUATIONS, CONTEXT_ACTIONS,
       TOKENS, COST, USAGE_STORE_FAILURES, WEBHOOK_EVENTS, WEBHOOK_DELIVERIES, TRACE_SPANS_DROPPED,
       KEY_LOOKUPS, STORE_MEMORY_BYTES, STORE_EVICTIONS, STORE_QUOTA_REFUSALS, STORE_FAIL_OPEN,
       WEBSOCKET_CONNECTIONS, WEBSOCKET_CLOSES)


def render_all() -> str:
    lines: list[str] = []
    for metric in ALL:
        lines.extend(metric.render())
    return "\n".join(lines) + "\n"
