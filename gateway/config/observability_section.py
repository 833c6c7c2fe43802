"""The ``logging`` and ``observability`` sections: log format and access records, OpenTelemetry export.

Both are optional. Without ``observability.otlp_endpoint`` no tracing code is imported and no
span is built (``gateway/observability/tracing.py``); without ``logging.access`` no access record is built.
With it, each worker starts an exporter process; the bounds below cap what a worker holds for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlparse

from gateway.config.checks import ConfigError, get, header_map, mapping

LOGGING_KEYS = {"format", "level", "access"}
OBSERVABILITY_KEYS = {"otlp_endpoint", "headers", "sample_ratio", "capture_content", "propagate_to_providers",
                      "service_name", "max_buffered_spans", "max_frame_bytes", "shutdown_timeout_s",
                      "rollups"}
ROLLUP_KEYS = {"enabled", "resolution_s", "retention_s"}
LEVELS = ("critical", "error", "warning", "info", "debug")


@dataclass(frozen=True, slots=True)
class LoggingConfig:
    format: Literal["text", "json"] = "text"
    # None: ``--log-level`` / ``$LOOPGATE_LOG_LEVEL`` / ``info`` decide.
    level: str | None = None
    # One record per request on the ``loopgate.access`` logger (off by default: it costs a write per request).
    access: bool = False


@dataclass(frozen=True, slots=True)
class RollupConfig:
    """The console's time series (``gateway/observability/rollups.py``): one record per replica per interval."""
    enabled: bool = True
    # Seconds between records: the charts' resolution (and the most a replica's numbers lag).
    resolution_s: float = 10.0
    # How long records are kept: the longest window the overview can show.
    retention_s: float = 3600.0


@dataclass(frozen=True, slots=True)
class ObservabilityConfig:
    # The collector's base URL (``http://otel-collector:4318``); spans are posted to ``/v1/traces``.
    otlp_endpoint: str | None = None
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    sample_ratio: float = 1.0
    capture_content: bool = False
    propagate_to_providers: bool = False
    service_name: str = "loopgate"
    # Spans waiting in a worker for its exporter process (gateway/observability/shipper.py); beyond it a
    # request's spans are dropped and counted in ``loopgate_trace_spans_dropped_total``.
    max_buffered_spans: int = 10_000
    # The largest frame sent to the exporter process; a request whose spans alone are larger is dropped.
    max_frame_bytes: int = 4 << 20
    # At shutdown: how long the exporter process may take to post what it holds before it is killed.
    shutdown_timeout_s: float = 5.0
    rollups: RollupConfig = field(default_factory=RollupConfig)

    @property
    def tracing(self) -> bool:
        return self.otlp_endpoint is not None


def logging_section(raw: Any) -> LoggingConfig:
    section = mapping(raw, "logging", LOGGING_KEYS)
    kind = get(section, "format", "logging", str, "text")
    if kind not in ("text", "json"):
        raise ConfigError("logging.format", f"must be 'text' or 'json', got '{kind[:40]}'")
    level = get(section, "level", "logging", str, None)
    if level is not None and level.lower() not in LEVELS:
        raise ConfigError("logging.level", f"must be one of {', '.join(LEVELS)}, got '{level[:40]}'")
    return LoggingConfig(format=kind, level=level.lower() if level else None,
                         access=get(section, "access", "logging", bool, False))


def observability_section(raw: Any) -> ObservabilityConfig:
    section = mapping(raw, "observability", OBSERVABILITY_KEYS)
    # An empty value (an unset environment variable) means "not configured".
    endpoint = get(section, "otlp_endpoint", "observability", str, "") or None
    if endpoint is not None:
        parsed = urlparse(endpoint)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError("observability.otlp_endpoint", "must be an http:// or https:// base URL "
                              "(the collector's, e.g. http://otel-collector:4318)")
        endpoint = endpoint.rstrip("/")
    ratio = get(section, "sample_ratio", "observability", float, 1.0)
    if not 0.0 <= ratio <= 1.0:
        raise ConfigError("observability.sample_ratio", f"must be between 0 and 1, got {ratio}")
    service = get(section, "service_name", "observability", str, "loopgate")
    if not service or len(service) > 100:
        raise ConfigError("observability.service_name", "must be 1 to 100 characters")
    return ObservabilityConfig(
        otlp_endpoint=endpoint,
        headers=header_map(section.get("headers"), "observability.headers"),
        sample_ratio=ratio,
        capture_content=get(section, "capture_content", "observability", bool, False),
        propagate_to_providers=get(section, "propagate_to_providers", "observability", bool, False),
        service_name=service,
        max_buffered_spans=_bounded(section, "max_buffered_spans", int, 10_000, 1, 10_000_000),
        max_frame_bytes=_bounded(section, "max_frame_bytes", int, 4 << 20, 64 << 10, 64 << 20),
        shutdown_timeout_s=_bounded(section, "shutdown_timeout_s", float, 5.0, 0.1, 600.0),
        rollups=_rollups(section.get("rollups")),
    )


def _rollups(raw: Any) -> RollupConfig:
    section = mapping(raw, "observability.rollups", ROLLUP_KEYS)
    resolution = _bounded(section, "resolution_s", float, 10.0, 1.0, 3600.0, "observability.rollups")
    retention = _bounded(section, "retention_s", float, 3600.0, 60.0, 7 * 86400.0, "observability.rollups")
    if retention < 2 * resolution:
        raise ConfigError("observability.rollups.retention_s", f"must hold at least two intervals of "
                          f"resolution_s ({resolution:g} s), got {retention:g}")
    return RollupConfig(enabled=get(section, "enabled", "observability.rollups", bool, True),
                        resolution_s=resolution, retention_s=retention)


def _bounded(section: dict[str, Any], key: str, kind: type, default: float, low: float, high: float,
             where: str = "observability") -> Any:
    value = get(section, key, where, kind, default)
    if not low <= value <= high:
        raise ConfigError(f"{where}.{key}", f"must be between {low:g} and {high:g}, got {value}")
    return value
