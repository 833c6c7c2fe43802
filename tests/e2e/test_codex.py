"""Codex CLI itself through the gateway: a custom provider (``wire_api = "responses"``) at ``/v1``, a fake model
of each format behind it.

Codex sends ``store: false`` with every earlier item each turn, its tools as ``function`` and ``namespace``
tools plus the hosted ``web_search``, and runs its own ``exec_command``: the gateway hands that call back
(it is the caller's), Codex runs the command here and sends its output with the next request. Every
request a fake receives is checked against its provider's rules (conftest), so Codex's whole body must
reach an OpenAI Chat Completions, Anthropic or Gemini model as a valid request. The routes are the
``cc_*`` ones Claude Code's tests use (server tools ``get_weather`` and ``add``, a 400,000-token window).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.e2e.codex import CodexRun, Settings, run_codex
from tests.e2e.conftest import KEY, Gateway, gateway_config
from tests.fakes.openai_responses import FakeResponsesUpstream
from tests.fakes.upstream import FakeUpstream, Reply

EXEC = ("exec_command", {"cmd": "echo loopgate-ok"})
DONE = "All done: loopgate-ok"
SUMMARY = "Summary: ran echo loopgate-ok; it printed loopgate-ok."
#: usage every reply reports unless a test says otherwise: far below any compaction limit
SMALL = (2000, 10)
#: Codex compacts past 20,000 tokens used; its own first request is about 11,000 by its estimate
COMPACT_AT: Settings = {"model_auto_compact_token_limit": 20_000, "model_context_window": 400_000}
TARGETS = ["primary", "claude", "gemini"]


def codex(gateway: Gateway, route: str, cwd: Path, prompt: str = "run echo loopgate-ok",
          overrides: Settings | None = None) -> CodexRun:
    return run_codex(f"{gateway.url}/v1", prompt, api_key=KEY, cwd=cwd, model=route, overrides=overrides,
                     timeout=90)


def finished(run: CodexRun) -> str:
    assert run.returncode == 0 and run.failure is None, run.explain()
    assert run.final_text is not None, run.explain()
    return run.final_text


def ran_exec(run: CodexRun) -> None:
    """Codex ran the command the model asked for, here, and it printed the marker."""
    commands = run.items("command_execution")
    assert any("echo loopgate-ok" in str(item.get("command")) and item.get("exit_code") == 0
               and "loopgate-ok" in str(item.get("aggregated_output")) for item in commands), run.explain()


def carries_exec_output(body: dict[str, object]) -> bool:
    """The upstream request holds what the command printed (the marker beyond the command itself): it ran."""
    text = orjson.dumps(body).decode()
    return text.count("loopgate-ok") > text.count("echo loopgate-ok")


@pytest.mark.parametrize("provider", TARGETS)
def test_codex_plain_turn(gateway: Gateway, fakes: dict[str, FakeUpstream], provider: str, tmp_path: Path) -> None:
    fakes[provider].queue(Reply(text=DONE, usage=SMALL))
    run = codex(gateway, f"cc_{provider}", tmp_path, prompt="say the marker")
    assert finished(run) == DONE
    assert len(fakes[provider].requests) == 1
    assert "say the marker" in orjson.dumps(fakes[provider].requests[0].body).decode()


@pytest.mark.parametrize("provider", TARGETS)
def test_codex_runs_its_exec_command_through_the_gateway(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                         provider: str, tmp_path: Path) -> None:
    fake = fakes[provider]
    fake.queue(Reply(tool_calls=[EXEC], usage=SMALL), Reply(text=DONE, usage=SMALL))
    run = codex(gateway, f"cc_{provider}", tmp_path)
    assert finished(run) == DONE
    ran_exec(run)
    assert len(fake.requests) == 2, [r.path for r in fake.requests]
    assert carries_exec_output(fake.requests[1].body)


@pytest.mark.parametrize("provider", TARGETS)
def test_codex_turn_mixing_a_server_tool_with_its_own_exec(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                           provider: str, tmp_path: Path) -> None:
    """One model turn calls the route's ``get_weather`` (run in the gateway) and Codex's ``exec_command`` (run
    by Codex): Codex sees only its own call, and the model's next request holds both results."""
    fake = fakes[provider]
    fake.queue(Reply(text="Checking both.", tool_calls=[("get_weather", {"city": "Paris"}), EXEC], usage=SMALL),
               Reply(text="Paris: 18C. " + DONE, usage=SMALL))
    run = codex(gateway, f"cc_{provider}", tmp_path, prompt="weather in Paris, then run echo loopgate-ok")
    assert finished(run).endswith(DONE)
    ran_exec(run)
    assert len(fake.requests) == 2
    resumed = orjson.dumps(fake.requests[1].body).decode()
    assert "Paris: 18C, sunny" in resumed, "the server tool ran in the gateway and its result was kept"
    assert carries_exec_output(fake.requests[1].body)
    assert not any("get_weather" in str(item.get("command")) for item in run.items("command_execution"))


