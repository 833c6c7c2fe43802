"""A gateway whose tools ask the user (elicitation) or the client's model (sampling), and the calls that drive it.

The asking tools are Python tools (``tests.e2e.sample_tools:ask_user`` and ``ask_model``) that await the
loop's handlers exactly as an MCP source does when its server asks; the MCP servers named here serve
nothing (port 9 refuses), only their policies apply. Shared by tests/e2e/test_elicitation.py,
test_elicitation_ui.py and test_sampling.py; ``last_tool_result`` and ``usage_totals`` by
test_mcp_elicitation.py too.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import httpx

from tests.e2e.conftest import KEY, Gateway, gateway_config, gateway_on_redis, with_keys
from tests.fakes.upstream import FakeUpstream, Reply

REDIS_URL = os.environ["LOOPGATE_TEST_REDIS_URL"]  # the suite's own server (tests/conftest.py)
APPROVER = "elicit-approver-key"
SAMPLER_KEY = "sampling-key"
ADMIN = "elicit-admin-key"
TOOLS = """  ask_user:
    description: Ask the user something
    parameters: {type: object, properties: {question: {type: string}, server: {type: string}, mode: {type: string},
                 rounds: {type: integer}, work_s: {type: number}}, required: [question]}
    python: "tests.e2e.sample_tools:ask_user"
    timeout_s: 1
  ask_model:
    description: Ask the client's model something
    parameters: {type: object, properties: {prompt: {type: string}, server: {type: string}, hint: {type: string}},
                 required: [prompt]}
    python: "tests.e2e.sample_tools:ask_model"
"""
# The asking tool names the server whose policy applies.
SERVERS = """mcp_servers:
  asker: {url: "http://127.0.0.1:9/mcp", timeout_s: 1}
  quick: {url: "http://127.0.0.1:9/mcp", timeout_s: 1, elicitation_timeout_s: 1.5}
  refuser: {url: "http://127.0.0.1:9/mcp", timeout_s: 1, elicitation: decline}
  sampler: {url: "http://127.0.0.1:9/mcp", timeout_s: 1, sampling_route: sampling_target, sampling_max_tokens: 64}
"""
ROUTE = """  ask:
    targets: [{provider: primary, model: m}]
    tools: [ask_user, ask_model, delete_record]
  sampling_target:
    targets: [{provider: secondary, model: big-model}, {provider: secondary, model: small-cheap-model}]
"""


def asking_config(fakes: dict[str, FakeUpstream], store_url: str = REDIS_URL, hooks: str = "") -> str:
    text = with_keys(gateway_config(fakes, store_url=store_url, extra_models=ROUTE) + hooks,
                     f"{{key: {APPROVER}, tenant: team-a, name: reviewer, role: approver}}",
                     f"{{key: {SAMPLER_KEY}, tenant: samplers, name: sampler}}", admin=ADMIN)
    return text.replace("models:\n", TOOLS + SERVERS + "models:\n", 1)


def asking_gateway(fakes: dict[str, FakeUpstream]) -> Iterator[Gateway]:
    """A gateway of ``asking_config`` on the suite's Redis (flushed first): the body of a module's fixture."""
    yield from gateway_on_redis(asking_config(fakes), REDIS_URL)


def ask(gw: Gateway, fakes: dict[str, FakeUpstream], key: str = KEY, then: str | None = None,
        **arguments: Any) -> dict[str, Any]:
    """A request whose model calls ``ask_user`` with ``arguments`` (and answers ``then`` after the tool, when it
    does not pause); the completion's ``gateway`` object."""
    fakes["primary"].queue(Reply(text="Let me ask.", tool_calls=[("ask_user", {"question": "Who are you?",
                                                                               **arguments})]))
    if then is not None:
        fakes["primary"].queue(Reply(text=then))
    completion = gw.client(key).chat.completions.create(model="ask", messages=[{"role": "user", "content": "hi"}])
    extension: dict[str, Any] = completion.model_extra["gateway"]
    if extension["status"] == "paused":
        assert completion.choices[0].finish_reason == "tool_calls"
        assert [c.id for c in completion.choices[0].message.tool_calls] == [p["tool_call_id"]
                                                                            for p in extension["pending"]]
    return extension


def last_tool_result(fake: FakeUpstream) -> str:
    """The text of the last tool result ``fake`` was sent (its parts' texts joined, when it has parts)."""
    content = [m for m in fake.bodies[-1]["messages"] if m["role"] == "tool"][-1]["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


def usage_totals(gw: Gateway, admin_key: str, tenant: str, at_least: int = 0) -> dict[str, int]:
    """The tenant's usage totals once ``at_least`` requests are counted (rows are written after the answers)."""
    deadline = time.monotonic() + 15
    while True:
        response = httpx.get(f"{gw.url}/admin/usage", params={"tenant": tenant},
                             headers={"authorization": f"Bearer {admin_key}"}, timeout=20)
        assert response.status_code == 200, response.text
        rows = response.json()["data"]
        totals = {f: sum(r[f] for r in rows) for f in ("requests", "prompt_tokens", "completion_tokens")}
        if totals["requests"] >= at_least or time.monotonic() > deadline:
            return totals
        time.sleep(0.1)
