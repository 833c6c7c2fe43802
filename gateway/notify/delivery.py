"""One delivery attempt: render the body for a receiver, sign it, POST it, judge the answer.

The HTTP client follows the same egress rules as HTTP tools (``HTTPS_PROXY``/``NO_PROXY``,
loopback direct; gateway/upstream/proxy.py). Each attempt is bounded by the receiver's
``timeout_s`` (connect, send and response head together); redirects are not followed (a signed
POST goes where it was configured to, nowhere else); of the answer at most ``MAX_EXCERPT``
bytes are read, for the log.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from gateway.config.notifications_section import WebhookConfig
from gateway.notify.signing import EVENT_ID_HEADER, EVENT_TYPE_HEADER, HEADER, sign
from gateway.notify.slack import slack_payload
from gateway.upstream.errors import ProviderError
from gateway.upstream.proxy import ClientProxy, client_proxy

log = logging.getLogger("loopgate.notify")

MAX_EXCERPT = 1024


def hook_key(config: WebhookConfig) -> str:
    """A stable name for a receiver in queued jobs (replicas with the same config agree; no secret in it)."""
    return hashlib.sha256(f"{config.format}\n{config.url}".encode()).hexdigest()[:20]


@dataclass(slots=True)
class Receiver:
    config: WebhookConfig
    key: str
    proxy: ClientProxy = field(default_factory=ClientProxy)
    unusable: str | None = None  # why its egress proxy cannot be used (logged at start-up)
    #: ``config.timeout_s`` as aiohttp takes it, built once rather than per attempt
    timeout: aiohttp.ClientTimeout = field(default_factory=aiohttp.ClientTimeout)

    @classmethod
    def build(cls, config: WebhookConfig, proxies: Mapping[str, str]) -> Receiver:
        receiver = cls(config, hook_key(config), timeout=aiohttp.ClientTimeout(total=config.timeout_s))
        try:
            receiver.proxy = client_proxy(config.url, proxies)
        except ProviderError as exc:
            receiver.unusable = exc.message
            log.error("webhook %s: %s; its events will be dropped after the retry period", receiver.key, exc.message)
        return receiver

    def render(self, event: dict[str, Any], public_url: str | None) -> bytes:
        if self.config.format == "slack":
            return orjson.dumps(slack_payload(event, public_url))
        return orjson.dumps(event)

    async def attempt(self, session: aiohttp.ClientSession, event: dict[str, Any],
                      public_url: str | None) -> str | None:
        """None when the receiver answered 2xx; otherwise why not (for the log)."""
        if self.unusable is not None:
            return self.unusable
        body = self.render(event, public_url)
        headers = {"Content-Type": "application/json", "User-Agent": "loopgate-webhooks",
                   HEADER: sign(self.config.secret, body), EVENT_ID_HEADER: str(event["id"]),
                   EVENT_TYPE_HEADER: str(event["type"]), **self.proxy.headers}
        try:
            async with session.post(self.config.url, data=body, headers=headers, allow_redirects=False,
                                    timeout=self.timeout,
                                    **self.proxy.options) as resp:
                if 200 <= resp.status < 300:
                    return None
                excerpt = (await resp.content.read(MAX_EXCERPT)).decode("utf-8", "replace")
                return f"HTTP {resp.status}: {excerpt[:200]!r}"
        except TimeoutError:
            return f"no answer within {self.config.timeout_s:g}s"
        except aiohttp.ClientError as exc:
            return f"{type(exc).__name__}: {str(exc)[:200]}"
