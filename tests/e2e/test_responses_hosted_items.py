"""A hosted tool's items sent back as input (Codex with ``store: false`` resends every earlier output item): verbatim
to an OpenAI Responses target, which issued them; dropped for every other target, never a 400 and never sent as
garbage, the result text of the tools whose results are text kept for the model as a note in the assistant's turn."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from tests.e2e.conftest import KEY, Gateway, serving
from tests.fakes.anthropic_rules import anthropic_request_problems
from tests.fakes.openai_responses import FakeResponsesUpstream
from tests.fakes.openai_rules import openai_request_problems
from tests.fakes.upstream import FakeUpstream, Reply

SEARCH = {"type": "web_search_call", "id": "ws_1", "status": "completed",
          "action": {"type": "search", "query": "loopgate release notes"}}
SHELL = {"type": "local_shell_call", "id": "lsh_1", "call_id": "call_sh1", "status": "completed",
         "action": {"type": "exec", "command": ["ls", "-1"], "env": {}}}
SHELL_OUTPUT = {"type": "local_shell_call_output", "id": "call_sh1", "output": "a.txt\nb.txt"}
IMAGE = {"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": "iVBORw0KGgo" * 50}
CODE = {"type": "code_interpreter_call", "id": "ci_1", "status": "completed", "container_id": "cntr_1",
        "code": "print(6 * 7)", "outputs": [{"type": "logs", "logs": "42"}]}
HOSTED = [SEARCH, SHELL, SHELL_OUTPUT, IMAGE, CODE]
CONVERSATION = [
    {"type": "message", "role": "user", "content": "What changed, and what is in the folder?"},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Search, then list."}]},
    SEARCH,
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Version 2 shipped."}]},
    SHELL, SHELL_OUTPUT, IMAGE, CODE,
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Two files; 42."}]},
    {"type": "message", "role": "user", "content": "Thanks. Summarise."},
]
ARTIFACT = b"openai_hosted"


#: what no upstream request may carry (checked after every test: tests/e2e/conftest.py)
FORBIDDEN_UPSTREAM = (ARTIFACT, "the canonical artifact")


@pytest.fixture(scope="module")
def fakes() -> Iterator[dict[str, FakeUpstream]]:
    started: dict[str, FakeUpstream] = {
        "resp": FakeResponsesUpstream().start(),
        "chat": FakeUpstream("openai", openai_request_problems).start(),
        "claude": FakeUpstream("anthropic", lambda body, model: anthropic_request_problems(body)).start(),
    }
    yield from serving(started)


@pytest.fixture(scope="module")
def gateway(fakes: dict[str, FakeUpstream]) -> Iterator[Gateway]:
    def provider(name: str) -> str:
        return (f"  {name}: {{type: {fakes[name].wire}, base_url: '{fakes[name].url}', api_key: key-{name}, "
                f"timeout_s: 5, connect_timeout_s: 1}}")

    gw = Gateway(f"""
server: {{host: 127.0.0.1, port: __PORT__}}
auth: {{keys: [{{key: {KEY}, tenant: team-a}}]}}
routing: {{backoff_base_s: 0.01, backoff_max_s: 0.05, breaker_failures: 1000, request_timeout_s: 30}}
providers:
{provider("resp")}
{provider("chat")}
{provider("claude")}
models:
  resp: {{targets: [{{provider: resp, model: gpt-5.2}}]}}
  chat: {{targets: [{{provider: chat, model: gpt-4.1}}]}}
  claude: {{targets: [{{provider: claude, model: claude-sonnet-4-5}}]}}
  resp_then_chat: {{targets: [{{provider: resp, model: gpt-5.2}}, {{provider: chat, model: gpt-4.1}}], retries: 0}}
""").start()
    yield gw
    gw.stop()


def ask(gateway: Gateway, model: str, stream: bool = False) -> dict[str, Any]:
    answer = gateway.post("/v1/responses", {"model": model, "input": CONVERSATION, "store": False, "stream": stream})
    assert answer.status_code == 200, answer.text
    return answer.json() if not stream else {"text": answer.text}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_responses_target_gets_them_back_verbatim_in_order(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                             stream: bool) -> None:
    fakes["resp"].queue(Reply(text="Version 2; two files; 42."))
    ask(gateway, "resp", stream)
    sent = fakes["resp"].requests[0].body["input"]
    assert [item.get("type", "message") for item in sent] == [
        "message", "web_search_call", "message", "local_shell_call", "local_shell_call_output",
        "image_generation_call", "code_interpreter_call", "message", "message"]
    assert [item for item in sent if item.get("type") in {h["type"] for h in HOSTED}] == HOSTED
    assert sent[2]["content"] == [{"type": "output_text", "text": "Version 2 shipped."}]  # no note for this target
    assert sent[7]["content"] == [{"type": "output_text", "text": "Two files; 42."}]


@pytest.mark.parametrize("model", ["chat", "claude"])
def test_another_target_gets_the_text_they_carry_never_the_items(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                                 model: str) -> None:
    fakes[model].queue(Reply(text="Summary."))
    ask(gateway, model)
    body = orjson.dumps(fakes[model].requests[0].body).decode()
    for kind in ("web_search_call", "local_shell_call", "image_generation_call", "code_interpreter_call", "ws_1"):
        assert kind not in body
    assert "iVBORw0KGgo" not in body  # an image's bytes are no text for a model
    assert "loopgate release notes" in body and "ls -1" in body and "a.txt\\nb.txt" in body
    assert "print(6 * 7)" in body and "42" in body
    assert "Version 2 shipped." in body and "Two files; 42." in body


def test_failover_from_the_responses_target_drops_them_for_the_next(gateway: Gateway,
                                                                     fakes: dict[str, FakeUpstream]) -> None:
    fakes["resp"].queue(Reply(status=503))
    fakes["chat"].queue(Reply(text="Summary."))
    ask(gateway, "resp_then_chat")
    assert "web_search_call" in orjson.dumps(fakes["resp"].requests[0].body).decode()
    assert "web_search_call" not in orjson.dumps(fakes["chat"].requests[0].body).decode()


def test_a_turn_of_hosted_items_alone_is_a_valid_turn_everywhere(gateway: Gateway,
                                                                 fakes: dict[str, FakeUpstream]) -> None:
    items = [{"type": "message", "role": "user", "content": "Draw."}, IMAGE,
             {"type": "message", "role": "user", "content": "Again?"}]
    for model in ("resp", "chat", "claude"):
        fakes[model].queue(Reply(text="Sure."))
        answer = gateway.post("/v1/responses", {"model": model, "input": items, "store": False})
        assert answer.status_code == 200, answer.text
    assert [i.get("type", "message") for i in fakes["resp"].requests[0].body["input"]] == [
        "message", "image_generation_call", "message"]
