"""Tools served by HTTP endpoints: POST the arguments as JSON, the response body is the result.

All HTTP tools share one pooled ``aiohttp.ClientSession`` (connection reuse matters when a
turn fires several calls at the same service). The session is passed in by whoever owns the
process's sessions; only when none is given does the source create, and then close, its own.
Requests go through the egress proxy the environment names, exactly as provider calls do
(``gateway.upstream.proxy``; loopback stays direct).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any

import aiohttp
import orjson
from multidict import CIMultiDict

from gateway.config.tools_section import ToolConfig
from gateway.observability import tracing
from gateway.tools.base import ToolFailure, ToolSpec, resolve_approval
from gateway.tools.bounded import read_bounded
from gateway.upstream.errors import ProviderError
from gateway.upstream.proxy import ClientProxy, client_proxy, environment_proxies

log = logging.getLogger("loopgate.tools")

# The executor enforces each tool's timeout; per request we switch off the session's own
# defaults (aiohttp: 300 s total) so that a tool configured for longer is not cut short.
_NO_TIMEOUT = aiohttp.ClientTimeout()
_BODY_EXCERPT = 500


class HttpToolSource:
    """Every ``http:`` tool of the config, behind one source named ``http``."""

    def __init__(self, tools: Iterable[ToolConfig], session: aiohttp.ClientSession | None = None,
                 name: str = "http", proxies: Mapping[str, str] | None = None) -> None:
        self._name = name
        self._specs: list[ToolSpec] = []
        self._endpoints: dict[str, tuple[str, CIMultiDict[str], dict[str, Any]]] = {}
        self._unreachable: dict[str, str] = {}  # tool -> why its proxy cannot be used
        proxies = environment_proxies() if proxies is None else proxies
        for cfg in tools:
            if cfg.http is None:
                raise ValueError(f"tool '{cfg.name}' has no 'http' section")
            headers: CIMultiDict[str] = CIMultiDict({"Content-Type": "application/json"})
            headers.update(cfg.http.headers)  # case-insensitive: a configured Content-Type wins
            try:
                route = client_proxy(cfg.http.url, proxies)
            except ProviderError as exc:  # never sent direct when the environment demands a proxy
                log.error("tool %s: %s", cfg.name, exc.message)
                self._unreachable[cfg.name] = exc.message
                route = ClientProxy()
            headers.update(route.headers)
            self._endpoints[cfg.name] = (cfg.http.url, headers, route.options)
            self._specs.append(ToolSpec(cfg.name, cfg.description, cfg.parameters,
                                        resolve_approval(cfg.approval), cfg.timeout_s, name,
                                        cfg.approval_timeout_s))
        self._session = session
        self._owns_session = session is None

    @property
    def name(self) -> str:
        return self._name

    async def list_tools(self) -> list[ToolSpec]:
        return list(self._specs)

    def _client(self) -> aiohttp.ClientSession:
        # Created lazily, inside the running loop, and only if no shared session was given.
        if self._session is None or (self._owns_session and self._session.closed):
            self._session = aiohttp.ClientSession(timeout=_NO_TIMEOUT)
            self._owns_session = True
        return self._session

    async def call(self, tool: str, arguments: dict[str, Any]) -> str:
        try:
            url, headers, proxy = self._endpoints[tool]
        except KeyError:
            raise ToolFailure(f"Unknown tool {tool}") from None
        if tool in self._unreachable:
            raise ToolFailure(f"Cannot reach the {tool} service: its egress proxy is misconfigured")
        body = orjson.dumps(arguments)
        traceparent = tracing.OUTGOING.get()  # set by the tool's span when tracing is on
        if traceparent is not None:
            headers = CIMultiDict(headers)
            headers["traceparent"] = traceparent
        try:
            async with self._client().post(url, data=body, headers=headers, timeout=_NO_TIMEOUT, **proxy) as resp:
                text = (await read_bounded(resp, f"the {tool} service")).decode("utf-8", "replace")
                status = resp.status
        except aiohttp.ClientConnectorError as exc:
            # The URL stays in the log: it is operator knowledge, not something the model needs.
            log.warning("tool %s: cannot connect to %s: %s", tool, url, exc)
            raise ToolFailure(f"Could not connect to the {tool} service ({_reason(exc)})") from None
        except aiohttp.ClientError as exc:
            log.warning("tool %s: request to %s failed: %r", tool, url, exc)
            raise ToolFailure(f"Request to {tool} failed ({type(exc).__name__}: {exc})") from None
        except TimeoutError:
            # Only a session-level timeout lands here; the executor's timeout arrives as a cancellation.
            log.warning("tool %s: request to %s timed out (session timeout)", tool, url)
            raise ToolFailure(f"Request to {tool} timed out") from None
        if not 200 <= status < 300:
            detail = f": {text[:_BODY_EXCERPT]}" if text else ""
            raise ToolFailure(f"HTTP {status} from {tool}{detail}")
        return text

    async def aclose(self) -> None:
        if self._owns_session and self._session is not None and not self._session.closed:
            await self._session.close()


def _reason(exc: aiohttp.ClientConnectorError) -> str:
    """A short cause without host or port: "Connection refused", "Name or service not known"."""
    err = exc.os_error
    if err.errno is not None and err.errno > 0:
        return os.strerror(err.errno)
    return err.strerror or type(exc).__name__
