"""``loopgate serve`` and ``loopgate check-config`` (also ``python -m gateway``)."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import tempfile
from typing import Any

from gateway import __version__
from gateway.config import DEFAULT_PATH, ConfigError, load_config
from gateway.config.model import Config
from gateway.config.validate import deadline_warnings
from gateway.observability import metrics_shared, startup


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loopgate", description="OpenAI-compatible gateway with a server-side "
                                     "tool loop, failover and resumable continuations.")
    parser.add_argument("--version", action="version", version=f"loopgate {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    config_help = f"config file (default: $LOOPGATE_CONFIG, else {DEFAULT_PATH})"
    serve = commands.add_parser("serve", help="run the gateway")
    serve.add_argument("--config", help=config_help)
    serve.add_argument("--host", help="bind address (default: server.host)")
    serve.add_argument("--port", type=int, help="port (default: server.port)")
    serve.add_argument("--workers", type=int, help="worker processes (default: server.workers)")
    serve.add_argument("--log-level", default=os.environ.get("LOOPGATE_LOG_LEVEL"),
                       choices=["critical", "error", "warning", "info", "debug"],
                       help="log level (default: $LOOPGATE_LOG_LEVEL, else logging.level, else info)")
    check = commands.add_parser("check-config", help="validate a config file and exit")
    check.add_argument("--config", help=config_help)
    return parser


def _app_factory():
    from gateway.api.app import create_app

    # A worker process starts with no logging set up: the same safe handler as a single process.
    config = load_config(os.environ.get("LOOPGATE_CONFIG"))
    _configure_logs(config, os.environ.get("LOOPGATE_LOG_LEVEL"))
    return create_app(config, serving=True)


def _configure_logs(config: Config, level: str | None) -> str:
    """Set up logging from ``--log-level`` (or the environment) over ``logging.level``; return the level."""
    level = level or config.logging.level or "info"
    startup.configure_logging(level, config.logging.format, config.logging.access)
    return level


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"loopgate: config error: {exc}", file=sys.stderr)
        return 2
    if args.command == "check-config":
        print(f"config OK: {len(config.providers)} providers, {len(config.models)} models, "
              f"{len(config.tools)} tools, store {config.store.kind}")
        for warning in deadline_warnings(config):
            print(f"loopgate: warning: {warning}", file=sys.stderr)
        return 0

    import uvicorn

    from gateway.api.app import create_app
    from gateway.api.errors import protocol_error_body
    from gateway.http.server_protocol import ServerLimits, protocol_factory

    log_level = _configure_logs(config, args.log_level)
    host = args.host or config.server.host
    port = args.port if args.port is not None else config.server.port
    workers = args.workers or config.server.workers
    # httptools with a bounded head and read timeouts (gateway/http/server_protocol.py); no WebSocket
    # endpoint exists, so upgrade requests are never handed to a WebSocket protocol. log_config None:
    # uvicorn's own records go to the root handler above, escaped and redacted like ours.
    server = config.server
    limits = ServerLimits(server.max_header_bytes, server.header_timeout_s, server.body_timeout_s)
    common: dict[str, Any] = {
              "host": host, "port": port, "loop": "uvloop", "http": protocol_factory(limits, protocol_error_body),
              "timeout_keep_alive": config.server.keepalive_timeout_s, "log_level": log_level,
              "log_config": None, "access_log": False, "lifespan": "on", "timeout_graceful_shutdown": 30,
              "ws": "none",
              # No client-address rewriting or Server header: neither is used, both cost per request.
              "proxy_headers": False, "server_header": False}
    if workers > 1 and config.store.kind == "memory":
        logging.getLogger("loopgate").warning(
            "%d workers with the memory:// store: each worker keeps its own continuations and circuit "
            "state, so a resume that reaches another worker finds nothing. Use a redis:// store.", workers)
    # Bound before anything starts (store, webhook worker, key sync): a port in use is one clear
    # line and a non-zero status, not a started-then-stopped gateway.
    try:
        listener = _listen(host, port)
    except OSError as exc:
        print(f"loopgate: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    if workers > 1:
        listener.close()  # the supervisor binds it again at once, before any worker starts
        # Worker processes re-import the app: hand them the config path through the environment.
        if args.config:
            os.environ["LOOPGATE_CONFIG"] = os.path.abspath(args.config)
        os.environ["LOOPGATE_LOG_LEVEL"] = log_level
        # Each worker publishes its metrics there; any worker's scrape sums them
        # (gateway/observability/metrics_shared.py).
        with tempfile.TemporaryDirectory(prefix="loopgate-metrics-") as directory:
            os.environ[metrics_shared.ENV] = directory
            uvicorn.run("gateway.cli:_app_factory", factory=True, workers=workers, **common)
        return 0
    server_ = uvicorn.Server(uvicorn.Config(create_app(config, serving=True), **common))
    server_.run(sockets=[listener])
    if not server_.started:  # the application failed to start (logged by uvicorn)
        print("loopgate: the gateway failed to start (see the log above)", file=sys.stderr)
        return 3
    return 0


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound as uvicorn binds it (``SO_REUSEADDR``, IPv6 for an address with a colon)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock
