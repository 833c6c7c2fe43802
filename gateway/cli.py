"""``loopgate serve``, ``loopgate check-config`` and ``loopgate init`` (also ``python -m gateway``)."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

from gateway import __version__
from gateway.config import DEFAULT_PATH, INIT_NAME, PACKAGED_PATH, ConfigError, find_config, load_config
from gateway.config.model import Config
from gateway.config.validate import deadline_warnings, shared_stdio_warnings
from gateway.observability import metrics_shared, startup

log = logging.getLogger("loopgate")

#: the exit status of every config or start-up failure (argparse uses it for usage errors too)
EXIT_CONFIG = 2
#: uvicorn's exit status when the app's lifespan failed to start
_UVICORN_STARTUP_FAILURE = 3
_DEBUG_ENV = "LOOPGATE_DEBUG"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loopgate", description="OpenAI-compatible gateway with a server-side "
                                     "tool loop, failover and resumable continuations.")
    parser.add_argument("--version", action="version", version=f"loopgate {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    config_help = (f"config file (default: $LOOPGATE_CONFIG, else {DEFAULT_PATH}, else ./{INIT_NAME}, else the "
                   "packaged starting config)")
    debug_help = "show the traceback of a start-up failure (default: one line naming the config key)"
    serve = commands.add_parser("serve", help="run the gateway")
    serve.add_argument("--config", help=config_help)
    serve.add_argument("--host", help="bind address (default: server.host)")
    serve.add_argument("--port", type=int, help="port (default: server.port)")
    serve.add_argument("--workers", type=int, help="worker processes (default: server.workers)")
    serve.add_argument("--log-level", default=os.environ.get("LOOPGATE_LOG_LEVEL"),
                       choices=["critical", "error", "warning", "info", "debug"],
                       help="log level (default: $LOOPGATE_LOG_LEVEL, else logging.level, else info)")
    serve.add_argument("--debug", action="store_true", help=debug_help)
    check = commands.add_parser("check-config", help="validate a config file, import its tools and exit")
    check.add_argument("--config", help=config_help)
    check.add_argument("--debug", action="store_true", help=debug_help)
    init = commands.add_parser("init", help=f"write a commented starting config, DIR/{INIT_NAME}")
    init.add_argument("directory", nargs="?", default=".", metavar="DIR", help="where to write it (default: .)")
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    return parser


def _app_factory():
    """Each worker of ``--workers N`` builds its app here (uvicorn re-imports it in a new process)."""
    from gateway.api.app import create_app
    from gateway.tools.preflight import tool_import_paths
    from gateway.tools.python_source import add_import_paths

    # A worker process starts with no logging set up: the same safe handler as a single process.
    source = find_config(os.environ.get("LOOPGATE_CONFIG"))
    config = load_config(source)
    add_import_paths(*tool_import_paths(None if source == PACKAGED_PATH else source))
    _configure_logs(config, os.environ.get("LOOPGATE_LOG_LEVEL"), bool(os.environ.get(_DEBUG_ENV)))
    return create_app(config, serving=True, debug=bool(os.environ.get(_DEBUG_ENV)))


def _configure_logs(config: Config, level: str | None, debug: bool = False) -> str:
    """Set up logging from ``--log-level`` (or the environment) over ``logging.level``; return the level."""
    level = level or config.logging.level or "info"
    startup.configure_logging(level, config.logging.format, config.logging.access)
    if not debug:
        # The one-line reason is logged just before it (gateway/api/startup_failure.py).
        logging.getLogger("uvicorn.error").addFilter(_drop_startup_failed_notice)
    return level


def _drop_startup_failed_notice(record: logging.LogRecord) -> bool:
    return record.getMessage() != "Application startup failed. Exiting."


def _error(text: str) -> None:
    print(f"loopgate: {text}", file=sys.stderr)


def init_config(directory: str, force: bool) -> int:
    """``loopgate init [DIR]``: the packaged starting config, written to edit (never over a file without --force)."""
    target = Path(directory) / INIT_NAME
    if target.exists() and not force:
        _error(f"{target} already exists; use --force to overwrite it")
        return 1
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(PACKAGED_PATH.read_text(encoding="utf-8"), encoding="utf-8")
    except OSError as exc:
        _error(f"cannot write {target}: {exc.strerror or exc}")
        return 1
    config_arg = "" if Path(directory).resolve() == Path.cwd() else f" --config {target}"
    print(f"wrote {target}: route 'demo' answers with no key; export OPENAI_API_KEY, ANTHROPIC_API_KEY or "
          f"GEMINI_API_KEY for the others.\nnext: loopgate check-config{config_arg} && loopgate serve{config_arg}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "init":
        return init_config(args.directory, args.force)
    try:
        return _checked(args)
    except Exception as exc:  # a start-up failure nothing else named: still one line, unless --debug
        if args.debug:
            raise
        from gateway.api.startup_failure import describe

        _error(f"start-up failed: {describe(exc)} (--debug shows the traceback)")
        return EXIT_CONFIG


def _checked(args: argparse.Namespace) -> int:
    """Load the config and run every check ``serve`` would make (``check-config`` stops there)."""
    from gateway.tools.preflight import preflight

    source = find_config(args.config)
    # The fall-back, not a file someone named (the notice says nothing was found; imports skip the package's dir).
    packaged = source == PACKAGED_PATH and not (args.config or os.environ.get("LOOPGATE_CONFIG"))
    try:
        config = load_config(source)
    except ConfigError as exc:
        _error(f"config error: {exc}")
        return EXIT_CONFIG
    if packaged:
        _error(f"no config named or found (--config, $LOOPGATE_CONFIG, {DEFAULT_PATH}, ./{INIT_NAME}): using the "
               f"packaged starting config (keyless route 'demo'); `loopgate init` writes it to edit")
    problems = preflight(config, None if packaged else source)
    for problem in problems:
        _error(f"config error: {problem}")
    if problems:
        return EXIT_CONFIG
    if args.command == "check-config":
        print(f"config OK: {len(config.providers)} providers, {len(config.models)} models, "
              f"{len(config.tools)} tools (imported), store {config.store.kind} ({source})")
        for warning in [*deadline_warnings(config), *shared_stdio_warnings(config)]:
            _error(f"warning: {warning}")
        return 0
    return _serve(args, config, source, packaged)


def _serve(args: argparse.Namespace, config: Config, source: Path, packaged: bool) -> int:
    import uvicorn

    from gateway.api.app import create_app
    from gateway.observability.banner import banner

    log_level = _configure_logs(config, args.log_level, args.debug)
    host = args.host or config.server.host
    port = args.port if args.port is not None else config.server.port
    workers = args.workers or config.server.workers
    lines = banner(config, __version__, host, port, source, packaged, workers)
    for warning in shared_stdio_warnings(config):
        log.warning("%s", warning)
    settings = _uvicorn_settings(config, host, port, log_level)
    if workers > 1 and config.store.kind == "memory":
        log.warning(
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
        return _serve_workers(args, source, log_level, workers, lines, settings)

    def announce() -> None:
        for line in lines:
            log.info("%s", line)

    app = create_app(config, serving=True, debug=args.debug, on_ready=announce)
    server_ = uvicorn.Server(uvicorn.Config(app, **settings))
    try:
        server_.run(sockets=[listener])
    except SystemExit as exc:
        return _startup_failed(exc)
    return 0 if server_.started else EXIT_CONFIG


#: the WebSocket protocol class, by name (``--workers N`` hands the settings to new processes)
_WS_PROTOCOL = "gateway.http.websocket_server:WebSocketServerProtocol"


def _uvicorn_settings(config: Config, host: str, port: int, log_level: str) -> dict[str, Any]:
    """What one process and every worker run with.

    httptools with a bounded head and read timeouts (gateway/http/server_protocol.py). The WebSocket
    mode of ``/v1/responses`` (``websocket.enabled``) runs on uvicorn's sans-I/O ``websockets``
    protocol (gateway/http/websocket_server.py, named so that it pickles into workers), which refuses
    a message past ``websocket.max_message_bytes`` from its frame header (close code 1009, nothing
    buffered; a compressed one by its inflated size); off, upgrade requests are never handed to a
    WebSocket protocol. log_config None: uvicorn's own records go to the root handler, escaped and
    redacted like ours.
    """
    from gateway.api.request.errors import protocol_error_body
    from gateway.http.server_protocol import ServerLimits, protocol_factory

    server, sockets = config.server, config.websocket
    limits = ServerLimits(server.max_header_bytes, server.header_timeout_s, server.body_timeout_s)
    return {"host": host, "port": port, "loop": "uvloop", "http": protocol_factory(limits, protocol_error_body),
            "timeout_keep_alive": server.keepalive_timeout_s, "log_level": log_level,
            "log_config": None, "access_log": False, "lifespan": "on", "timeout_graceful_shutdown": 30,
            "ws": _WS_PROTOCOL if sockets.enabled else "none", "ws_max_size": sockets.max_message_bytes,
            "ws_ping_interval": sockets.ping_interval_s or None, "ws_ping_timeout": sockets.ping_timeout_s,
            "ws_per_message_deflate": sockets.compression,
            # No client-address rewriting or Server header: neither is used, both cost per request.
            "proxy_headers": False, "server_header": False}


def _serve_workers(args: argparse.Namespace, source: Path, log_level: str, workers: int, lines: list[str],
                   settings: dict[str, Any]) -> int:
    """``--workers N``: uvicorn's supervisor, each worker building its app in ``_app_factory``."""
    import uvicorn

    # Worker processes re-import the app: hand them the config path through the environment.
    os.environ["LOOPGATE_CONFIG"] = os.path.abspath(source)
    os.environ["LOOPGATE_LOG_LEVEL"] = log_level
    if args.debug:
        os.environ[_DEBUG_ENV] = "1"
    for line in lines:
        log.info("%s", line)
    # Each worker publishes its metrics there; any worker's scrape sums them
    # (gateway/observability/metrics_shared.py).
    try:
        with tempfile.TemporaryDirectory(prefix="loopgate-metrics-") as directory:
            os.environ[metrics_shared.ENV] = directory
            uvicorn.run("gateway.cli:_app_factory", factory=True, workers=workers, **settings)
    except SystemExit as exc:
        return _startup_failed(exc)
    return 0


def _startup_failed(exc: SystemExit) -> int:
    """uvicorn's exit when the lifespan failed: already logged in one line naming its key
    (api/startup_failure.py), so the status is the config failure's; any other exit goes on."""
    if exc.code == _UVICORN_STARTUP_FAILURE:
        return EXIT_CONFIG
    raise exc


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
