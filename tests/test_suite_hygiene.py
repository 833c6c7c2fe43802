"""The test suite and CI keep to their rules: never a developer's Redis, tests where their package is, the
README's test command is what CI runs, a quick subset exists, and nothing the project ships refers to a file
that is not there."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

from tests.test_first_run import readme_block

ROOT = Path(__file__).resolve().parents[1]
_DEVELOPERS_REDIS = re.compile(r"(127\.0\.0\.1|localhost):6379\b")


def test_the_suites_redis_is_its_own_never_the_one_on_6379() -> None:
    url = os.environ["LOOPGATE_TEST_REDIS_URL"]
    if not os.environ.get("LOOPGATE_TEST_REDIS_OWNER"):  # named from outside: the developer's choice
        return
    assert os.environ["LOOPGATE_TEST_REDIS_OWNER"] == str(os.getpid()), "each test process starts its own"
    assert not _DEVELOPERS_REDIS.search(url), url
    offenders = [str(path.relative_to(ROOT)) for path in (ROOT / "tests").rglob("*.py")
                 if _DEVELOPERS_REDIS.search(path.read_text(encoding="utf-8")) and path.name != Path(__file__).name]
    assert offenders == [], f"tests that reach (or default to) a Redis on 6379: {offenders}"


#: tests/ folders that mirror no package: end to end, and the security properties that cut across packages
_CROSS_CUTTING = {"e2e", "security"}
#: the top level's tests of the whole project: its import graph and sizes, docs, deployment files, first run, start-up
_WHOLE_PROJECT = {"architecture", "layout", "docs", "docs_examples", "suite_hygiene", "compose", "helm_chart",
                  "first_run", "startup"}


def test_the_tests_mirror_the_packages() -> None:
    """A test of one package is in ``tests/<package>/``; the top level holds the tests of gateway's top-level
    modules (``tests/test_<module>.py``) and those of the whole project, so a new test's place is never a guess."""
    tests = ROOT / "tests"
    packages = {init.parent.name for init in (ROOT / "gateway").glob("*/__init__.py")}
    folders = {path.relative_to(tests).parts[0] for path in tests.rglob("test_*.py")
               if path.parent != tests and path.relative_to(tests).parts[0] != "clients"}
    assert folders - packages - _CROSS_CUTTING == set(), "a tests/ folder that mirrors no gateway/ package"
    modules = {module.stem for module in (ROOT / "gateway").glob("*.py")}
    top_level = {path.stem.removeprefix("test_") for path in tests.glob("test_*.py")}
    assert top_level - modules - _WHOLE_PROJECT == set(), "move these into tests/<the package they test>/"


def test_ci_starts_and_flushes_no_redis_of_its_own() -> None:
    lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    script = "\n".join(line for line in lines if not line.lstrip().startswith("#"))  # what runs, not comments
    assert "6379" not in script
    assert not re.search(r"^\s*redis-(server|cli)\b", script, re.MULTILINE), "CI only installs the binaries"
    assert "flush" not in script.lower()


def test_the_readmes_test_command_is_what_ci_runs_and_ci_fails_loudly() -> None:
    readme = readme_block("bash", "pytest").splitlines()[-1]
    command = readme.rsplit("&& ", 1)[1]
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert f'TEST_COMMAND="{command}"' in script
    assert re.search(r"^\$TEST_COMMAND ", script, re.MULTILINE)
    assert "-m" not in command.split(), "CI runs every test, the slow ones included"
    # No test collected (exit 5) and no "N passed" both fail the run, as does any failing test.
    assert '"$status" -eq 5' in script and '"$status" -ne 0' in script and "[0-9]+ passed" in script
    assert script.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in script


def test_the_slow_marker_is_registered_strictly_and_the_quick_subset_documented() -> None:
    pytest_options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert any(marker.startswith("slow:") for marker in pytest_options["markers"])
    assert "--strict-markers" in pytest_options["addopts"]
    for page in ("README.md", "docs/getting-started.md"):
        assert 'pytest -m "not slow"' in (ROOT / page).read_text(encoding="utf-8"), page


