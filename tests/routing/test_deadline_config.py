"""``loopgate check-config`` warns about targets that can use up the whole request deadline."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config import parse_config
from gateway.config.validate import deadline_warnings

ROOT = Path(__file__).resolve().parents[2]
CONFIG = """
providers:
  slow: {type: openai, base_url: "http://127.0.0.1:9", timeout_s: 300}
  quick: {type: openai, base_url: "http://127.0.0.1:9", timeout_s: 30}
models:
  risky: {targets: [{provider: slow, model: a}, {provider: quick, model: b}], retries: 2}
  fine: {targets: [{provider: quick, model: b}, {provider: slow, model: a}]}
routing: {request_timeout_s: 900}
"""


def test_a_target_whose_retries_and_timeouts_fill_the_deadline_is_named() -> None:
    warnings = deadline_warnings(parse_config(CONFIG))
    # 3 x 300 s >= 900 s; 3 x 30 s and 1 x 300 s fit.
    assert len(warnings) == 1
    assert warnings[0].startswith("models.risky: target slow:a: (retries + 1) x timeout_s = 900 s")
    assert "the targets after it may never be tried" in warnings[0]


@pytest.mark.slow
def test_check_config_prints_the_warning_and_still_succeeds(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(CONFIG)
    run = subprocess.run([sys.executable, "-m", "gateway", "check-config", "--config", str(path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "config OK" in run.stdout
    assert run.stderr.count("loopgate: warning: ") == 1
    assert "models.risky: target slow:a" in run.stderr


def test_the_example_config_gives_no_warning() -> None:
    assert deadline_warnings(parse_config((ROOT / "config" / "gateway.yaml").read_text(), env={})) == []
