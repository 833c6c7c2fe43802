"""Provider credentials never reach a caller: redaction at the error boundary, descriptions of unreadable bodies."""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest

from gateway import redact
from gateway.api.request.errors import to_gateway_error
from gateway.config import parse_config
from gateway.errors import from_upstream
from gateway.providers.anthropic import AnthropicAdapter
from gateway.providers.gemini import GeminiAdapter
from gateway.providers.openai import OpenAIAdapter
from gateway.redact import Redactor
from gateway.routing.router import AllTargetsFailed, StreamInterrupted
from gateway.tools import ToolRegistry, ToolSpec, run_tool
from gateway.tools.base import ToolFailure
from gateway.upstream.errors import ErrorClass, ProviderError
from tests.tools.helpers import ScriptedSource

CONFIG = """
providers:
  openai: {type: openai, base_url: "http://127.0.0.1:9", api_key: sk-provider-secret-0001,
           headers: {x-org: org-header-secret-02, authorization-extra: "Bearer bearer-token-secret-03", x-tier: pro}}
tools:
  lookup:
    description: d
    http: {url: "http://127.0.0.1:9/x", headers: {authorization: "Token tool-token-secret-04"}}
mcp_servers:
  files: {url: "http://127.0.0.1:9/mcp", headers: {x-mcp-key: mcp-header-secret-05}}
  local: {command: [run], env: {API_TOKEN: mcp-env-secret-06}}
models:
  m: {targets: [{provider: openai, model: gpt}]}
"""
SECRETS = ["sk-provider-secret-0001", "org-header-secret-02", "bearer-token-secret-03", "tool-token-secret-04",
           "mcp-header-secret-05", "mcp-env-secret-06"]


@pytest.fixture
def installed() -> Iterator[Redactor]:
    redactor = Redactor.from_config(parse_config(CONFIG))
    redact.install(redactor)
    yield redactor
    redact.install(Redactor(()))


def test_every_configured_secret_is_redacted(installed: Redactor) -> None:
    text = " | ".join(SECRETS) + " | tier pro | Bearer bearer-token-secret-03"
    scrubbed = installed.scrub(text)
    assert not any(secret in scrubbed for secret in SECRETS)
    assert scrubbed.count("[redacted]") == len(SECRETS) + 1
    assert "tier pro" in scrubbed  # values under 8 characters are not secrets


def test_without_secrets_text_is_untouched() -> None:
    assert not Redactor(["short", ""])
    assert Redactor(["short"]).scrub("short text") == "short text"


def test_an_upstream_error_echoing_the_request_is_scrubbed_for_the_client(installed: Redactor) -> None:
    echo = orjson.dumps({"error": {"message": "Invalid key. Request headers: {'authorization': 'Bearer "
                                              "sk-provider-secret-0001', 'x-org': 'org-header-secret-02'}",
                                   "type": "invalid_request_error"}})
    error = OpenAIAdapter().parse_error(401, {}, echo)
    for client in (from_upstream(error, "openai:gpt"), to_gateway_error(AllTargetsFailed(error, "openai:gpt")),
                   to_gateway_error(StreamInterrupted(error, "openai:gpt"))):
        body = client.body().decode()
        assert "sk-provider-secret-0001" not in body and "org-header-secret-02" not in body
        assert "[redacted]" in body


def test_long_upstream_messages_are_cut(installed: Redactor) -> None:
    error = ProviderError(ErrorClass.SERVER_ERROR, "x" * 100_000)
    assert len(from_upstream(error, "t").message) < 1200


HTML = b"<html><body>502 Bad Gateway. Your request: x-api-key: sk-provider-secret-0001</body></html>"


@pytest.mark.parametrize("adapter", [OpenAIAdapter(), AnthropicAdapter(), GeminiAdapter()])
def test_non_json_error_bodies_are_described_never_echoed(adapter: object) -> None:
    error = adapter.parse_error(502, {"content-type": "text/html; charset=utf-8"}, HTML)  # type: ignore[attr-defined]
    assert error.error_class is ErrorClass.SERVER_ERROR
    assert error.message == f"upstream answered 502 with a non-JSON body (text/html, {len(HTML)} bytes)"
    odd_type = adapter.parse_error(503, {"content-type": "te\x1bxt/<b>"}, b"oops")  # type: ignore[attr-defined]
    assert odd_type.message == "upstream answered 503 with a non-JSON body (no content type, 4 bytes)"


@pytest.mark.parametrize("adapter", [OpenAIAdapter(), AnthropicAdapter(), GeminiAdapter()])
def test_a_plain_text_context_overflow_is_still_recognised(adapter: object) -> None:
    body = b"This model's maximum context length is 8192 tokens"
    error = adapter.parse_error(400, {"content-type": "text/plain"}, body)  # type: ignore[attr-defined]
    assert error.error_class is ErrorClass.CONTEXT_LENGTH
    assert "maximum context length" not in error.message


async def test_a_tool_result_echoing_a_secret_is_scrubbed(installed: Redactor) -> None:
    async def echo(arguments: dict[str, str]) -> str:
        return "you sent authorization: Token tool-token-secret-04"

    async def fail(arguments: dict[str, str]) -> str:
        raise ToolFailure("401 for key mcp-header-secret-05")

    specs = [ToolSpec(name, "d", {"type": "object"}, source="scripted") for name in ("echo", "fail")]
    registry = ToolRegistry([ScriptedSource("scripted", specs, {"echo": echo, "fail": fail})])
    await registry.refresh(strict=True)
    ok = await run_tool(registry.get("echo"), "{}")
    failed = await run_tool(registry.get("fail"), "{}")
    assert (ok.status, ok.content) == ("ok", "you sent authorization: [redacted]")
    assert failed.status == "error" and "mcp-header-secret-05" not in failed.content


def test_webhook_urls_and_signing_secrets_are_secrets() -> None:
    """A Slack webhook URL is its own credential; a signing secret signs every event (issue 29)."""
    config = parse_config(CONFIG + """
server: {public_url: "https://gateway.example.com"}
notifications:
  webhooks:
    - {url: "https://hooks.slack.example/services/T0/B0/slack%2Dtoken%2D07", secret: whsec-signing-secret-08,
       format: slack}
""")
    scrubbed = Redactor.from_config(config).scrub(
        "POST https://hooks.slack.example/services/T0/B0/slack%2Dtoken%2D07 failed; GET /services/T0/B0/slack-token-07 "
        "denied; key whsec-signing-secret-08")
    assert "slack" not in scrubbed.replace("hooks.slack.example", "") and "whsec" not in scrubbed
    assert scrubbed.count("[redacted]") == 3
