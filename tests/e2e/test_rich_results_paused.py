"""A rich tool result survives a pause: an image one server tool returned in the same turn as a call that
paused for approval reaches the model as an image after the approval, on the same replica and on another.

The reference MCP server (server-everything, over stdio) returns its tiny image; the turn's other call
(``delete_record``) needs approval. The continuation stores the image's parts with the result, so the
resumed request to the Anthropic-format upstream (faked at the HTTP level) carries the ``tool_result``
image block, exactly as a turn that never paused does.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import Gateway, gateway_config, two_replicas
from tests.fakes.everything import everything_command
from tests.fakes.upstream import FakeUpstream, Reply

REDIS_URL = os.environ["LOOPGATE_TEST_REDIS_URL"]  # the suite's own server (tests/conftest.py)
USER = [{"role": "user", "content": "Show me the image, then delete record 7."}]


def config(fakes: dict[str, FakeUpstream], store_url: str = "memory://") -> str:
    node, entry, transport = everything_command()
    server = f"{{command: ['{node}', '{entry}', '{transport}'], timeout_s: 30}}"
    routes = ("  ev_claude: {targets: [{provider: claude, model: claude-sonnet-4-5}], "
              "tools: ['mcp:ev', delete_record]}\n"
              "  ev_gpt: {targets: [{provider: primary, model: m}], tools: ['mcp:ev', delete_record]}\n")
    text = gateway_config(fakes, store_url=store_url, extra_models=routes)
    return text.replace("models:\n", f"mcp_servers:\n  ev: {server}\nmodels:\n", 1)


@pytest.fixture(scope="module")
def gw(fakes: dict[str, FakeUpstream]) -> Iterator[Gateway]:
    gateway = Gateway(config(fakes)).start()
    yield gateway
    gateway.stop()


def pause(gw: Gateway, fake: FakeUpstream, route: str) -> dict[str, Any]:
    fake.queue(Reply(tool_calls=[("get-tiny-image", {}), ("delete_record", {"id": "7"})]), Reply(text="Done."))
    completion = gw.client().chat.completions.create(model=route, messages=USER)
    extension: dict[str, Any] = completion.model_extra["gateway"]
    assert extension["status"] == "paused"
    assert [p["name"] for p in extension["pending"]] == ["delete_record"]
    return extension


def approve(gw: Gateway, paused: dict[str, Any]) -> None:
    call_id = paused["pending"][0]["tool_call_id"]
    decided = gw.post(f"/v1/continuations/{paused['continuation_id']}",
                      {"decisions": [{"tool_call_id": call_id, "approve": True}]})
    assert decided.status_code == 200, decided.text
    assert decided.json()["choices"][0]["message"]["content"] == "Done."


def image_blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    results = [block for message in body["messages"] if isinstance(message["content"], list)
               for block in message["content"] if block.get("type") == "tool_result"]
    assert len(results) == 2
    return [part for result in results if isinstance(result["content"], list)
            for part in result["content"] if part["type"] == "image"]


def test_the_image_reaches_anthropic_after_the_approval(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    approve(gw, pause(gw, fakes["claude"], "ev_claude"))
    (image,) = image_blocks(fakes["claude"].bodies[-1])
    assert image["source"]["type"] == "base64" and image["source"]["media_type"] == "image/png"
    assert len(image["source"]["data"]) > 100


def test_an_openai_chat_upstream_reads_the_description_after_the_approval(gw: Gateway,
                                                                          fakes: dict[str, FakeUpstream]) -> None:
    approve(gw, pause(gw, fakes["primary"], "ev_gpt"))
    results = [m["content"] for m in fakes["primary"].bodies[-1]["messages"] if m["role"] == "tool"]
    assert results[1] == "deleted 7"
    assert isinstance(results[0], str) and "[image: image/png," in results[0] and "base64" not in results[0]


def test_the_image_reaches_anthropic_when_another_replica_approves(fakes: dict[str, FakeUpstream]) -> None:
    for asker, decider in two_replicas(config(fakes, REDIS_URL), REDIS_URL, flush_after=True):
        approve(decider, pause(asker, fakes["claude"], "ev_claude"))
        (image,) = image_blocks(fakes["claude"].bodies[-1])
        assert image["source"]["media_type"] == "image/png" and len(image["source"]["data"]) > 100
