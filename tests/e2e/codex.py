"""Run the pinned Codex CLI headless (``codex exec --json``) against a base URL, isolated from the machine's setup.

``/v1/responses`` is accepted only when Codex itself completes its turns through the gateway, so the tests
drive the real CLI (``@openai/codex``, pinned in ``tests/clients/package.json``), not a re-creation of its
requests. Isolation is the point of this module:

- a temporary ``HOME`` and ``CODEX_HOME`` holding the only ``config.toml`` Codex reads: a custom model
  provider (``wire_api = "responses"``, the key from an environment variable, so no login and no
  ``auth.json``) and nothing of the machine's user (sessions, AGENTS.md, rules, skills);
- everything that reaches the network on its own off: update checks, analytics, feedback, OpenTelemetry,
  plugin and app sync (the curated plugin sync calls github.com and chatgpt.com at startup otherwise);
  ``--strict-config`` makes a key a later release renames an error instead of a silent no-op;
- as a guard, every host but loopback goes to a proxy on a closed local port, so a release that phones
  home anyway fails fast on loopback instead of reaching the internet from a test;
- the provider's own retries off (``request_max_retries``/``stream_max_retries`` 0): a gateway error
  shows at once instead of after Codex's backoff, and the run time stays bounded.

Codex runs its own shell tool (``exec_command``) in the test's directory without asking: ``approval_policy
= "never"`` and the ``danger-full-access`` sandbox (Codex's Linux sandbox needs namespaces a container
may not grant; the commands are the fake model's, in a temporary directory). The CLI runs in a process
group of its own, so a timeout kills it and whatever its tool started.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.claude_code import BLACKHOLE_PROXY, CLIENTS, INSTALL, KEPT, ROOT

__all__ = ["ROOT", "CodexRun", "codex_binary", "codex_command", "codex_config", "run_codex"]

#: the environment variable the provider's key is read from (``env_key``)
KEY_ENV = "LOOPGATE_API_KEY"
PROVIDER_ID = "loopgate"
#: where npm puts the native binary: the platform package ``@openai/codex`` lists as optional dependency
NATIVE_GLOB = "@openai/codex-*/vendor/*/bin/codex"

TomlValue = str | int | bool | list[str]
Settings = dict[str, "TomlValue | Settings"]


@dataclass
class CodexRun:
    """One finished ``codex exec --json`` run: the JSONL events it printed, in order."""

    returncode: int
    stdout: str
    stderr: str
    events: list[dict[str, Any]] = field(default_factory=list)

    def items(self, kind: str) -> list[dict[str, Any]]:
        """The completed items of one type (``agent_message``, ``command_execution``, ``error``, ...)."""
        return [event["item"] for event in self.events
                if event.get("type") == "item.completed" and event.get("item", {}).get("type") == kind]

    @property
    def final_text(self) -> str | None:
        messages = self.items("agent_message")
        return str(messages[-1].get("text")) if messages else None

    @property
    def failure(self) -> str | None:
        """Why the turn failed (``turn.failed``), or the last top-level ``error`` event; None when it completed."""
        for event in reversed(self.events):
            if event.get("type") == "turn.failed":
                return str(event.get("error", {}).get("message"))
            if event.get("type") == "turn.completed":
                return None
        errors = [event for event in self.events if event.get("type") == "error"]
        return str(errors[-1].get("message")) if errors else None

    def explain(self) -> str:
        return f"exit {self.returncode}\nstdout:\n{self.stdout[-6000:]}\nstderr:\n{self.stderr[-6000:]}"


def codex_binary() -> Path:
    """The pinned CLI; skipped locally when ``npm ci`` has not been run, a failure under ``CI=true``.

    ``bin/codex.js`` only launches the native binary of the platform package npm installed beside it;
    an install without optional dependencies (``--omit=optional``) has the script and no binary.
    """
    script = CLIENTS / "node_modules" / ".bin" / "codex"
    message = ""
    if not script.exists():
        message = f"the pinned Codex CLI is not installed ({script}): run `{INSTALL}` (.ci/run does it)"
    elif not any((CLIENTS / "node_modules").glob(NATIVE_GLOB)):
        message = (f"Codex's native binary is missing (no {NATIVE_GLOB} under {CLIENTS / 'node_modules'}): "
                   f"optional dependencies were left out; run `{INSTALL}`")
    if message:
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return script


def _toml_value(value: TomlValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(json.dumps(item) for item in value) + "]"
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def to_toml(settings: Settings, prefix: str = "") -> str:
    """``settings`` as TOML: a table's plain keys first, then its sub-tables (TOML's order rule)."""
    plain = [f"{key} = {_toml_value(value)}" for key, value in settings.items() if not isinstance(value, dict)]
    lines = "\n".join(plain) + ("\n" if plain else "")
    for key, value in settings.items():
        if isinstance(value, dict):
            name = f"{prefix}.{key}" if prefix else key
            lines += f"\n[{name}]\n" + to_toml(value, name)
    return lines


def merge(base: Settings, override: Settings) -> Settings:
    merged = dict(base)
    for key, value in override.items():
        current = merged.get(key)
        merged[key] = merge(current, value) if isinstance(current, dict) and isinstance(value, dict) else value
    return merged


def codex_config(base_url: str, model: str, overrides: Settings | None = None) -> Settings:
    """The whole ``config.toml``: the gateway as the only provider, nothing that reaches the network unasked.

    ``base_url`` is the gateway's ``/v1`` (Codex appends ``/responses``). ``overrides`` are merged in
    (e.g. ``{"model_auto_compact_token_limit": 20000}`` or a provider's ``capabilities``).
    """
    settings: Settings = {
        "model": model,
        "model_provider": PROVIDER_ID,
        "approval_policy": "never",
        "sandbox_mode": "danger-full-access",
        "check_for_update_on_startup": False,
        "analytics": {"enabled": False},
        "feedback": {"enabled": False},
        "otel": {"exporter": "none", "metrics_exporter": "none", "trace_exporter": "none"},
        "features": {"plugins": False, "apps": False},
        "model_providers": {PROVIDER_ID: {
            "name": "Loopgate",
            "base_url": base_url,
            "env_key": KEY_ENV,
            "wire_api": "responses",
            "request_max_retries": 0,
            "stream_max_retries": 0,
            "stream_idle_timeout_ms": 60_000,
        }},
    }
    return merge(settings, overrides or {})


def codex_env(home: Path, api_key: str) -> dict[str, str]:
    """The CLI's whole environment: the kept parent variables, a temporary home, the key, the blackhole proxy."""
    env = {name: os.environ[name] for name in KEPT if name in os.environ}
    no_proxy = "127.0.0.1,localhost,::1"
    env.update({
        "HOME": str(home),
        "CODEX_HOME": str(home / ".codex"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "TMPDIR": str(home / "tmp"),
        KEY_ENV: api_key,
        "HTTP_PROXY": BLACKHOLE_PROXY,
        "HTTPS_PROXY": BLACKHOLE_PROXY,
        "ALL_PROXY": BLACKHOLE_PROXY,
        "http_proxy": BLACKHOLE_PROXY,
        "https_proxy": BLACKHOLE_PROXY,
        "all_proxy": BLACKHOLE_PROXY,
        "NO_PROXY": no_proxy,
        "no_proxy": no_proxy,
        "TERM": "dumb",
        "NO_COLOR": "1",
    })
    return env


def codex_command(binary: Path, prompt: str, cwd: Path) -> list[str]:
    """One non-interactive turn printing JSONL events; no session files (``--ephemeral``), no git check."""
    return [str(binary), "exec", "--json", "--strict-config", "--ephemeral", "--skip-git-repo-check",
            "--ignore-rules", "--color", "never", "-C", str(cwd), "--", prompt]


def parse_events(stdout: str) -> list[dict[str, Any]]:
    events = []
    for line in stdout.splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def run_codex(base_url: str, prompt: str, *, api_key: str, cwd: Path, model: str,
              overrides: Settings | None = None, extra_env: dict[str, str] | None = None,
              timeout: float = 120) -> CodexRun:
    """Run one headless prompt to completion in ``cwd`` (where its shell tool runs) with ``model`` at ``base_url``.

    ``extra_env`` goes over the isolated environment (the harness test points the proxy variables at a
    listener of its own, to see that nothing tries to leave loopback).
    """
    command = codex_command(codex_binary(), prompt, cwd)
    with tempfile.TemporaryDirectory(prefix="loopgate-codex-home-", ignore_cleanup_errors=True) as temp:
        home = Path(temp)
        for sub in (".codex", ".config", ".cache", "tmp"):
            (home / sub).mkdir()
        (home / ".codex" / "config.toml").write_text(to_toml(codex_config(base_url, model, overrides)))
        process = subprocess.Popen(command, cwd=cwd, env={**codex_env(home, api_key), **(extra_env or {})},
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, start_new_session=True)
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            run = CodexRun(process.returncode, stdout, stderr)
            pytest.fail(f"codex did not finish within {timeout} s\n{run.explain()}")
    return CodexRun(process.returncode, stdout, stderr, parse_events(stdout))
