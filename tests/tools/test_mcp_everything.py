"""The MCP sources against the reference server (server-everything) over stdio and Streamable HTTP.

Its elicitation and sampling tools exist only for a client that declares those capabilities, so
listing them proves the declaration; answering them proves the routing: a server's request reaches
the handlers set in ``CALL_INTERACTIONS`` when the call that triggered it started, and without
handlers (or under a ``decline`` policy) it is declined / refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from gateway.tools.base import ToolContent, ToolFailure, ToolTimeouts
from gateway.tools.interaction import (
    CALL_INTERACTIONS,
    CallInteractions,
    ElicitationAnswer,
    ElicitationRequest,
    SamplingAnswer,
    SamplingRequest,
)
from gateway.tools.mcp.connection import McpSource
from gateway.tools.mcp.source import McpHttpSource, McpStdioSource
from tests.fakes.everything import EverythingHttp, everything_command

#: the protocol's reference server runs as a real Node.js process (stdio, and one over HTTP)
pytestmark = pytest.mark.slow

TRANSPORTS = ["stdio", "http"]


@pytest.fixture(scope="module")
def everything_http() -> Iterator[EverythingHttp]:
    server = EverythingHttp()
    yield server
    server.stop()


@pytest.fixture
def open_source(request: pytest.FixtureRequest) -> Any:
    """``open_source(transport, **options)``: a source on a fresh session of the reference server."""

    @asynccontextmanager
    async def opened(transport: str, **options: Any) -> AsyncIterator[McpSource]:
        timeouts = ToolTimeouts(call=20.0)
        source: McpSource
        if transport == "stdio":
            source = McpStdioSource("everything", everything_command(), timeouts=timeouts, **options)
        else:
            server = request.getfixturevalue("everything_http")
            source = McpHttpSource("everything", server.url, timeouts=timeouts, **options)
        try:
            yield source
        finally:
            await source.aclose()

    return opened


async def call_with(source: McpSource, interactions: CallInteractions | None, tool: str,
                    arguments: dict[str, Any]) -> Any:
    """A call as the executor makes it: the request's handlers set around it."""
    token = CALL_INTERACTIONS.set(interactions)
    try:
        return await source.call(tool, arguments)
    finally:
        CALL_INTERACTIONS.reset(token)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_tools_are_listed_and_called_at_the_newest_common_version(open_source: Any, transport: str) -> None:
    async with open_source(transport, sampling_route="mock") as source:
        names = {spec.name for spec in await source.list_tools()}
        assert source.protocol_version == "2025-11-25"
        # Registered by the server only for a client declaring elicitation and sampling.
        assert {"echo", "get-sum", "get-tiny-image", "get-structured-content", "trigger-long-running-operation",
                "trigger-elicitation-request", "trigger-url-elicitation", "trigger-sampling-request"} <= names
        assert await source.call("echo", {"message": "hi"}) == "Echo: hi"
        assert await source.call("get-sum", {"a": 2, "b": 3}) == "The sum of 2 and 3 is 5."
        weather = await source.call("get-structured-content", {"location": "Chicago"})
        assert weather == '{"temperature":36,"conditions":"Light rain / drizzle","humidity":82}'  # said once
        image = await source.call("get-tiny-image", {})
        assert isinstance(image, ToolContent)
        kinds = [part["type"] for part in image.parts]
        assert "image_url" in kinds and image.parts[kinds.index("image_url")]["image_url"]["url"].startswith(
            "data:image/png;base64,")
        assert "[image: image/png," in image.text and "base64" not in image.text


