"""Egress proxies for upstream calls: ``HTTPS_PROXY`` / ``HTTP_PROXY`` / ``ALL_PROXY`` / ``NO_PROXY``.

Platform teams often may reach model providers only through an egress proxy. The variables
are read once at start-up (``urllib``'s reading of them, the convention curl, requests, httpx
and the OpenAI SDKs follow). HTTPS origins go through a ``CONNECT`` tunnel, so TLS stays end
to end with the provider; plain-HTTP origins are sent to the proxy in absolute form. Loopback
origins never use a proxy: a proxy cannot reach this machine's loopback. HTTP tools and MCP
servers (aiohttp) follow the same rules through ``client_proxy``.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import socket
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from gateway.upstream.errors import ErrorClass, ProviderError

_MAX_REPLY_HEAD = 16 * 1024


@dataclass(frozen=True, slots=True)
class Proxy:
    host: str
    port: int
    authorization: str | None  # a Proxy-Authorization value, from credentials in the proxy URL


def environment_proxies() -> dict[str, str]:
    """``{"https": url, "http": url, "all": url, "no": "host,.domain"}`` from the environment."""
    return urllib.request.getproxies_environment()


def parse_proxy(url: str) -> Proxy:
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme != "http" or not parts.hostname:
        raise ProviderError(ErrorClass.CONNECTION, f"unsupported proxy URL {_redacted(url)!r} "
                                                   "(use http://[user:password@]host:port)")
    try:
        port = parts.port or 80
    except ValueError:
        raise ProviderError(ErrorClass.CONNECTION, f"invalid port in proxy URL {_redacted(url)!r}") from None
    authorization = None
    if parts.username is not None:
        credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        authorization = f"Basic {base64.b64encode(credentials).decode()}"
    return Proxy(parts.hostname, port, authorization)


def proxy_for(host: str, tls: bool, proxies: Mapping[str, str]) -> Proxy | None:
    """The proxy a request to ``host`` goes through, or None for a direct connection."""
    url = proxies.get("https" if tls else "http") or proxies.get("all")
    if not url or _is_loopback(host):
        return None
    # proxy_bypass_environment is public but missing from typeshed's stub.
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    if "no" in proxies and bypass(host, dict(proxies)):
        return None
    return parse_proxy(url)


@dataclass(frozen=True, slots=True)
class ClientProxy:
    """How a general-purpose client (aiohttp) sends a request for one URL through its proxy."""

    options: dict[str, Any] = field(default_factory=dict)  # ``proxy`` (and ``proxy_headers`` for CONNECT)
    headers: dict[str, str] = field(default_factory=dict)  # on the request itself: plain HTTP via a proxy


def client_proxy(url: str, proxies: Mapping[str, str]) -> ClientProxy:
    """The proxy settings for requests to ``url`` (nothing for a direct connection); decided once
    per URL. Credentials go on the ``CONNECT`` for HTTPS and on the request for plain HTTP, as
    for provider calls. An unusable proxy URL raises ``ProviderError``."""
    parts = urlsplit(url)
    tls = parts.scheme == "https"
    if not parts.hostname or parts.scheme not in ("http", "https"):
        return ClientProxy()
    proxy = proxy_for(parts.hostname, tls, proxies)
    if proxy is None:
        return ClientProxy()
    host = f"[{proxy.host}]" if ":" in proxy.host else proxy.host
    options: dict[str, Any] = {"proxy": f"http://{host}:{proxy.port}"}
    if proxy.authorization is None:
        return ClientProxy(options)
    credentials = {"Proxy-Authorization": proxy.authorization}
    if tls:
        options["proxy_headers"] = credentials
        return ClientProxy(options)
    return ClientProxy(options, credentials)


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _redacted(url: str) -> str:
    parts = urlsplit(url)
    return url.replace(f"{parts.password}@", "***@") if parts.password else url


class _TunnelReply(asyncio.Protocol):
    """Collects the proxy's answer to CONNECT; TLS starts on the same socket right after."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.head: asyncio.Future[bytes] = loop.create_future()
        self._buffer = b""

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if self.head.done():
            return
        if b"\r\n\r\n" in self._buffer:
            self.head.set_result(self._buffer)
        elif len(self._buffer) > _MAX_REPLY_HEAD:
            self.head.set_exception(ConnectionError("the proxy's answer to CONNECT is not HTTP"))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.head.done():
            self.head.set_exception(ConnectionResetError("the proxy closed the connection during CONNECT"))


async def open_tunnel(loop: asyncio.AbstractEventLoop, sock: socket.socket, authority: str,
                      proxy: Proxy) -> asyncio.Transport:
    """``CONNECT authority`` on a socket connected to the proxy; the transport is ready for TLS."""
    transport, reply = await loop.create_connection(lambda: _TunnelReply(loop), sock=sock)
    try:
        auth = f"Proxy-Authorization: {proxy.authorization}\r\n" if proxy.authorization else ""
        transport.write(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n{auth}\r\n".encode())
        head = await reply.head
        status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        fields = status_line.split(" ", 2)
        if len(fields) < 2 or not fields[0].startswith("HTTP/") or not fields[1].startswith("2"):
            raise ProviderError(ErrorClass.CONNECTION, f"the proxy {proxy.host}:{proxy.port} refused the tunnel "
                                                       f"to {authority}: {status_line[:200]!r}")
        if not head.endswith(b"\r\n\r\n"):
            raise ConnectionError("the proxy sent data before the tunnel was established")
    except BaseException:
        transport.close()
        raise
    return transport
