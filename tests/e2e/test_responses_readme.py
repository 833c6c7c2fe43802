"""The Responses API page's example (docs/surfaces/responses.md), as written, against the example config
as shipped (its demo tool ``book_meeting`` needs approval)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.e2e.conftest import ROOT, Gateway


def readme_example() -> str:
    """The first Python block of the Responses API page (the reference moved out of the README)."""
    text = (ROOT / "docs" / "surfaces" / "responses.md").read_text()
    assert "Runnable as written against the example config" in text
    match = re.search(r"```python\n(.*?)```", text, re.S)
    assert match is not None
    return match.group(1)


def test_the_docs_responses_example_runs() -> None:
    config = (ROOT / "config" / "gateway.yaml").read_text()  # as shipped: book_meeting needs approval
    gateway = Gateway(config.replace("port: 8080", "port: __PORT__")).start()
    try:
        code = readme_example().replace("127.0.0.1:8080", f"127.0.0.1:{gateway.port}")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[0] == "The lookup_order tool returned: shipped yesterday"
        assert lines[1].startswith("['mcp_call', 'message'] The book_meeting tool returned:")
        assert lines[2] == "You said: Hello"
    finally:
        gateway.stop()