def test_overloaded_anthropic_target_mid_session_fails_over_to_openai(
        gateway: Gateway, fakes: dict[str, FakeUpstream], tmp_path: Path) -> None:
    """The first turn is Anthropic's; it is overloaded (529) when Codex sends the command's output back, and an
    OpenAI-format model finishes the session from the same transcript."""
    fakes["claude"].queue(Reply(tool_calls=[EXEC], usage=SMALL), Reply(status=529))
    fakes["primary"].queue(Reply(text=DONE, usage=SMALL))
    run = codex(gateway, "cc_failover", tmp_path)
    assert finished(run) == DONE
    ran_exec(run)
    assert len(fakes["primary"].requests) == 1
    assert carries_exec_output(fakes["primary"].requests[0].body)


def compacting_session(fake: FakeUpstream) -> None:
    """The tool call reports 50,000 tokens used, past Codex's limit: Codex compacts before sending the output
    back. Whichever side summarises (Codex itself, or the gateway for ``/responses``' compaction), the model is
    asked once for a summary, then answers the turn."""
    fake.queue(Reply(tool_calls=[EXEC], usage=(50_000, 10)), Reply(text=SUMMARY, usage=SMALL),
               Reply(text=DONE, usage=SMALL))


@pytest.mark.parametrize("provider", TARGETS)
def test_codex_long_session_compacts_through_the_gateway(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                         provider: str, tmp_path: Path) -> None:
    """Codex's remote compaction (``capabilities.remote_compaction = "v2"``): a ``/v1/responses`` request ending
    with a ``compaction_trigger`` item, answered with one opaque ``compaction`` item that Codex sends back in
    place of the history; the gateway expands it for the model."""
    fake = fakes[provider]
    compacting_session(fake)
    overrides: Settings = {**COMPACT_AT, "model_providers": {"loopgate": {"capabilities": {"remote_compaction": "v2"}}}}
    run = codex(gateway, f"cc_{provider}", tmp_path, overrides=overrides)
    assert finished(run) == DONE
    ran_exec(run)
    assert len(fake.requests) == 3, [orjson.dumps(r.body)[-300:] for r in fake.requests]
    assert SUMMARY in orjson.dumps(fake.requests[2].body).decode(), "the compaction item reached the model expanded"


def test_codex_long_session_compacts_locally(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                             tmp_path: Path) -> None:
    """Without the capability (any custom provider's default) Codex summarises with an ordinary turn."""
    fake = fakes["primary"]
    compacting_session(fake)
    run = codex(gateway, "cc_primary", tmp_path, overrides=COMPACT_AT)
    assert finished(run) == DONE
    ran_exec(run)
    assert len(fake.requests) == 3
    assert "CONTEXT CHECKPOINT COMPACTION" in orjson.dumps(fake.requests[1].body).decode()
    assert SUMMARY in orjson.dumps(fake.requests[2].body).decode()


#: Codex's WebSocket mode (``supports_websockets`` on its provider): every turn a ``response.create`` message on
#: one connection to ``/v1/responses``, continuing the previous response with only the new items.
WEBSOCKET: Settings = {"model_providers": {"loopgate": {"supports_websockets": True}}}


@pytest.mark.parametrize("provider", TARGETS)
def test_codex_over_websocket_mixes_a_server_tool_with_its_own_exec(
        gateway: Gateway, fakes: dict[str, FakeUpstream], provider: str, tmp_path: Path) -> None:
    fake = fakes[provider]
    fake.queue(Reply(text="Checking both.", tool_calls=[("get_weather", {"city": "Paris"}), EXEC], usage=SMALL),
               Reply(text="Paris: 18C. " + DONE, usage=SMALL))
    run = codex(gateway, f"cc_{provider}", tmp_path, prompt="weather in Paris, then run echo loopgate-ok",
                overrides=WEBSOCKET)
    assert finished(run).endswith(DONE)
    ran_exec(run)
    assert len(fake.requests) == 2
    assert "Paris: 18C, sunny" in orjson.dumps(fake.requests[1].body).decode()
    assert carries_exec_output(fake.requests[1].body)


