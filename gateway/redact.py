"""Configured secrets, kept out of everything a caller or a log reader sees.

Some providers (and proxies in front of them) echo the request in an error body: headers, the
API key, a tool's bearer token. Every configured secret is therefore replaced by ``[redacted]``
wherever upstream text leaves the gateway: an upstream error turned into a client error
(``errors.from_upstream``, the interrupted-stream error), a server tool's result, and every
log line (``gateway/observability/logs.py``).

The secret set is built once per process at start-up (``Runtime.start`` installs it): logging
is process-wide, so the set it reads is too. Values shorter than ``MIN_SECRET_CHARS`` are not
treated as secrets: a header such as ``x-tier: pro`` would otherwise blank ordinary words
out of every message, and no credential is that short.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from urllib.parse import unquote, urlsplit

from gateway.config.model import Config

MIN_SECRET_CHARS = 8
REDACTED = "[redacted]"


class Redactor:
    __slots__ = ("_pattern",)

    def __init__(self, secrets: Iterable[str]) -> None:
        unique = sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True)
        # One alternation, longest first, compiled once: a scrub is a single regex pass.
        self._pattern = re.compile("|".join(map(re.escape, unique))) if unique else None

    @classmethod
    def from_config(cls, config: Config) -> Redactor:
        return cls(_config_secrets(config))

    def __bool__(self) -> bool:
        return self._pattern is not None

    def scrub(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(REDACTED, text)


def _config_secrets(config: Config) -> Iterator[str]:
    """Provider keys and header values, HTTP tool headers, MCP server headers and environment values,
    the store's passwords (Redis: in the URL, ``store.password``, ``store.sentinel.password``),
    webhook URLs and signing secrets (``notifications.webhooks``), and the sealing keys."""
    store = config.store
    in_url = urlsplit(store.url).password or ""
    for secret in (store.password, store.sentinel.password if store.sentinel else None, in_url, unquote(in_url)):
        if secret:
            yield secret
    for provider in config.providers.values():
        yield provider.api_key
        yield from header_secrets(provider.headers.values())
    for tool in config.tools.values():
        if tool.http is not None:
            yield from header_secrets(tool.http.headers.values())
    yield from header_secrets(config.observability.headers.values())
    for server in config.mcp_servers.values():
        yield from header_secrets(server.headers.values())
        yield from server.env.values()
    for hook in config.notifications.webhooks:
        yield hook.secret
        yield from url_secrets(hook.url)
    yield from config.responses.sealing_keys


def url_secrets(url: str) -> Iterator[str]:
    """A URL that is itself a credential (a Slack or Teams webhook's path is its token), in every form
    a log line may quote it: as configured, percent-decoded, and its path and query alone (a proxy or
    receiver echoing its request line quotes just those), plus a password in it."""
    parts = urlsplit(url)
    tail = parts.path + (f"?{parts.query}" if parts.query else "")
    for form in (url, tail, parts.password or ""):
        if form:
            yield form
            yield unquote(form)


def header_secrets(values: Iterable[str]) -> Iterator[str]:
    """A header value, and its credential alone (``Bearer TOKEN`` is often echoed as just ``TOKEN``)."""
    for value in values:
        yield value
        _, _, credential = value.strip().partition(" ")
        if credential:
            yield credential.strip()


_installed = Redactor(())


def install(redactor: Redactor) -> None:
    """Make ``redactor`` the process's secret set (called once at start-up)."""
    global _installed
    _installed = redactor


def scrub(text: str) -> str:
    """``text`` with every installed secret replaced by ``[redacted]``."""
    return _installed.scrub(text)
