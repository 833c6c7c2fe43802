"""Run the pinned Claude Code CLI headless against a base URL, isolated from the developer's own setup.

``POST /v1/messages`` is accepted only when Claude Code itself completes a tool turn through the
gateway, so the tests drive the real CLI (``@anthropic-ai/claude-code``, pinned in
``tests/clients/package.json``), not a re-creation of its requests. Isolation is the point of
this module: a temporary HOME and config directory (no login, settings, sessions or CLAUDE.md of
the machine's user leak in or get written to), no ``ANTHROPIC_*`` / ``CLAUDE_*`` variables from the
parent environment, and the non-essential traffic (auto-updater, telemetry, error reporting) off,
so the only HTTP the CLI makes goes to the base URL under test. As a guard, every other host is sent
to a proxy on a closed local port: a CLI release that phones home anyway fails fast on loopback
instead of reaching the internet from a test.

Permissions: the tests run as root, where ``--dangerously-skip-permissions`` (and ``--permission-mode
bypassPermissions``) is refused ("cannot be used with root/sudo privileges"). ``--allowedTools Bash``
lets the Bash tool run without a prompt, and ``--permission-prompts none`` makes anything else that
would prompt a denial the model sees, never a wait for an answer that cannot come.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = ROOT / "tests" / "clients"
INSTALL = "npm ci --prefix tests/clients --no-audit --no-fund"
#: below this size bin/claude is the placeholder shell script, not the native CLI (about 400 MB)
STUB_BYTES = 1024 * 1024
#: the parent variables kept: what a process needs to run at all, nothing that configures Claude Code
KEPT = ("PATH", "SHELL", "LANG", "LC_ALL", "TZ")
#: where traffic for any host but the base URL's goes: the discard port on loopback, closed on any test machine
BLACKHOLE_PROXY = "http://127.0.0.1:9"
#: the tools allowed when the caller does not say: the harness exists to see Claude Code run a command
DEFAULT_TOOLS = ("Bash",)


@dataclass
class ClaudeRun:
    """One finished CLI run; ``result`` is the parsed ``--output-format json`` object, None when not JSON."""

    returncode: int
    stdout: str
    stderr: str
    result: dict[str, Any] | None


def claude_binary() -> Path:
    """The pinned CLI; skipped locally when ``npm ci`` has not been run, a failure under ``CI=true``.

    The package's ``bin/claude.exe`` is a shell stub until its postinstall copies the native binary
    over it (``--ignore-scripts``, or an npm that does not run install scripts, leaves the stub):
    a stub counts as not installed, with the command that finishes the install.
    """
    binary = CLIENTS / "node_modules" / ".bin" / "claude"
    message = ""
    if not binary.exists():
        message = f"the pinned Claude Code CLI is not installed ({binary}): run `{INSTALL}` (.ci/run does it)"
    elif binary.stat().st_size < STUB_BYTES:
        message = (f"{binary} is the package's stub, its postinstall did not run: run "
                   f"`node {CLIENTS / 'node_modules/@anthropic-ai/claude-code/install.cjs'}`")
    if message:
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return binary


def claude_env(base_url: str, api_key: str, home: Path, extra_env: dict[str, str] | None = None) -> dict[str, str]:
    """The CLI's whole environment: only the kept parent variables, then ours, then ``extra_env``.

    An empty ``api_key`` leaves ``ANTHROPIC_API_KEY`` out (for a run that authenticates with
    ``ANTHROPIC_AUTH_TOKEN`` from ``extra_env``: with both set the CLI sends both headers).
    ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC`` already implies the three ``DISABLE_*`` switches; they
    are set too so that a later CLI that splits them differently still stays quiet (without them the
    CLI opens connections to api.anthropic.com itself, whatever the base URL).
    """
    env = {name: os.environ[name] for name in KEPT if name in os.environ}
    no_proxy = ",".join(dict.fromkeys(["127.0.0.1", "localhost", "::1", urlsplit(base_url).hostname or "127.0.0.1"]))
    env.update({
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "TMPDIR": str(home / "tmp"),
        "ANTHROPIC_BASE_URL": base_url,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "HTTP_PROXY": BLACKHOLE_PROXY,
        "HTTPS_PROXY": BLACKHOLE_PROXY,
        "http_proxy": BLACKHOLE_PROXY,
        "https_proxy": BLACKHOLE_PROXY,
        "NO_PROXY": no_proxy,
        "no_proxy": no_proxy,
        "TERM": "dumb",
        "NO_COLOR": "1",
    })
    if api_key:
        env["ANTHROPIC_API_KEY"] = api_key
    env.update(extra_env or {})
    return env


def claude_command(binary: Path, prompt: str, allowed_tools: list[str] | None, model: str | None) -> list[str]:
    """``-p`` (print: no TUI, no trust dialog) with one JSON result; nothing is saved for a later ``--resume``."""
    tools = list(DEFAULT_TOOLS) if allowed_tools is None else allowed_tools
    command = [str(binary), "-p", prompt, "--output-format", "json", "--no-session-persistence",
               "--permission-prompts", "none"]
    if tools:
        command += ["--allowedTools", ",".join(tools)]
    if model:
        command += ["--model", model]
    return command


def run_claude(base_url: str, prompt: str, *, api_key: str, cwd: Path, allowed_tools: list[str] | None = None,
               model: str | None = None, extra_env: dict[str, str] | None = None, timeout: float = 120) -> ClaudeRun:
    """Run one headless prompt to completion in ``cwd`` (where its Bash tool runs).

    ``allowed_tools`` None allows ``Bash``; ``[]`` allows nothing beyond what the CLI runs unasked
    (read-only commands such as ``echo``). ``model`` None keeps the CLI's default model. The CLI
    runs in a process group of its own, so a timeout kills it and whatever its Bash tool started,
    then fails the test with what it printed.
    """
    command = claude_command(claude_binary(), prompt, allowed_tools, model)
    with tempfile.TemporaryDirectory(prefix="loopgate-claude-home-", ignore_cleanup_errors=True) as temp:
        home = Path(temp)
        for sub in (".claude", ".config", ".cache", "tmp"):
            (home / sub).mkdir()
        process = subprocess.Popen(command, cwd=cwd, env=claude_env(base_url, api_key, home, extra_env),
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, start_new_session=True)
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            pytest.fail(f"claude did not finish within {timeout} s\nstdout:\n{stdout}\nstderr:\n{stderr}")
    try:
        parsed = json.loads(stdout)
    except json.JSONDecodeError:
        parsed = None
    return ClaudeRun(process.returncode, stdout, stderr, parsed if isinstance(parsed, dict) else None)
