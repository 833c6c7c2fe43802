"""HTTP tools and MCP servers over HTTP reach their services through the same egress proxy as
provider calls (the environment's ``HTTP_PROXY`` / ``HTTPS_PROXY`` / ``NO_PROXY``), through a
real forward proxy on 127.0.0.1 that maps made-up ``*.test`` names to local servers."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from pathlib import Path

import aiohttp
import pytest

from gateway.tools.base import ToolFailure, ToolTimeouts
from gateway.tools.http_source import HttpToolSource
from gateway.tools.mcp.http import McpHttpSource
from tests.fakes.mcp_server import FakeMcpServer
from tests.tools.helpers import http_tool
from tests.upstream.hostile import ForwardProxy, Server, keep_answering

CREDENTIALS = "Proxy-Authorization: Basic dGVhbTpzM2NyZXQ=\r\n"  # team:s3cret


async def test_an_http_tool_goes_through_the_environments_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    service = Server(keep_answering)
    async with service, ForwardProxy({"tools.test:8080": ("127.0.0.1", 0)}) as proxy:
        proxy.routes["tools.test:8080"] = ("127.0.0.1", service.port)
        monkeypatch.setenv("HTTP_PROXY", f"http://team:s3cret@127.0.0.1:{proxy.port}")
        source = HttpToolSource([http_tool("lookup", "http://tools.test:8080/lookup")])
        try:
            assert await source.call("lookup", {"q": 1}) == '{"ok":true}'
        finally:
            await source.aclose()
        head = proxy.heads[0].decode()
        assert head.startswith("POST http://tools.test:8080/lookup HTTP/1.1\r\n")
        assert CREDENTIALS in head
        assert service.requests[0][1] == b'{"q":1}'


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("tls-tools")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=tools.test", "-addext", "subjectAltName=DNS:tools.test", "-keyout", str(key),
                    "-out", str(cert)], check=True, capture_output=True)
    return cert, key


async def test_an_https_tool_goes_through_a_connect_tunnel(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    async with Server(keep_answering) as plain:
        service = await asyncio.start_server(plain._track, "127.0.0.1", 0, ssl=server_tls)
        routes = {"tools.test:443": ("127.0.0.1", service.sockets[0].getsockname()[1])}
        try:
            async with ForwardProxy(routes) as proxy:
                session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(
                    ssl=ssl.create_default_context(cafile=str(cert))))
                source = HttpToolSource([http_tool("lookup", "https://tools.test/lookup")], session,
                                        proxies={"https": f"http://team:s3cret@127.0.0.1:{proxy.port}"})
                try:
                    assert await source.call("lookup", {}) == '{"ok":true}'
                finally:
                    await session.close()
                head = proxy.heads[0].decode()
                assert head.startswith("CONNECT tools.test:443 HTTP/1.1\r\n") and CREDENTIALS in head
                assert b"Proxy-Authorization" not in plain.requests[0][0]  # never leaked to the service
        finally:
            service.close()


async def test_loopback_and_no_proxy_tools_stay_direct() -> None:
    async with Server(keep_answering) as service, ForwardProxy({}) as proxy:
        proxies = {"http": f"http://127.0.0.1:{proxy.port}", "no": "internal.test"}
        source = HttpToolSource([http_tool("local", service.url)], proxies=proxies)
        try:
            assert await source.call("local", {}) == '{"ok":true}'
        finally:
            await source.aclose()
        assert proxy.heads == []


async def test_a_misconfigured_proxy_fails_the_tool_rather_than_going_direct() -> None:
    async with Server(keep_answering) as service:
        reachable = f"http://localhost.example:{service.port}/x"
        source = HttpToolSource([http_tool("lookup", reachable)], proxies={"http": "socks5://proxy:1080"})
        try:
            with pytest.raises(ToolFailure, match="egress proxy"):
                await source.call("lookup", {})
        finally:
            await source.aclose()
        assert service.connections == 0


async def test_an_mcp_server_goes_through_the_proxy() -> None:
    fake = await FakeMcpServer().start()
    port = int(fake.url.rsplit(":", 1)[1].split("/")[0])
    try:
        async with ForwardProxy({"mcp.test:9000": ("127.0.0.1", port)}) as proxy:
            source = McpHttpSource("remote", "http://mcp.test:9000/mcp", timeouts=ToolTimeouts(call=5.0),
                                   proxies={"http": f"http://team:s3cret@127.0.0.1:{proxy.port}"})
            try:
                assert await source.call("add", {"a": 2, "b": 3}) == '5\n{"sum":5}'
            finally:
                await source.aclose()
            # POSTs, the session's GET stream (this server has none: 405) and the closing DELETE.
            assert proxy.heads and all(head.startswith((b"POST http://mcp.test:9000/mcp HTTP/1.1\r\n",
                                                        b"GET http://mcp.test:9000/mcp HTTP/1.1\r\n",
                                                        b"DELETE http://mcp.test:9000/mcp")) for head in proxy.heads)
            assert all(CREDENTIALS.encode() in head for head in proxy.heads)
    finally:
        await fake.stop()
