"""A stdio MCP server that can ask (elicit or sample), reachable by more than one tenant: ``check-config`` warns.

stdio cannot attribute a server's request to one of several concurrent calls, so one tenant's waiting
question declines every other tenant's (``gateway/tools/mcp/server_requests.py``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config import parse_config
from gateway.config.validate import shared_stdio_warnings

ROOT = Path(__file__).resolve().parents[2]
BASE = f"""
providers: {{p: {{type: openai, base_url: "http://127.0.0.1:9/v1"}}}}
auth:
  keys:
    - {{key: key-a, tenant: team-a}}
    - {{key: key-b, tenant: team-b, models: [other]}}
mcp_servers:
  files: {{command: ['{sys.executable}', server.py], sampling_route: other}}
  remote: {{url: "http://127.0.0.1:9/mcp", sampling_route: other}}
models:
  agent: {{targets: [{{provider: p, model: x}}], tools: ['mcp:files', 'mcp:remote']}}
  other: {{targets: [{{provider: p, model: y}}]}}
"""


def warnings(text: str) -> list[str]:
    return shared_stdio_warnings(parse_config(text, {}))


@pytest.mark.slow
def test_check_config_warns_when_two_tenants_reach_an_asking_stdio_server(tmp_path: Path) -> None:
    path = tmp_path / "shared.yaml"
    path.write_text(BASE.replace("models: [other]", "models: [agent]"))
    run = subprocess.run([sys.executable, "-m", "gateway", "check-config", "--config", str(path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "config OK" in run.stdout, run.stderr
    assert ("warning: mcp_servers.files: a stdio server that can elicit and sample is reachable by keys of 2 tenants "
            "(team-a, team-b) through models.agent; stdio cannot tell which call") in run.stderr
    assert "mcp_servers.remote" not in run.stderr  # streamable HTTP attributes each request to its call


def test_one_tenant_is_fine_and_no_asking_is_fine() -> None:
    assert warnings(BASE) == []  # team-b's key cannot reach the route
    shared = BASE.replace("models: [other]", "models: [agent]")
    quiet = shared.replace("command: ['", "elicitation: decline, command: ['").replace(
        "server.py], sampling_route: other}", "server.py]}")
    assert warnings(quiet) == []


def test_auth_off_and_admin_keys_warn() -> None:
    [off] = warnings(BASE.replace("auth:\n  keys:\n    - {key: key-a, tenant: team-a}\n"
                                  "    - {key: key-b, tenant: team-b, models: [other]}\n", ""))
    assert "reachable by every caller (auth is off)" in off
    [admin] = warnings(BASE.replace("auth:\n", "auth:\n  admin_keys: [{key: admin-key, name: ops}]\n"))
    assert "reachable by keys the admin keys create (of any tenant)" in admin
