"""A raw-socket HTTP/1.1 upstream that records every request line exactly as it arrived.

Unlike the aiohttp fakes it parses nothing it does not have to: the request line is kept as
bytes on the wire (no path normalisation, no rejection of odd targets), which is what a test of
"caller input never shapes the upstream URL" must look at. Each request is answered by a
function of what was seen; keep-alive is supported, as the gateway's pool reuses connections.
"""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

import orjson


@dataclass
class Seen:
    request_line: str
    headers: dict[str, str]
    body: bytes


Answer = tuple[int, dict[str, str], bytes]


def ok_answer(seen: Seen) -> Answer:
    """A minimal successful reply in the wire format the request line implies (Gemini or OpenAI)."""
    if "generateContent" in seen.request_line:
        payload: object = {"candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]},
                                           "finishReason": "STOP"}],
                           "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1}}
    else:
        payload = {"id": "chatcmpl-1", "object": "chat.completion", "model": "m",
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}
    return 200, {"content-type": "application/json"}, orjson.dumps(payload)


class RecordingUpstream:
    def __init__(self, answer: Callable[[Seen], Answer] = ok_answer) -> None:
        self.answer = answer
        self.seen: list[Seen] = []
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                while outer._exchange(self.rfile, self.wfile):
                    pass

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def request_lines(self) -> list[str]:
        return [s.request_line for s in self.seen]

    def start(self) -> RecordingUpstream:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _exchange(self, rfile: IO[bytes], wfile: IO[bytes]) -> bool:
        try:
            line = rfile.readline(65536)
            if not line:
                return False
            headers: dict[str, str] = {}
            while True:
                raw = rfile.readline(65536)
                if raw in (b"\r\n", b"\n", b""):
                    break
                name, _, value = raw.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            body = rfile.read(int(headers.get("content-length") or 0))
            seen = Seen(line.decode("latin-1").rstrip("\r\n"), headers, body)
            self.seen.append(seen)
            status, reply_headers, payload = self.answer(seen)
            head = [f"HTTP/1.1 {status} X", f"content-length: {len(payload)}",
                    *[f"{k}: {v}" for k, v in reply_headers.items()]]
            wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload)
            wfile.flush()
            return True
        except OSError:  # the gateway closed or reset the connection
            return False
