"""Upstream calls through an egress proxy: a small real forward proxy on 127.0.0.1.

The proxy maps made-up host names (``*.test``) to local servers, so the gateway side never
resolves them itself: exactly the situation behind a corporate proxy, where only the proxy
can reach the provider.
"""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from pathlib import Path

import pytest

from gateway.providers.base import ErrorClass, ProviderError
from gateway.upstream.proxy import parse_proxy, proxy_for
from tests.upstream.hostile import BODY, HEADERS, ForwardProxy, Server, client, keep_answering


async def test_plain_http_goes_to_the_proxy_in_absolute_form_with_credentials() -> None:
    async with Server(keep_answering) as origin:
        routes = {"models.test:8080": ("127.0.0.1", origin.port)}
        async with ForwardProxy(routes) as proxy:
            http = client(proxies={"http": f"http://team%40corp:s3cret@127.0.0.1:{proxy.port}"})
            for _ in range(2):
                status, _, body = await http.post("http://models.test:8080/v1/chat/completions", HEADERS, BODY)
                assert (status, body) == (200, b'{"ok":true}')
            head = proxy.heads[0].decode()
            assert head.startswith("POST http://models.test:8080/v1/chat/completions HTTP/1.1\r\n")
            assert "Host: models.test:8080\r\n" in head
            assert "Proxy-Authorization: Basic dGVhbUBjb3JwOnMzY3JldA==\r\n" in head  # team@corp:s3cret
            assert len(proxy.heads) == 1  # the proxied connection was kept alive and reused
            http.close()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("tls-proxy")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=secure.test", "-addext", "subjectAltName=DNS:secure.test", "-keyout", str(key),
                    "-out", str(cert)], check=True, capture_output=True)
    return cert, key


async def test_https_goes_through_a_connect_tunnel_with_tls_end_to_end(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    origin = await asyncio.start_server(lambda r, w: keep_answering(r, w, Server(keep_answering)), "127.0.0.1", 0,
                                        ssl=server_tls)
    routes = {"secure.test:443": ("127.0.0.1", origin.sockets[0].getsockname()[1])}
    try:
        async with ForwardProxy(routes) as proxy:
            http = client(tls=ssl.create_default_context(cafile=str(cert)),
                          proxies={"https": f"http://127.0.0.1:{proxy.port}"})
            for _ in range(2):
                status, _, body = await http.post("https://secure.test/v1/chat/completions", HEADERS, BODY)
                assert (status, body) == (200, b'{"ok":true}')
            assert proxy.heads == [b"CONNECT secure.test:443 HTTP/1.1\r\nHost: secure.test:443\r\n\r\n"]
            http.close()
            # The certificate is checked against the provider's name, not the proxy's.
            wrong = client(tls=ssl.create_default_context(), proxies={"https": f"http://127.0.0.1:{proxy.port}"})
            with pytest.raises(ProviderError) as caught:
                await wrong.post("https://secure.test/v1/chat/completions", HEADERS, BODY)
            assert caught.value.error_class is ErrorClass.CONNECTION
            assert "through the proxy" in caught.value.message
    finally:
        origin.close()


async def test_a_proxy_refusing_the_tunnel_is_a_connection_error() -> None:
    async with ForwardProxy({}, refuse=b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n"
                            ) as proxy:
        http = client(proxies={"https": f"http://127.0.0.1:{proxy.port}"})
        with pytest.raises(ProviderError) as caught:
            await http.post("https://secure.test/v1/chat/completions", HEADERS, BODY)
        assert caught.value.error_class is ErrorClass.CONNECTION
        assert "refused the tunnel" in caught.value.message and "407" in caught.value.message
        assert http._in_use == 0
        http.close()


async def test_an_unreachable_proxy_is_a_connection_error() -> None:
    async with ForwardProxy({}) as proxy:
        port = proxy.port
    http = client(proxies={"http": f"http://127.0.0.1:{port}"})
    with pytest.raises(ProviderError) as caught:
        await http.post("http://models.test/v1/chat/completions", HEADERS, BODY)
    assert caught.value.error_class is ErrorClass.CONNECTION
    assert f"through the proxy 127.0.0.1:{port}" in caught.value.message
    http.close()


async def test_loopback_origins_never_use_the_proxy() -> None:
    async with Server(keep_answering) as origin, ForwardProxy({}) as proxy:
        http = client(proxies={"http": f"http://127.0.0.1:{proxy.port}", "all": f"http://127.0.0.1:{proxy.port}"})
        assert (await http.post(origin.url, HEADERS, BODY))[0] == 200
        assert proxy.heads == []
        http.close()


def test_which_requests_use_which_proxy() -> None:
    proxies = {"https": "http://secure-proxy:3128", "http": "http://plain-proxy:3128",
               "no": "internal.example,.corp.example"}
    assert proxy_for("api.openai.com", True, proxies) == parse_proxy("http://secure-proxy:3128")
    assert proxy_for("vllm.serving", False, proxies) == parse_proxy("http://plain-proxy:3128")
    assert proxy_for("internal.example", True, proxies) is None
    assert proxy_for("llm.corp.example", True, proxies) is None
    assert proxy_for("localhost", True, proxies) is None and proxy_for("::1", True, proxies) is None
    assert proxy_for("api.anthropic.com", True, {"all": "proxy:8080"}) == parse_proxy("http://proxy:8080")
    assert proxy_for("api.anthropic.com", True, {}) is None
    assert parse_proxy("http://u:p%40ss@proxy:3128").authorization == "Basic dTpwQHNz"  # u:p@ss
    with pytest.raises(ProviderError) as caught:
        parse_proxy("socks5://user:hunter2@proxy:1080")
    assert "hunter2" not in caught.value.message and "***@" in caught.value.message
