"""Re-record ``tests/fixtures/codex/*.json``: what the pinned Codex CLI sends, as ground truth.

Run ``python -m tests.e2e.record_codex`` after bumping the pin in ``tests/clients/package.json`` (and
``npm ci``) and review the diff: it is the wire contract ``/v1/responses`` has to accept from Codex.
Each session runs the real CLI against ``tests/fakes/responses_scripted.py``:

- ``session.json``: a turn that runs Codex's own ``exec_command`` tool: the first request (every tool
  type Codex sends, its headers) and the follow-up carrying the command's output;
- ``compaction_v2.json``: the same turn with a small ``model_auto_compact_token_limit`` and the
  provider's ``capabilities.remote_compaction = "v2"``: the mid-turn request whose input ends with a
  ``compaction_trigger`` item (answered with one ``compaction`` item) and the request that sends it back;
- ``compaction_local.json``: the same without that capability (any custom provider's default): Codex
  summarises with an ordinary turn ending with its summarisation prompt.

Values that change on every run (directories, port, ids Codex mints, timestamps, the date) are replaced
by placeholders (times by 0), and keys are sorted (Codex writes ``client_metadata`` in hash order), so that a
re-recording differs only where the CLI changed.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.e2e.codex import ROOT, Settings, codex_command, codex_config, run_codex, to_toml
from tests.fakes.anthropic_scripted import Recorded
from tests.fakes.responses_scripted import (
    CallReply,
    CompactionReply,
    Reply,
    ScriptedResponses,
    TextReply,
    asks_compaction,
    has_call_output,
    input_items,
)

FIXTURES = ROOT / "tests" / "fixtures" / "codex"
PROMPT = "run echo loopgate-ok"
API_KEY = "sk-loopgate-codex-test"
DONE = "All done: loopgate-ok"
SUMMARY = "Summary: ran echo loopgate-ok, it printed loopgate-ok."
#: the usage the tool call reports: past the limit below, so Codex compacts before sending its output back
FULL = 50_000
#: above what Codex estimates its own first request at (its tools alone are ~10k tokens), below FULL
COMPACT_AT: Settings = {"model_auto_compact_token_limit": 20_000, "model_context_window": 100_000}
UUID = re.compile(r"(?<![0-9a-f])[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(?![0-9a-f])")


def asks_summary(items: list[dict[str, Any]]) -> bool:
    """Codex's local compaction: an ordinary turn whose last user message is its summarisation prompt."""
    return bool(items) and items[-1].get("role") == "user" and "CONTEXT CHECKPOINT" in json.dumps(items[-1])


def exec_then_done(seen: Recorded) -> Reply:
    """Ask for ``echo loopgate-ok``; answer once its output, or a compaction that replaced it, is back."""
    if asks_compaction(seen.body):
        return CompactionReply()
    items = input_items(seen.body)
    compacted = any(item.get("type") == "compaction" for item in items) or SUMMARY in json.dumps(items)
    if (has_call_output(seen.body, "loopgate-ok") and not asks_summary(items)) or compacted:
        return TextReply(DONE)
    if asks_summary(items):
        return TextReply(SUMMARY)
    return CallReply("exec_command", {"cmd": "echo loopgate-ok"}, input_tokens=FULL)


def normalise(text: str, cwd: Path, url: str) -> str:
    """Run-specific values replaced by placeholders (on the serialised JSON, so nested strings are covered)."""
    text = text.replace(str(cwd.resolve()), "<cwd>").replace(str(cwd), "<cwd>")
    text = re.sub(r"/tmp/loopgate-codex-home-[A-Za-z0-9_]+", "<home>", text)
    text = text.replace(url.removeprefix("http://"), "<host>")
    numbered: dict[str, str] = {}
    text = UUID.sub(lambda found: numbered.setdefault(found.group(0), f"<uuid-{len(numbered) + 1}>"), text)
    # Numbers stay numbers (the metadata header is JSON inside a string): zero stands for "a time".
    text = re.sub(r'(\\"turn_started_at_unix_ms\\":)\d+', r"\g<1>0", text)
    text = re.sub(r'("create_time": )[0-9.]+', r"\g<1>0", text)
    text = re.sub(r"(Chunk ID: )[0-9a-f]+", r"\1<chunk>", text)
    text = re.sub(r"(Wall time: )[0-9.]+", r"\1<s>", text)
    return re.sub(r"<current_date>[0-9-]+</current_date>", "<current_date><date></current_date>", text)


def record(name: str, overrides: Settings, script: Callable[[Recorded], Reply] = exec_then_done) -> dict[str, Any]:
    """One session against the scripted fake: the CLI's command line, config, events and every request."""
    fake = ScriptedResponses(script).start()
    try:
        with tempfile.TemporaryDirectory(prefix="loopgate-codex-cwd-") as temp:
            cwd = Path(temp)
            base_url = f"{fake.url}/v1"
            run = run_codex(base_url, PROMPT, api_key=API_KEY, cwd=cwd, model="fake-model", overrides=overrides,
                            timeout=90)
            if run.returncode != 0 or run.final_text != DONE:
                raise SystemExit(f"{name}: codex failed\n{run.explain()}")
            version = json.loads((ROOT / "tests/clients/package.json").read_text())["dependencies"]
            session = {
                "codex": version["@openai/codex"],
                "argv": ["codex", *codex_command(Path("codex"), PROMPT, cwd)[1:]],
                "config_toml": to_toml(codex_config(base_url, "fake-model", overrides)),
                "events": run.events,
                "requests": [seen.as_dict() for seen in fake.requests],
            }
            normalised: dict[str, Any] = json.loads(normalise(json.dumps(session, sort_keys=True), cwd, fake.url))
            return normalised
    finally:
        fake.stop()


SESSIONS: dict[str, Settings] = {
    "session": {},
    "compaction_v2": {**COMPACT_AT, "model_providers": {"loopgate": {"capabilities": {"remote_compaction": "v2"}}}},
    "compaction_local": COMPACT_AT,
}


def main() -> None:
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for name, overrides in SESSIONS.items():
        session = record(name, overrides)
        path = FIXTURES / f"{name}.json"
        path.write_text(json.dumps(session, indent=2, ensure_ascii=False) + "\n")
        print(f"{path.relative_to(ROOT)}: {len(session['requests'])} requests", file=sys.stderr)


if __name__ == "__main__":
    main()
