"""Re-record ``tests/fixtures/claude_code/session.json``: what the pinned Claude Code sends, as ground truth.

Run ``python -m tests.e2e.record_claude_code`` after bumping the pin in ``tests/clients/package.json``
(and ``npm ci``) and review the diff: it is the wire contract ``POST /v1/messages`` has to accept.
The session is the harness test's own (``run echo loopgate-ok`` against the scripted fake). Values
that change on every run (working directory, temporary HOME, port, session and device ids) are replaced by
placeholders so that a re-recording differs only where the CLI changed.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.e2e.claude_code import ROOT, claude_command, run_claude
from tests.fakes.anthropic_scripted import ScriptedAnthropic

FIXTURE = ROOT / "tests" / "fixtures" / "claude_code" / "session.json"
PROMPT = "run echo loopgate-ok"
API_KEY = "sk-ant-loopgate-test"


def normalise(text: str, cwd: Path, url: str) -> str:
    """Run-specific values replaced by placeholders (on the serialised JSON, so nested strings are covered)."""
    # The memory directory is named after the working directory, slashes turned into dashes.
    text = text.replace(str(cwd.resolve()).replace("/", "-"), "<cwd-slug>")
    text = text.replace(str(cwd.resolve()), "<cwd>").replace(str(cwd), "<cwd>")
    text = re.sub(r"[^\s\"'`]*loopgate-claude-home-[A-Za-z0-9_]+", "<home>", text)
    text = text.replace(url.removeprefix("http://"), "<host>")
    for field, placeholder in (("session_id", "<session-id>"), ("device_id", "<device-id>")):
        # metadata.user_id is itself JSON inside a string, hence the escaped quotes.
        for value in set(re.findall(rf'\\"{field}\\":\\"([0-9a-zA-Z-]+)\\"', text)):
            text = text.replace(value, placeholder)
    return text


def record() -> dict[str, Any]:
    """One session against the scripted fake, with its command line and the requests it made."""
    fake = ScriptedAnthropic().start()
    try:
        with tempfile.TemporaryDirectory(prefix="loopgate-claude-cwd-") as temp:
            cwd = Path(temp)
            run = run_claude(fake.url, PROMPT, api_key=API_KEY, cwd=cwd, timeout=60)
            if run.returncode != 0 or run.result is None:
                raise SystemExit(f"claude failed ({run.returncode}):\n{run.stdout}\n{run.stderr}")
            version = json.loads((ROOT / "tests/clients/package.json").read_text())["dependencies"]
            session = {
                "claude_code": version["@anthropic-ai/claude-code"],
                "argv": ["claude", *claude_command(Path("claude"), PROMPT, None, None)[1:]],
                "result": run.result.get("result"),
                "requests": [seen.as_dict() for seen in fake.requests],
            }
            normalised: dict[str, Any] = json.loads(normalise(json.dumps(session), cwd, fake.url))
            return normalised
    finally:
        fake.stop()


def main() -> None:
    session = record()
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps(session, indent=2, ensure_ascii=False) + "\n")
    print(f"{FIXTURE.relative_to(ROOT)}: {len(session['requests'])} requests", file=sys.stderr)


if __name__ == "__main__":
    main()
