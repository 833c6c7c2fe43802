"""The Claude Code harness works: the pinned CLI, driven by ``run_claude``, completes a Bash turn.

Against the scripted fake Anthropic server, not the gateway, so that a failure here means the
harness (install, isolation, permissions, flags) is broken, not ``POST /v1/messages``: the gateway's
own Claude Code tests rely on exactly this much working. About a second on an idle machine.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.e2e.claude_code import run_claude
from tests.fakes.anthropic_scripted import ScriptedAnthropic, bash_then_done, has_tool_result


@pytest.fixture
def scripted() -> Iterator[ScriptedAnthropic]:
    fake = ScriptedAnthropic(bash_then_done("echo loopgate-ok", "All done: loopgate-ok")).start()
    yield fake
    fake.stop()


def test_claude_code_runs_bash_and_finishes_against_the_scripted_fake(scripted: ScriptedAnthropic,
                                                                      tmp_path: Path) -> None:
    run = run_claude(scripted.url, "run echo loopgate-ok", api_key="sk-ant-harness", cwd=tmp_path, timeout=60)

    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert run.result is not None and run.result.get("result") == "All done: loopgate-ok", run.stdout
    calls = scripted.messages_requests()
    assert len(calls) >= 2, [seen.path for seen in scripted.requests]
    # The second call carries what Bash printed: the command really ran in the isolated CLI.
    assert has_tool_result(calls[1].body, containing="loopgate-ok"), orjson.dumps(calls[1].body["messages"][-3:])
    assert calls[1].headers["x-api-key"] == "<redacted>"
