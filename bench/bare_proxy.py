"""The floor: a bare Starlette + uvicorn (uvloop, httptools) + aiohttp + orjson pass-through.

``--client http1`` swaps aiohttp for Loopgate's own upstream client (gateway/upstream/http1.py):
the bench mode ``bare-http1``, the floor with the same client Loopgate uses, so the price of
Loopgate's features is visible apart from the gain of its client.

POST /v1/chat/completions -> POST {upstream}/chat/completions with ``model`` substituted; streams are
passed through byte for byte. GET /healthz answers at once. Nothing else: no auth, no routing, no
tool loop. Whatever a real gateway costs above this is the price of its features.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import AsyncIterator

import aiohttp
import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from gateway.config.transport import PoolLimits, Timeouts
from gateway.upstream.http1 import Http1Client

UPSTREAM = os.environ.get("BARE_UPSTREAM", "http://127.0.0.1:9100")
MODEL = os.environ.get("BARE_MODEL", "fake-model")
CLIENT = "aiohttp"
_session: aiohttp.ClientSession | None = None
_http1: Http1Client | None = None


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    global _session, _http1
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
    _session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600))
    _http1 = Http1Client(timeouts=Timeouts(connect=10, read=600), limits=PoolLimits(max_connections=100_000),
                         extra_head="", tls=None)
    try:
        yield
    finally:
        _http1.close()
        await _session.close()


async def healthz(request: Request) -> Response:
    return Response(b'{"status":"ok"}', media_type="application/json")


async def chat(request: Request) -> Response:
    assert _session is not None
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        return JSONResponse({"error": {"message": "bad json", "type": "invalid_request_error"}}, 400)
    body["model"] = MODEL
    payload = orjson.dumps(body)
    headers = {"Content-Type": "application/json"}
    url = f"{UPSTREAM}/chat/completions"
    if CLIENT == "http1":
        return await _chat_http1(url, headers, payload, bool(body.get("stream")))
    if not body.get("stream"):
        async with _session.post(url, data=payload, headers=headers) as resp:
            data = await resp.read()
            return Response(data, status_code=resp.status, media_type="application/json")
    resp = await _session.post(url, data=payload, headers=headers)

    async def relay() -> AsyncIterator[bytes]:
        try:
            async for chunk in resp.content.iter_any():
                yield chunk
        finally:
            resp.release()

    return StreamingResponse(relay(), status_code=resp.status, media_type="text/event-stream")


async def _chat_http1(url: str, headers: dict[str, str], payload: bytes, stream: bool) -> Response:
    assert _http1 is not None
    client = _http1
    if not stream:
        status, _, data = await client.post(url, headers, payload)
        return Response(data, status_code=status, media_type="application/json")
    conn = await client.open_stream(url, headers, payload)

    async def relay() -> AsyncIterator[bytes]:
        try:
            while chunk := await conn.read_some():
                yield chunk
        finally:
            client.release(conn)

    return StreamingResponse(relay(), status_code=conn.status, media_type="text/event-stream")


app = Starlette(
    routes=[Route("/healthz", healthz), Route("/v1/chat/completions", chat, methods=["POST"])],
    lifespan=lifespan,
)


def main() -> None:
    global UPSTREAM, MODEL, CLIENT
    p = argparse.ArgumentParser(description="bare pass-through proxy (the benchmark floor)")
    p.add_argument("--port", type=int, default=9200)
    p.add_argument("--upstream", default=UPSTREAM)
    p.add_argument("--model", default=MODEL)
    p.add_argument("--client", choices=("aiohttp", "http1"), default="aiohttp")
    args = p.parse_args()
    UPSTREAM, MODEL, CLIENT = args.upstream.rstrip("/"), args.model, args.client
    uvicorn.run(
        app, host="127.0.0.1", port=args.port, loop="uvloop", http="httptools", log_level="warning", access_log=False
    )


if __name__ == "__main__":
    main()
