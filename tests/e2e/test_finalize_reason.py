"""The starter `demo` route takes an agent's large request, and a finalize names its real reason (issue 52).

Claude Code on the starter's `demo` route printed "The tool-call limit for this request has been
reached...": the mock's window was the 8,192-token default for an unknown model, Claude Code sent
~33k tokens and asked for 32k out, so the context guard skipped the tool and finalized with the
instruction written for the iteration cap (which the mock echoes). The starter configs now give
the mock a 200k window, and a finalize forced by the window says so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config.loader import PACKAGED_PATH
from gateway.loop.engine import CONTEXT_FINALIZE_INSTRUCTION, FINALIZE_INSTRUCTION
from tests.e2e.conftest import ROOT, Gateway
from tests.fakes.upstream import FakeUpstream, Reply

CLAUDE_CODE_PROMPT_WORDS = 33_000  # about 33k tokens of system prompt and tool definitions
CLAUDE_CODE_MAX_TOKENS = 32_000


@pytest.mark.parametrize("config", [ROOT / "config" / "gateway.yaml", PACKAGED_PATH], ids=["example", "init"])
def test_the_starter_demo_route_takes_an_agents_large_request(config: Path) -> None:
    gateway = Gateway(config.read_text()).start()
    try:
        big_system = " ".join(f"rule{i % 97}" for i in range(CLAUDE_CODE_PROMPT_WORDS))
        answer = gateway.post("/v1/chat/completions", {
            "model": "demo", "max_tokens": CLAUDE_CODE_MAX_TOKENS,
            "messages": [{"role": "system", "content": big_system},
                         {"role": "user", "content": "What is the weather in Paris? Use get_weather."}]}, key="any")
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert [(c["name"], c["status"]) for c in body["gateway"]["tool_calls"]] == [("get_weather", "ok")]
        assert body["gateway"]["iteration_limit_reached"] is False
        assert body["choices"][0]["message"]["content"].startswith("The get_weather tool returned: ")
    finally:
        gateway.stop()


def test_a_finalize_forced_by_the_window_names_the_window(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    # ctx_prune: a 4,000-token window; eight 12 KB results cannot all fit, so some are skipped and the loop ends.
    calls = [("big", {"kb": 12, "tag": f"t{i}"}) for i in range(8)]
    fakes["primary"].queue(Reply(tool_calls=calls), Reply(text="Answer from what fit."))
    answer = gateway.client().chat.completions.create(model="ctx_prune", max_tokens=200,
                                                      messages=[{"role": "user", "content": "go"}])
    assert answer.model_extra["gateway"]["context"]["skipped_tools"] > 0
    final = fakes["primary"].bodies[-1]
    assert final["tool_choice"] == "none"
    told = final["messages"][-1]
    assert told == {"role": "user", "content": CONTEXT_FINALIZE_INSTRUCTION}
    assert "context window" in told["content"] and "tool-call limit" not in told["content"]


def test_a_finalize_at_the_iteration_cap_still_names_the_cap(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("get_weather", {"city": "Oslo"})]), Reply(text="Done."))
    gateway.client().chat.completions.create(model="agent", messages=[{"role": "user", "content": "weather?"}],
                                             extra_body={"gateway": {"max_tool_iterations": 1}})
    assert fakes["primary"].bodies[-1]["messages"][-1] == {"role": "user", "content": FINALIZE_INSTRUCTION}