def test_the_license_matches_pyproject_and_nothing_cites_a_missing_file() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    for name in project["license-files"]:
        text = (ROOT / name).read_text(encoding="utf-8")
        assert "Apache License" in text and "Version 2.0, January 2004" in text
        assert "END OF TERMS AND CONDITIONS" in text  # the full text, not a pointer to it
    assert (ROOT / "CHANGELOG.md").is_file()
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert not re.search(r"\bNOTES\b(?!\.)", pyproject), "pyproject.toml cites a NOTES file the repository lacks"
    # Files the README names in backquotes exist.
    for name in re.findall(r"`((?:[\w.-]+/)*[\w-]+\.(?:md|py|yaml|yml|json|toml|cfg))`",
                           (ROOT / "README.md").read_text(encoding="utf-8")):
        if "/" in name and "*" not in name and not name.startswith(("./", "tests/e2e/test_claude_code_")):
            assert (ROOT / name).exists(), f"README.md names {name}, which does not exist"
    for name in ("LICENSE", "CHANGELOG.md"):
        assert (ROOT / name).exists()


def test_each_xdist_worker_gets_its_own_redis_or_its_own_db() -> None:
    import shutil
    import subprocess
    import sys

    import pytest

    from tests.conftest import _per_worker_db

    # A server named from outside is shared: each worker gets its own db, as tests flush theirs.
    assert [_per_worker_db("redis://h:7000/15", f"gw{n}") for n in range(3)] == [
        "redis://h:7000/15", "redis://h:7000/14", "redis://h:7000/13"]
    with pytest.raises(RuntimeError, match="not enough for this many xdist workers"):
        _per_worker_db("redis://h:7000/15", "gw16")
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    # A URL inherited from the xdist controller (started by another process) is not reused: a server of its own.
    inherited = {**os.environ, "LOOPGATE_TEST_REDIS_URL": "redis://127.0.0.1:1/15", "LOOPGATE_TEST_REDIS_OWNER": "1",
                 "PYTHONPATH": str(ROOT), "PYTEST_XDIST_WORKER": "gw1"}
    script = "import os, tests.conftest; tests.conftest.use_test_redis(); print(os.environ['LOOPGATE_TEST_REDIS_URL'])"
    done = subprocess.run([sys.executable, "-c", script], env=inherited, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    url = done.stdout.strip()
    assert url.startswith("redis://127.0.0.1:") and url != "redis://127.0.0.1:1/15" and url.endswith("/15")


def test_long_tests_head_the_workers_first_shares_longest_first() -> None:
    from dataclasses import dataclass, field
    from types import SimpleNamespace
    from typing import Any, cast

    import pytest

    from tests.conftest import _share_sizes, pytest_collection_modifyitems

    @dataclass
    class Item:  # what the ordering reads of a pytest item: its id, its module and its `long` marker
        nodeid: str
        seconds: float | None = None
        module: Any = field(default_factory=SimpleNamespace)

        def get_closest_marker(self, name: str) -> Any:
            return pytest.mark.long(seconds=self.seconds).mark if self.seconds and name == "long" else None

    # xdist's worksteal hands out len(pending) // nodes_remaining per idle node, in turn.
    assert _share_sizes(10, 4) == [2, 2, 3, 3] and sum(_share_sizes(2770, 4)) == 2770
    items = [Item(f"t{i}.py::t") for i in range(12)]
    items[9].seconds, items[11].seconds, items[3].seconds = 80, 20, 80
    config = cast(pytest.Config, SimpleNamespace(workerinput={"workercount": 3}))
    ordered = list(items)
    pytest_collection_modifyitems(config, cast(list[pytest.Item], ordered))
    assert sorted(i.nodeid for i in ordered) == sorted(i.nodeid for i in items)  # nothing lost or doubled
    heads = [ordered[0], ordered[4], ordered[8]]  # the first test of each worker's share (4, 4, 4)
    assert [h.nodeid for h in heads] == ["t3.py::t", "t9.py::t", "t11.py::t"]
