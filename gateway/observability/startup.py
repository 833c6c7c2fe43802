"""What a process of ``loopgate serve`` sets up once: its logging (and access records) and its tracer.

``configure_logging`` is called by the CLI (and again in each worker process); ``install_tracer``
by each worker's lifespan, which owns the exporter process it may start.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from gateway.observability import access_log, tracing
from gateway.observability.logs import FORMAT, JsonFormatter, SafeFormatter

if TYPE_CHECKING:
    from gateway.config.observability_section import ObservabilityConfig


def configure_logging(level: str, kind: str = "text", access: bool = False) -> None:
    """Root logging for ``loopgate serve`` (and each worker process): one safe handler on stderr.

    ``kind``: ``logging.format`` (text, json); ``access``: ``logging.access`` (one record per request)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if kind == "json" else SafeFormatter(FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # Neither format shows thread or process names: LogRecord need not look them up for every record.
    logging.logThreads = False
    logging.logMultiprocessing = False
    enabled = access and logging.getLogger("loopgate.access").isEnabledFor(logging.INFO)
    access_log.install(access_log.AccessLog(handler, kind) if enabled else None)


def install_tracer(config: ObservabilityConfig) -> tracing.Tracer:
    """Pick the process's tracer (``tracing.TRACER``) at start-up; each worker process calls it in its lifespan.

    Without ``observability.otlp_endpoint``: the tracer that starts no span. With it, the worker
    records spans itself (``gateway/observability/recorder.py``) and starts its exporter process
    (``gateway/observability/shipper.py``), which alone imports the OpenTelemetry SDK.
    """
    if config.otlp_endpoint is None:
        tracing.TRACER = tracing.Tracer()
        return tracing.TRACER
    from importlib import metadata

    for package in ("opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"):
        try:
            metadata.version(package)  # looked up, not imported: the exporter process imports it
        except metadata.PackageNotFoundError as exc:
            raise RuntimeError("observability.otlp_endpoint is set but the OpenTelemetry SDK is not installed: "
                               "pip install 'loopgate[otel]'") from exc
    from gateway.observability.recorder import LeanTracer
    from gateway.observability.shipper import Shipper

    shipper = Shipper(config)
    tracing.TRACER = LeanTracer(config, shipper.submit, shipper.close)
    return tracing.TRACER
