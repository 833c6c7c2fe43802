"""``reasoning_effort`` as a per-target capability: Claude Code always asks for thinking, and an OpenAI-format model
that does not reason answers 400 to the field. The official Anthropic SDK against a real gateway and fake upstreams.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import KEY, Gateway, gateway_config
from tests.e2e.test_messages import ask
from tests.fakes.tool_server import ToolServer
from tests.fakes.upstream import FakeUpstream, Reply
from tests.lazy import lazy_import

anthropic = lazy_import("anthropic")  # imported by the worker that runs these tests (tests/lazy.py)

# What Claude Code sends: adaptive thinking with an effort.
THINKING: dict[str, Any] = {"thinking": {"type": "adaptive"}, "output_config": {"effort": "high"}}
REFUSAL = {"error": {"message": "Unsupported parameter: 'reasoning_effort' is not supported with this model.",
                     "type": "invalid_request_error", "param": "reasoning_effort", "code": "unsupported_parameter"}}
CONFIGURED = """\
  says_it_reasons: {targets: [{provider: primary, model: gpt-4o, reasoning: true}]}
  says_it_does_not: {targets: [{provider: primary, model: o3, reasoning: false}]}
"""


@pytest.fixture(scope="module")
def configured(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> Iterator[Gateway]:
    gw = Gateway(gateway_config(fakes, tool_server=tool_server.url, extra_models=CONFIGURED)).start()
    yield gw
    gw.stop()


def effort_sent(fake: FakeUpstream) -> Any:
    return fake.requests[-1].body.get("reasoning_effort")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("model", "effort"), [("gpt-4o", None), ("gpt-4.1-mini", None), ("gpt-3.5-turbo", None),
                                               ("gpt-5-chat-latest", None), ("o3", "high"), ("gpt-5.1", "high"),
                                               ("openrouter/gpt-4o", None)])
def test_the_model_family_decides_by_default(gateway: Gateway, fakes: dict[str, FakeUpstream], model: str,
                                             effort: str | None, stream: bool) -> None:
    fakes["primary"].queue(Reply(text="Sunny."))
    assert ask(gateway, stream, model=f"primary/{model}", extra_body=THINKING).stop_reason == "end_turn"
    assert effort_sent(fakes["primary"]) == effort
    assert len(fakes["primary"].requests) == 1


@pytest.mark.parametrize("stream", [False, True])
def test_a_targets_reasoning_setting_overrides_its_family(configured: Gateway, fakes: dict[str, FakeUpstream],
                                                          stream: bool) -> None:
    fakes["primary"].queue(Reply(text="Sunny."), Reply(text="Sunny."))
    ask(configured, stream, model="says_it_reasons", extra_body=THINKING)
    assert effort_sent(fakes["primary"]) == "high"
    ask(configured, stream, model="says_it_does_not", extra_body=THINKING)
    assert effort_sent(fakes["primary"]) is None


@pytest.mark.parametrize("stream", [False, True])
def test_a_target_that_refuses_the_field_is_asked_again_without_it_and_remembered(
        gateway: Gateway, fakes: dict[str, FakeUpstream], stream: bool) -> None:
    model = f"primary/acme-deployment-{stream}"  # an unknown name: sent the field until it refuses it
    fake = fakes["primary"]
    fake.queue(Reply(status=400, error_body=REFUSAL), Reply(text="Sunny."))
    message = ask(gateway, stream, model=model, extra_body=THINKING)
    assert message.stop_reason == "end_turn" and message.content[0].text == "Sunny."  # type: ignore[union-attr]
    assert [r.body.get("reasoning_effort") for r in fake.requests] == ["high", None]
    fake.queue(Reply(text="Still sunny."))
    ask(gateway, stream, model=model, extra_body=THINKING)
    assert len(fake.requests) == 3 and effort_sent(fake) is None, "remembered: no second refusal"


def test_another_400_naming_nothing_of_the_kind_is_not_retried(gateway: Gateway,
                                                               fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(status=400, error_body={"error": {"message": "messages: too short",
                                                                   "type": "invalid_request_error"}}))
    with pytest.raises(anthropic.BadRequestError):
        ask(gateway, False, model="primary/acme-other", extra_body=THINKING)
    assert len(fakes["primary"].requests) == 1


def test_a_refusal_without_the_field_sent_is_the_callers_400(gateway: Gateway,
                                                             fakes: dict[str, FakeUpstream]) -> None:
    """Nothing to leave out (the caller did not ask for thinking): the upstream's 400 is the answer, once."""
    fakes["primary"].queue(Reply(status=400, error_body=REFUSAL))
    with pytest.raises(anthropic.BadRequestError):
        anthropic.Anthropic(base_url=gateway.url, api_key=KEY, max_retries=0, timeout=20).messages.create(
            model="primary/acme-third", max_tokens=64, messages=[{"role": "user", "content": "Hi"}])
    assert len(fakes["primary"].requests) == 1