async def test_sampling_is_not_declared_without_a_route(open_source: Any) -> None:
    async with open_source("stdio") as source:
        names = {spec.name for spec in await source.list_tools()}
        assert "trigger-elicitation-request" in names and "trigger-sampling-request" not in names


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_progress_notifications_reach_the_calls_handler(open_source: Any, transport: str) -> None:
    seen: list[tuple[float, float | None, str | None]] = []
    async with open_source(transport) as source:
        result = await call_with(source, CallInteractions(progress=lambda *event: seen.append(event)),
                                 "trigger-long-running-operation", {"duration": 0.3, "steps": 3})
    assert "Long running operation completed" in result
    assert [event[0] for event in seen] == [1, 2, 3] and {event[1] for event in seen} == {3}


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_form_elicitation_is_answered_by_the_calls_handler(open_source: Any, transport: str) -> None:
    asked: list[ElicitationRequest] = []

    async def elicit(request: ElicitationRequest) -> ElicitationAnswer:
        asked.append(request)
        return ElicitationAnswer("accept", {"name": "Ada Lovelace", "check": True, "integer": 7})

    async with open_source(transport) as source:
        result = await call_with(source, CallInteractions(elicit=elicit), "trigger-elicitation-request", {})
    (request,) = asked
    assert (request.server, request.mode, request.url) == ("everything", "form", None)
    assert request.message == "Please provide inputs for the following fields:"
    assert request.requested_schema is not None and request.requested_schema["required"] == ["name"]
    assert "- Name: Ada Lovelace" in result and "- Favorite Integer: 7" in result


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_elicitation_is_declined_without_a_handler_or_under_the_decline_policy(
        open_source: Any, transport: str) -> None:
    async def never(request: ElicitationRequest) -> ElicitationAnswer:
        raise AssertionError("the policy declines before any handler")

    async with open_source(transport) as source:
        assert "User declined" in await call_with(source, None, "trigger-elicitation-request", {})
    async with open_source(transport, elicitation="decline") as source:
        names = {spec.name for spec in await source.list_tools()}
        assert "trigger-elicitation-request" in names  # still declared: a decline is an answer
        assert "User declined" in await call_with(source, CallInteractions(elicit=never),
                                                  "trigger-elicitation-request", {})


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_url_elicitation_reaches_the_handler_with_its_url(open_source: Any, transport: str) -> None:
    asked: list[ElicitationRequest] = []

    async def elicit(request: ElicitationRequest) -> ElicitationAnswer:
        asked.append(request)
        return ElicitationAnswer("accept")

    async with open_source(transport) as source:
        result = await call_with(source, CallInteractions(elicit=elicit), "trigger-url-elicitation",
                                 {"url": "https://example.com/authorize?state=1", "elicitationId": "el-1"})
    (request,) = asked
    assert (request.mode, request.url, request.elicitation_id) == ("url", "https://example.com/authorize?state=1",
                                                                   "el-1")
    assert request.requested_schema is None and "accept" in result


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_sampling_request_is_answered_by_the_calls_handler_with_max_tokens_capped(
        open_source: Any, transport: str) -> None:
    asked: list[SamplingRequest] = []

    async def sample(request: SamplingRequest) -> SamplingAnswer:
        asked.append(request)
        return SamplingAnswer("assistant", {"type": "text", "text": "forty-two"}, "mock-model", "endTurn")

    async with open_source(transport, sampling_route="mock", sampling_max_tokens=50) as source:
        result = await call_with(source, CallInteractions(sample=sample), "trigger-sampling-request",
                                 {"prompt": "the answer?", "maxTokens": 500})
        with pytest.raises(ToolFailure, match="Sampling is not available outside a tool call"):
            await call_with(source, None, "trigger-sampling-request", {"prompt": "again"})  # the server's isError
    (request,) = asked
    assert (request.server, request.max_tokens, request.system_prompt) == (
        "everything", 50, "You are a helpful test server.")
    assert request.messages[0]["content"]["text"].endswith("the answer?")
    assert "forty-two" in result and "mock-model" in result


async def test_concurrent_http_calls_each_get_their_own_handler(open_source: Any) -> None:
    def answering(name: str) -> CallInteractions:
        async def elicit(request: ElicitationRequest) -> ElicitationAnswer:
            await asyncio.sleep(0.05)
            return ElicitationAnswer("accept", {"name": name})
        return CallInteractions(elicit=elicit)

    async with open_source("http") as source:
        await source.list_tools()
        results = await asyncio.gather(*(call_with(source, answering(f"caller {i}"), "trigger-elicitation-request",
                                                   {}) for i in range(4)))
    for i, result in enumerate(results):
        assert f"- Name: caller {i}\n" in result


async def test_concurrent_stdio_elicitations_are_declined_not_guessed(open_source: Any) -> None:
    calls: list[str] = []

    def answering(name: str) -> CallInteractions:
        async def elicit(request: ElicitationRequest) -> ElicitationAnswer:
            calls.append(name)
            return ElicitationAnswer("accept", {"name": name})
        return CallInteractions(elicit=elicit)

    async with open_source("stdio") as source:
        await source.list_tools()
        slow = asyncio.create_task(call_with(source, answering("slow"), "trigger-long-running-operation",
                                             {"duration": 30, "steps": 1}))
        try:
            result = await call_with(source, answering("asker"), "trigger-elicitation-request", {})
        finally:
            slow.cancel()
    # Two calls in flight, and stdio does not say which one asked: nobody's handler is guessed.
    assert "User declined" in result and calls == []
