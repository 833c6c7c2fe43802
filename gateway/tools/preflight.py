"""What ``loopgate serve`` would find wrong at start-up, found before it starts (and by ``check-config``).

Parsing a config checks its shape; this runs the checks that need the machine: each Python tool's
module imported and its callable found, each stdio MCP server's command on PATH, the store's TLS
files loaded, the OpenTelemetry SDK installed when traces are on. Each problem is a ``ConfigError``
naming the key to fix, so ``check-config`` passing means ``serve`` gets past these, and ``serve``
fails on them in one line.
"""

from __future__ import annotations

import os
import shutil
import ssl
from importlib import metadata
from pathlib import Path

from gateway.config.checks import ConfigError
from gateway.config.model import Config
from gateway.tools.python_source import ToolTargetError, add_import_paths, resolve

#: what ``observability.otlp_endpoint`` needs installed (``pip install 'loopgate[otel]'``)
OTEL_PACKAGES = ("opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http")


def tool_import_paths(config_path: Path | None) -> list[Path]:
    """The directories Python tools import from: the config file's own, then the working directory."""
    paths = [config_path.resolve().parent] if config_path is not None else []
    return [*paths, Path.cwd()]


def preflight(config: Config, config_path: Path | None) -> list[ConfigError]:
    """Every start-up problem of ``config`` (loaded from ``config_path``; None: not from a file)."""
    add_import_paths(*tool_import_paths(config_path))
    problems: list[ConfigError] = []
    for name, tool in config.tools.items():
        if tool.python is None:
            continue
        try:
            resolve(name, tool.python)
        except ToolTargetError as exc:
            problems.append(ConfigError(exc.key, exc.problem))
    for name, server in config.mcp_servers.items():
        if server.command and not _runnable(server.command[0], server.env.get("PATH")):
            problems.append(ConfigError(f"mcp_servers.{name}.command",
                                        f"'{server.command[0]}' is not an executable on PATH"))
    problems.extend(_tls_problems(config))
    if config.observability.otlp_endpoint is not None:
        for package in OTEL_PACKAGES:
            try:
                metadata.version(package)
            except metadata.PackageNotFoundError:
                problems.append(ConfigError("observability.otlp_endpoint", f"is set but {package} is not "
                                            "installed: pip install 'loopgate[otel]'"))
                break
    return problems


def _tls_problems(config: Config) -> list[ConfigError]:
    """The store's TLS files loaded as the store will load them: a file that exists but holds no certificate
    (or a key that does not match) would otherwise only show as a store that never answers."""
    tls = config.store.tls
    if tls is None:
        return []
    context = ssl.create_default_context()
    problems = []
    if tls.ca_file is not None:
        try:
            context.load_verify_locations(cafile=tls.ca_file)
        except (ssl.SSLError, OSError) as exc:
            problems.append(ConfigError("store.tls.ca_file", f"not a usable CA certificate file: {_reason(exc)}"))
    if tls.cert_file is not None and tls.key_file is not None:
        try:
            context.load_cert_chain(tls.cert_file, tls.key_file)
        except (ssl.SSLError, OSError) as exc:
            problems.append(ConfigError("store.tls.cert_file", f"the certificate and key_file do not load together: "
                                        f"{_reason(exc)}"))
    return problems


def _reason(exc: BaseException) -> str:
    return " ".join(str(getattr(exc, "reason", None) or exc).split())


def _runnable(command: str, search: str | None) -> bool:
    """``search``: the server's own ``env.PATH`` when it sets one (its process is started with it)."""
    if os.sep in command:
        return os.path.isfile(command) and os.access(command, os.X_OK)
    return shutil.which(command, path=search) is not None