def test_codex_over_websocket_compacts_through_the_gateway(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                           tmp_path: Path) -> None:
    """Over the socket Codex's ``compaction_trigger`` request continues the paused tool-call response
    (``previous_response_id``) with only the command's output and the trigger."""
    fake = fakes["primary"]
    compacting_session(fake)
    overrides: Settings = {**COMPACT_AT, "model_providers": {"loopgate": {
        "supports_websockets": True, "capabilities": {"remote_compaction": "v2"}}}}
    run = codex(gateway, "cc_primary", tmp_path, overrides=overrides)
    assert finished(run) == DONE
    ran_exec(run)
    assert len(fake.requests) == 3
    assert SUMMARY in orjson.dumps(fake.requests[2].body).decode()


# An OpenAI Responses target (``type: openai_responses``): a gateway of its own with the session's fakes and one
# Responses fake (strict: it refuses encrypted reasoning another account issued, an unanswered call, ...).
RESPONSES_ROUTES = """
  cc_oresp: {targets: [{provider: oresp, model: gpt-5.5}], tools: [get_weather, add], context_window: 400000}
  cc_failover_oresp: {targets: [{provider: claude, model: claude-sonnet-4-5}, {provider: oresp, model: gpt-5.5}],
                      tools: [get_weather, add], context_window: 400000}
"""


@pytest.fixture(scope="module")
def oresp_gateway(fakes: dict[str, FakeUpstream]) -> Iterator[tuple[Gateway, FakeUpstream]]:
    oresp = FakeResponsesUpstream().start()
    gateway = Gateway(gateway_config({**fakes, "oresp": oresp}, extra_models=RESPONSES_ROUTES)).start()
    try:
        yield gateway, oresp
    finally:
        gateway.stop()
        oresp.stop()


@pytest.fixture
def oresp(oresp_gateway: tuple[Gateway, FakeUpstream]) -> Iterator[FakeUpstream]:
    fake = oresp_gateway[1]
    fake.reset()
    yield fake
    for recorded in fake.requests:
        assert not recorded.problems, f"the Responses target received an invalid request: {recorded.problems}"


def test_codex_on_an_openai_responses_target(oresp_gateway: tuple[Gateway, FakeUpstream], oresp: FakeUpstream,
                                             tmp_path: Path) -> None:
    """A plain turn, then one mixing a server tool with Codex's exec_command, on a Responses target."""
    gateway = oresp_gateway[0]
    oresp.queue(Reply(text=DONE, usage=SMALL))
    assert finished(codex(gateway, "cc_oresp", tmp_path, prompt="say the marker")) == DONE
    oresp.queue(Reply(text="Checking both.", tool_calls=[("get_weather", {"city": "Paris"}), EXEC], usage=SMALL),
                Reply(text="Paris: 18C. " + DONE, usage=SMALL))
    run = codex(gateway, "cc_oresp", tmp_path, prompt="weather in Paris, then run echo loopgate-ok")
    assert finished(run).endswith(DONE)
    ran_exec(run)
    assert len(oresp.requests) == 3
    assert "Paris: 18C, sunny" in orjson.dumps(oresp.requests[2].body).decode()
    assert carries_exec_output(oresp.requests[2].body)


def test_overloaded_anthropic_target_fails_over_to_an_openai_responses_one(
        oresp_gateway: tuple[Gateway, FakeUpstream], oresp: FakeUpstream, fakes: dict[str, FakeUpstream],
        tmp_path: Path) -> None:
    fakes["claude"].queue(Reply(tool_calls=[EXEC], usage=SMALL), Reply(status=529))
    oresp.queue(Reply(text=DONE, usage=SMALL))
    run = codex(oresp_gateway[0], "cc_failover_oresp", tmp_path)
    assert finished(run) == DONE
    ran_exec(run)
    assert len(oresp.requests) == 1 and carries_exec_output(oresp.requests[0].body)


def test_codex_long_session_compacts_on_an_openai_responses_target(oresp_gateway: tuple[Gateway, FakeUpstream],
                                                                   oresp: FakeUpstream, tmp_path: Path) -> None:
    compacting_session(oresp)
    overrides: Settings = {**COMPACT_AT, "model_providers": {"loopgate": {"capabilities": {"remote_compaction": "v2"}}}}
    run = codex(oresp_gateway[0], "cc_oresp", tmp_path, overrides=overrides)
    assert finished(run) == DONE
    ran_exec(run)
    assert len(oresp.requests) == 3
    assert SUMMARY in orjson.dumps(oresp.requests[2].body).decode()
