"""Every fenced ``python`` and ``bash`` example in ``docs/`` runs as written against the starter config.

A new user pastes the docs' examples into a shell or an interpreter next to ``loopgate serve
--config config/gateway.yaml``; this test does the same against a real gateway started with that
file (no provider keys, no network beyond loopback) and checks each exits 0. The rules (also in
``docs/index.md``, "Examples"):

* The examples talk to ``http://127.0.0.1:8080`` (or ``localhost:8080``), the starter config's
  address; that is the one substitution made: it becomes the test gateway's port.
* A page's ``python`` blocks run in order in one interpreter, as a reader pasting them into one
  session would (a later block may use a name an earlier one defined); each ``bash`` block runs on
  its own under ``bash -e -o pipefail``.
* ``<!-- docs-example: admin -->`` on the line before a block: it runs against the starter config
  with its ``admin_keys`` example line switched on (``ADMIN_KEY`` set in its environment), since the
  admin API needs an admin key and one switches auth on for every other example.
* ``<!-- docs-example: skip: REASON -->``: not run; the reason is said on the page next to the
  block (real provider keys, Docker or Kubernetes, a CLI that is not a dependency). At most
  ``MAX_SKIPPED`` of them, each with a reason.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.conftest import Gateway

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
STARTER = ROOT / "config" / "gateway.yaml"
ADMIN_KEY = "docs-example-admin-key"
MAX_SKIPPED = 8
RUN_TIMEOUT_S = 120
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)
_MARK = re.compile(r"<!-- docs-example: (skip|admin)(?::\s*(.*?))?\s*-->")
_ADDRESS = re.compile(r"(127\.0\.0\.1|localhost):8080")
_PROVIDER_VARS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL",
                  "ANTHROPIC_AUTH_TOKEN", "LOOPGATE_STORE_URL", "LOOPGATE_CONFIG", "OTEL_COLLECTOR_URL")
#: the interpreter a page's python blocks run in: each block compiled under its page and line, one namespace
_RUNNER = """
import json, sys
namespace = {"__name__": "__main__"}
for where, code in json.load(sys.stdin):
    print(f"--- {where}", flush=True)
    exec(compile(code, where, "exec"), namespace)
"""
pytestmark = [pytest.mark.slow]


@dataclass(frozen=True)
class Example:
    page: str
    line: int
    language: str
    code: str
    mark: str | None  # None, "skip" or "admin"
    reason: str | None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def examples() -> list[Example]:
    found = []
    for path in sorted(DOCS.rglob("*.md")):
        text = path.read_text()
        for fence in _FENCE.finditer(text):
            language = fence.group(1)
            if language not in ("python", "bash"):
                continue
            before = text[:fence.start()].rstrip("\n").rsplit("\n", 1)[-1]
            mark = _MARK.fullmatch(before.strip())
            found.append(Example(str(path.relative_to(ROOT)), text.count("\n", 0, fence.start()) + 1, language,
                                 fence.group(2), mark.group(1) if mark else None, mark.group(2) if mark else None))
    return found


EXAMPLES = examples()
PAGES = sorted({e.page for e in EXAMPLES if e.language == "python" and e.mark is None})
BASH = [e for e in EXAMPLES if e.language == "bash" and e.mark != "skip"]


def starter_config(admin: bool) -> str:
    text = STARTER.read_text()
    assert text.count("port: 8080") == 1
    text = text.replace("port: 8080", "port: __PORT__")
    if admin:
        line = '  # admin_keys: [{key: "${ADMIN_KEY}", name: ops}]'
        assert line in text, "the starter config's admin_keys example line moved"
        text = text.replace(line, line.replace("# ", "", 1))
    return text


def no_provider_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _PROVIDER_VARS and k != "PYTHONPATH"}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def starter() -> Iterator[Gateway]:
    gateway = Gateway(starter_config(admin=False), env={name: "" for name in _PROVIDER_VARS}).start()
    yield gateway
    gateway.stop()


@pytest.fixture(scope="module")
def admin_starter() -> Iterator[Gateway]:
    gateway = Gateway(starter_config(admin=True),
                      env={**{name: "" for name in _PROVIDER_VARS}, "ADMIN_KEY": ADMIN_KEY}).start()
    yield gateway
    gateway.stop()


def at_port(code: str, port: int) -> str:
    return _ADDRESS.sub(lambda m: f"{m.group(1)}:{port}", code)


def test_opt_outs_are_few_and_each_says_why() -> None:
    skipped = [e for e in EXAMPLES if e.mark == "skip"]
    assert all(e.reason for e in skipped), [e.where for e in skipped if not e.reason]
    assert len(skipped) <= MAX_SKIPPED, [e.where for e in skipped]
    assert [e.where for e in EXAMPLES if e.mark == "admin" and e.language == "python"] == [], \
        "admin examples are bash (run on their own); a page's python session runs against one gateway"
    assert PAGES and BASH


@pytest.mark.parametrize("page", PAGES)
def test_a_pages_python_examples_run(page: str, starter: Gateway, tmp_path: Path) -> None:
    blocks = [(e.where, at_port(e.code, starter.port)) for e in EXAMPLES
              if e.page == page and e.language == "python" and e.mark is None]
    done = subprocess.run([sys.executable, "-c", _RUNNER], input=json.dumps(blocks).encode(), cwd=tmp_path,
                          env=no_provider_env(), capture_output=True, timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, (done.stdout.decode()[-3000:] + done.stderr.decode()[-3000:]
                                  + "\n--- gateway log:\n" + starter.logs()[-2000:])


@pytest.mark.parametrize("example", BASH, ids=[e.where for e in BASH])
def test_a_bash_example_runs(example: Example, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    gateway: Gateway = request.getfixturevalue("admin_starter" if example.mark == "admin" else "starter")
    env = no_provider_env(ADMIN_KEY=ADMIN_KEY) if example.mark == "admin" else no_provider_env()
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", at_port(example.code, gateway.port)],
                          cwd=tmp_path, env=env, capture_output=True, timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, (done.stdout.decode()[-3000:] + done.stderr.decode()[-3000:]
                                  + "\n--- gateway log:\n" + gateway.logs()[-2000:])
    assert b'"error"' not in done.stdout, done.stdout.decode()[-3000:]
