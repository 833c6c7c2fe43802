"""Claude Code itself through the gateway: ``ANTHROPIC_BASE_URL`` at ``/v1/messages``, a fake model of each format.

Claude Code runs its own ``Bash`` tool on this machine; the gateway pauses the loop on it (the
call is the caller's), and Claude Code's next request, with the ``tool_result``, resumes the stored
loop. Every request a fake receives is checked against its provider's rules (conftest): Claude
Code's whole body (adaptive thinking, effort, context management, deferred tools, mid-conversation
system messages, cache_control everywhere) must reach an Anthropic model as a valid request, and
its mapped form an OpenAI-format or Gemini one.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.e2e.claude_code import ClaudeRun, run_claude
from tests.e2e.conftest import KEY, Gateway
from tests.fakes.upstream import FakeUpstream, Reply

BASH = ("Bash", {"command": "echo loopgate-ok", "description": "Print a marker"})
DONE = "All done: loopgate-ok"


def finished(run: ClaudeRun) -> str:
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert run.result is not None, run.stdout
    return str(run.result.get("result"))


def carries_bash_output(body: dict[str, object]) -> bool:
    """The upstream request holds what Bash printed (the marker beyond the prompt and the command): it ran."""
    text = orjson.dumps(body).decode()
    return text.count("loopgate-ok") > text.count("echo loopgate-ok")


@pytest.mark.parametrize("provider", ["claude", "primary", "gemini"])
def test_claude_code_runs_its_bash_tool_through_the_gateway(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                            provider: str, tmp_path: Path) -> None:
    fake = fakes[provider]
    fake.queue(Reply(tool_calls=[BASH]), Reply(text=DONE))
    run = run_claude(gateway.url, "run echo loopgate-ok", api_key=KEY, cwd=tmp_path, model=f"cc_{provider}",
                     timeout=90)
    assert finished(run) == DONE
    assert len(fake.requests) == 2, [r.path for r in fake.requests]
    assert carries_bash_output(fake.requests[1].body)
    if provider == "claude":  # Claude Code's request reached Anthropic as it wrote it
        first = fake.requests[0].body
        assert first["thinking"]["type"] in ("adaptive", "enabled") or "thinking" not in first
        assert {t["name"] for t in first["tools"]} >= {"Bash", "get_weather"}
        assert "context_management" in first and "metadata" in first
        assert fake.requests[0].headers.get("anthropic-beta", "").startswith("claude-code-")


def test_claude_code_turn_mixing_a_server_tool_with_its_own_bash(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                                 tmp_path: Path) -> None:
    fake = fakes["claude"]
    fake.queue(Reply(text="Checking both.", tool_calls=[("get_weather", {"city": "Paris"}), BASH]),
               Reply(text="Paris: 18C. " + DONE))
    run = run_claude(gateway.url, "weather in Paris, then run echo loopgate-ok", api_key=KEY, cwd=tmp_path,
                     model="cc_claude", timeout=90)
    assert finished(run).endswith(DONE)
    resumed = orjson.dumps(fake.requests[1].body).decode()
    assert "Paris: 18C, sunny" in resumed, "the server tool ran in the gateway and its result was kept"
    assert carries_bash_output(fake.requests[1].body)
    assert len(fake.requests) == 2


def test_overloaded_anthropic_target_mid_session_fails_over_to_openai(
        gateway: Gateway, fakes: dict[str, FakeUpstream], tmp_path: Path) -> None:
    """The first turn is Anthropic's; its model is overloaded (529) when Claude Code sends the Bash result,
    and an OpenAI-format model finishes the same session from the stored transcript."""
    fakes["claude"].queue(Reply(tool_calls=[BASH]), Reply(status=529))
    fakes["primary"].queue(Reply(text=DONE))
    run = run_claude(gateway.url, "run echo loopgate-ok", api_key=KEY, cwd=tmp_path,
                     model="cc_failover", timeout=90)
    assert finished(run) == DONE
    assert len(fakes["primary"].requests) == 1
    assert carries_bash_output(fakes["primary"].requests[0].body)
