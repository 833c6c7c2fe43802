"""Gateways that pause tool calls for a person, and the calls that pause, list and decide them.

Two set-ups, each shared by the modules named: ``approvals_config`` on the suite's Redis with an MCP
server whose annotations decide (tests/e2e/test_approvals.py, test_forged_results.py), and
``inbox_config`` with one approver per tenant and an HTTP tool (tests/e2e/test_approvals_ui.py, the
console's tests).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import httpx

from tests.e2e.conftest import KEY, Gateway, gateway_config, gateway_on_redis, with_keys
from tests.e2e.test_mcp import ThreadedMcp
from tests.fakes.tool_server import ToolServer
from tests.fakes.upstream import FakeUpstream, Reply

REDIS_URL = os.environ["LOOPGATE_TEST_REDIS_URL"]  # the suite's own server (tests/conftest.py)

# -- approvals_config: the approval API on Redis ----------------------------------------------------
ASKER, APPROVER, LIMITED, B_APPROVER = "asker-key", "approver-key", "limited-key", "b-approver-key"
EXTRA_TOOLS = """  timed_delete:
    description: Delete a record (the approval times out)
    parameters: {type: object, properties: {id: {type: string}}, required: [id]}
    python: "tests.e2e.sample_tools:delete_record"
    approval: required
    approval_timeout_s: 1
  auto_delete:
    description: A tool without annotations under approval auto
    parameters: {type: object, properties: {id: {type: string}}, required: [id]}
    python: "tests.e2e.sample_tools:delete_record"
    approval: auto
"""
ROUTE = """  appr:
    targets: [{provider: primary, model: m}]
    tools: [get_weather, delete_record, timed_delete, auto_delete, 'mcp:calc']
"""


def approvals_config(fakes: dict[str, FakeUpstream], mcp_url: str, ttl_s: int = 600) -> str:
    text = gateway_config(fakes, store_url=REDIS_URL, extra_models=ROUTE, ttl_s=ttl_s)
    text = with_keys(text, f"{{key: {ASKER}, tenant: team-a, name: asker}}",
                     f"{{key: {APPROVER}, tenant: team-a, name: reviewer, role: approver}}",
                     f"{{key: {LIMITED}, tenant: team-a, name: limited, tools: [get_weather]}}",
                     f"{{key: {B_APPROVER}, tenant: team-b, name: b-reviewer, role: approver}}")
    servers = f"mcp_servers:\n  calc: {{url: '{mcp_url}', timeout_s: 5, approval: auto}}\n"
    return text.replace("models:\n", EXTRA_TOOLS + servers + "models:\n", 1)


def approvals_gateway(fakes: dict[str, FakeUpstream]) -> Iterator[Gateway]:
    """A gateway of ``approvals_config`` with an MCP server of its own, both stopped at the end: the body of a
    module's fixture (``yield from approvals_gateway(fakes)``)."""
    mcp = ThreadedMcp()
    try:
        yield from gateway_on_redis(approvals_config(fakes, mcp.server.url), REDIS_URL)
    finally:
        mcp.stop()


def get(gw: Gateway, path: str, key: str, **params: Any) -> httpx.Response:
    return httpx.get(f"{gw.url}{path}", params=params, headers={"authorization": f"Bearer {key}"}, timeout=20)


def pause(gw: Gateway, fakes: dict[str, FakeUpstream], record: str, tool: str = "delete_record",
          key: str = ASKER) -> tuple[str, str, Any]:
    fakes["primary"].queue(Reply(text=f"Deleting {record}.", tool_calls=[(tool, {"id": record})]))
    paused = gw.client(key).chat.completions.create(
        model="appr", messages=[{"role": "user", "content": f"Delete record {record}"}])
    extension = paused.model_extra["gateway"]
    assert extension["status"] == "paused"
    return extension["continuation_id"], extension["pending"][0]["tool_call_id"], paused


def listed(gw: Gateway, key: str, limit: int = 100, **params: Any) -> list[dict[str, Any]]:
    """Every entry, following the cursor."""
    entries: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = get(gw, "/v1/continuations", key, limit=limit, **({"cursor": cursor} if cursor else {}), **params)
        assert page.status_code == 200, page.text
        body = page.json()
        assert body["object"] == "list" and len(body["data"]) <= limit
        entries += body["data"]
        if not body["has_more"]:
            assert body["next_cursor"] is None
            return entries
        cursor = body["next_cursor"]


def decide(gw: Gateway, continuation_id: str, key: str, *decisions: dict[str, Any]) -> httpx.Response:
    return gw.post(f"/v1/continuations/{continuation_id}", {"decisions": list(decisions)}, key=key)


def audit(gw: Gateway, key: str, limit: int = 100, **params: Any) -> list[dict[str, Any]]:
    """Every audit entry ``key`` may read, following the cursor."""
    entries: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = get(gw, "/v1/audit", key, limit=limit, **({"cursor": cursor} if cursor else {}), **params)
        assert page.status_code == 200, page.text
        body = page.json()
        entries += body["data"]
        if not body["has_more"]:
            return entries
        cursor = body["next_cursor"]


# -- inbox_config: the approvals inbox, one approver per tenant -------------------------------------
APPROVER_A = "approver-a-key"
APPROVER_B = "approver-b-key"
SOON_S = 2


def inbox_config(fakes: dict[str, FakeUpstream], tool_server: ToolServer, store_url: str = "memory://") -> str:
    """The shared e2e config plus one approver key per tenant, and a tool whose approval times out fast."""
    config = gateway_config(fakes, store_url=store_url, tool_server=tool_server.url)
    caller = f"    - {{key: {KEY}, tenant: team-a}}\n"
    assert caller in config
    config = config.replace(caller, f"    - {{key: {KEY}, tenant: team-a, name: billing-bot}}\n", 1)
    config = with_keys(config, f"{{key: {APPROVER_A}, tenant: team-a, role: approver, name: alice}}",
                       f"{{key: {APPROVER_B}, tenant: team-b, role: approver, name: bob}}")
    # A tool whose approval times out quickly, on a route of its own.
    assert config.count("\nmodels:\n") == 1
    return config.replace("\nmodels:\n", f"""
  delete_soon:
    description: Delete a record (approval times out fast)
    parameters: {{type: object, properties: {{id: {{type: string}}}}, required: [id]}}
    http: {{url: "{tool_server.url}/delete", timeout_s: 5}}
    approval: required
    approval_timeout_s: {SOON_S}
models:
  agent_soon: {{targets: [{{provider: primary, model: up-model}}], tools: [delete_soon]}}
""")


def pause_for_approval(gateway: Gateway, fakes: dict[str, FakeUpstream], record: str,
                       user: str = "Please tidy up.", key: str = KEY) -> tuple[str, str]:
    """A client asks; the model calls ``delete_remote``, which needs approval: the SDK gets a paused answer."""
    fakes["primary"].queue(Reply(text=f"I will delete record {record}.",
                                 tool_calls=[("delete_remote", {"id": record})]))
    paused = gateway.client(key).chat.completions.create(model="agent",
                                                         messages=[{"role": "user", "content": user}])
    extension = paused.model_extra["gateway"]
    assert extension["status"] == "paused" and extension["pending"][0]["reason"] == "approval"
    return extension["continuation_id"], extension["pending"][0]["tool_call_id"]


def cleanup(gateway: Gateway, *continuation_ids: str) -> None:
    for continuation_id in continuation_ids:
        httpx.delete(f"{gateway.url}/v1/continuations/{continuation_id}", headers={"authorization": f"Bearer {KEY}"})
