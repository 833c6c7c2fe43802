"""``ConditionalGet``: the ETag layer in front of the listings the inbox page polls, on a stand-in ASGI app."""

from __future__ import annotations

from typing import Any

from starlette.types import Message, Receive, Scope, Send

from gateway.api.approvals.inbox import POLLED
from gateway.http.conditional import ConditionalGet


def app_answering(status: int, *chunks: bytes) -> Any:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json")]})
        for index, chunk in enumerate(chunks):
            await send({"type": "http.response.body", "body": chunk, "more_body": index < len(chunks) - 1})
    return app


async def call(app: Any, path: str = "/v1/continuations", method: str = "GET",
               headers: list[tuple[bytes, bytes]] | None = None,
               max_buffered: int = 4 * 1024 * 1024) -> tuple[int, dict[bytes, bytes], bytes]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": headers or []}
    await ConditionalGet(app, POLLED, max_buffered)(scope, receive, send)
    start = sent[0]
    return start["status"], dict(start["headers"]), b"".join(m.get("body", b"") for m in sent[1:])


async def test_same_body_same_tag_and_a_304_for_it() -> None:
    app = app_answering(200, b'{"data":', b"[]}")
    status, headers, body = await call(app)
    assert status == 200 and body == b'{"data":[]}' and headers[b"content-length"] == b"11"
    tag = headers[b"etag"]
    assert tag.startswith(b'W/"') and headers[b"vary"] == b"authorization"
    status, headers, body = await call(app, headers=[(b"if-none-match", b'"other", ' + tag)])
    assert status == 304 and body == b"" and headers[b"etag"] == tag
    status, _, body = await call(app_answering(200, b'{"data":[1]}'), headers=[(b"if-none-match", tag)])
    assert status == 200 and body == b'{"data":[1]}'  # changed content, new answer


async def test_errors_other_paths_and_methods_pass_through_untouched() -> None:
    status, headers, body = await call(app_answering(401, b'{"error":{}}'), headers=[(b"if-none-match", b"*")])
    assert status == 401 and body == b'{"error":{}}' and b"etag" not in headers
    for path, method in (("/v1/continuations/cont_x", "GET"), ("/v1/continuations", "POST")):
        status, headers, body = await call(app_answering(200, b"{}"), path=path, method=method)
        assert status == 200 and body == b"{}" and b"etag" not in headers


async def test_a_body_past_the_buffer_bound_streams_through() -> None:
    status, headers, body = await call(app_answering(200, b"0123456789", b"abcdef", b"XYZ"), max_buffered=10)
    assert status == 200 and body == b"0123456789abcdefXYZ" and b"etag" not in headers
