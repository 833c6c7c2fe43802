"""The floor: a bare Starlette + uvicorn (uvloop, httptools) + aiohttp + orjson pass-through.

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

UPSTREAM = os.environ.get("BARE_UPSTREAM", "http://127.0.0.1:9100")
MODEL = os.environ.get("BARE_MODEL", "fake-model")
_session: aiohttp.ClientSession | None = None


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    global _session
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
    _session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600))
    try:
        yield
    finally:
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


app = Starlette(
    routes=[Route("/healthz", healthz), Route("/v1/chat/completions", chat, methods=["POST"])],
    lifespan=lifespan,
)


def main() -> None:
    global UPSTREAM, MODEL
    p = argparse.ArgumentParser(description="bare pass-through proxy (the benchmark floor)")
    p.add_argument("--port", type=int, default=9200)
    p.add_argument("--upstream", default=UPSTREAM)
    p.add_argument("--model", default=MODEL)
    args = p.parse_args()
    UPSTREAM, MODEL = args.upstream.rstrip("/"), args.model
    uvicorn.run(
        app, host="127.0.0.1", port=args.port, loop="uvloop", http="httptools", log_level="warning", access_log=False
    )


if __name__ == "__main__":
    main()
