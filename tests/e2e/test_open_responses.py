"""The Open Responses compliance checks against Loopgate routes (``tests/e2e/open_responses.py``).

The HTTP checks and the WebSocket ones (the WebSocket mode of ``/v1/responses``) run on each route.
Each route has one target, a fake model of one format (OpenAI Chat Completions, Anthropic, Gemini,
OpenAI Responses)
answering as a real one would (text, or the tool call the tool-calling check asks for), and no
server tools: every output item is then one the specification defines (a server tool's ``mcp_call``
item is an OpenAI extension it does not list), and the checks are about the surface's contract, the
Response object and its stream events against the specification's schemas, on every target format.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.conftest import KEY, PROVIDER_MODELS, Gateway, gateway_config
from tests.e2e.open_responses import CHECKS, run_check
from tests.e2e.open_responses_ws import WEBSOCKET_CHECKS, run_websocket_check
from tests.fakes.openai_responses import FakeResponsesUpstream
from tests.fakes.upstream import FakeUpstream, Reply

TARGETS = ["primary", "claude", "gemini", "oresp"]
MODELS = {**PROVIDER_MODELS, "oresp": "gpt-5.5"}
ROUTES = "\n".join(f"  compliance_{name}: {{targets: [{{provider: {name}, model: {MODELS[name]}}}], "
                   "context_window: 200000}" for name in TARGETS)


@pytest.fixture(scope="module")
def targets(fakes: dict[str, FakeUpstream]) -> Iterator[dict[str, FakeUpstream]]:
    """The session's fakes and an OpenAI Responses one (``type: openai_responses``) of this module's own."""
    oresp = FakeResponsesUpstream().start()
    try:
        yield {**fakes, "oresp": oresp}
    finally:
        oresp.stop()


@pytest.fixture(scope="module")
def compliance_gateway(targets: dict[str, FakeUpstream]) -> Iterator[Gateway]:
    gateway = Gateway(gateway_config(targets, extra_models=ROUTES)).start()
    try:
        yield gateway
    finally:
        gateway.stop()


@pytest.fixture
def target(targets: dict[str, FakeUpstream], provider: str) -> Iterator[FakeUpstream]:
    """The check's target, reset; afterwards every request it received obeyed its provider's rules."""
    fake = targets[provider]
    fake.reset()
    yield fake
    for recorded in fake.requests:
        assert not recorded.problems, f"{provider} received an invalid request: {recorded.problems}"


@pytest.mark.parametrize("provider", TARGETS)
@pytest.mark.parametrize("check", CHECKS)
def test_open_responses_compliance(compliance_gateway: Gateway, target: FakeUpstream, check: str,
                                   provider: str) -> None:
    if check == "tool-calling":  # the model asks for the weather, as the check's prompt invites
        target.queue(Reply(tool_calls=[("get_weather", {"location": "San Francisco, CA"})]))
    errors = run_check(check, f"{compliance_gateway.url}/v1", KEY, f"compliance_{provider}")
    assert errors == [], "\n".join(errors)


@pytest.mark.parametrize("provider", TARGETS)
@pytest.mark.parametrize("check", WEBSOCKET_CHECKS)
def test_open_responses_websocket_compliance(compliance_gateway: Gateway, target: FakeUpstream, check: str,
                                             provider: str) -> None:
    errors = run_websocket_check(check, f"{compliance_gateway.url}/v1", KEY, f"compliance_{provider}")
    assert errors == [], "\n".join(errors)
