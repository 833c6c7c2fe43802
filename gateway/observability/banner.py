"""The lines ``loopgate serve`` logs once it is up: what it serves, from where, and where to look next.

A first run should not need the config open beside it to know which routes exist, which
providers will fail for want of a key, whether callers need a key, and where the inbox, the
metrics and the API description are. Nothing secret is shown: the store's address loses its
credentials, and providers are named, never their keys.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from gateway.config.model import Config

#: provider types that call a remote API with a key (``mock`` needs none)
KEYED_TYPES = frozenset({"openai", "openai_responses", "anthropic", "gemini", "litellm"})
#: addresses that mean "every interface": the banner shows a URL one can open instead
_ANY = {"0.0.0.0", "::", ""}


def base_url(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in _ANY else host
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


def store_address(config: Config) -> str:
    """``store.url`` without user, password or query: the scheme, host and database are what one checks."""
    store = config.store
    if store.sentinel is not None:
        nodes = ", ".join(f"{host}:{port}" for host, port in store.sentinel.nodes)
        return f"redis sentinel (master {store.sentinel.master} via {nodes})"
    if store.kind == "memory":
        return "memory:// (in this process: paused loops are lost on restart)"
    parts = urlsplit(store.url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return f"{parts.scheme}://{netloc}{parts.path}"


def counted(number: int, noun: str) -> str:
    """``1 admin key``, ``2 admin keys``: the banner is read by people."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


def keyless_providers(config: Config) -> list[str]:
    return [name for name, provider in config.providers.items()
            if provider.type in KEYED_TYPES and not provider.api_key]


def banner(config: Config, version: str, host: str, port: int, source: Path, packaged: bool,
           workers: int = 1) -> list[str]:
    """The start-up banner, one log line per item."""
    url = base_url(host, port)
    where = "every interface" if host in _ANY else host
    origin = "the packaged starting config (no config file found)" if packaged else str(source)
    lines = [f"Loopgate {version} listening on {url} ({where}, {workers} worker{'s' if workers != 1 else ''}); "
             f"config: {origin}",
             f"store: {store_address(config)}"]
    for name, route in config.models.items():
        targets = ", ".join(f"{t.provider}/{t.model}" for t in route.targets)
        tools = f" (tools: {', '.join(route.tools)})" if route.tools else ""
        lines.append(f"route {name} -> {targets}{tools}")
    missing = keyless_providers(config)
    if missing:
        lines.append(f"providers without a key (their calls fail with auth): {', '.join(missing)}")
    if config.auth.enabled:
        lines.append(f"auth: on ({counted(len(config.auth.keys), 'key')} in the config, "
                     f"{counted(len(config.auth.admin_keys), 'admin key')})")
    else:
        lines.append("auth: OFF (no keys configured: any string works as a key; development only)")
    lines.append(console_line(config, url))
    lines.append(f"approvals inbox: {url}/ui/approvals | metrics: {url}/metrics | "
                 f"API description (OpenAPI): {url}/openapi.json | readiness: {url}/readyz")
    return lines


def console_line(config: Config, url: str) -> str:
    """Where the console is, and whether it opens: it needs an admin key (``auth.admin_keys``)."""
    admins = len(config.auth.admin_keys)
    if admins:
        return f"console: {url}/ui/ (on: sign in with an admin key; {admins} configured)"
    return f"console: {url}/ui/ (off: set auth.admin_keys to enable it)"
