"""The garbage collector's settings for a serving worker (gateway/gc_policy.py)."""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway import gc_policy
from gateway.config import ConfigError, parse_config
from gateway.observability import access_log

BASE = "providers: {p: {type: openai, api_key: k}}\nmodels: {m: {targets: [{provider: p, model: x}]}}\n"


@pytest.fixture
def restored_gc() -> Iterator[None]:
    """Whatever a test does to this process's collector is undone."""
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


@pytest.mark.slow
def test_settle_freezes_the_start_up_objects_and_raises_the_young_threshold(restored_gc: None) -> None:
    gc.unfreeze()
    before = gc.get_threshold()
    assert gc_policy.settle(5000)
    assert gc.get_threshold() == (5000, before[1], before[2])
    assert gc.get_freeze_count() > 1000  # the modules, the config, the test session: never walked again


def test_zero_keeps_pythons_settings(restored_gc: None) -> None:
    gc.unfreeze()
    before = gc.get_threshold()
    assert not gc_policy.settle(0)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_the_threshold_is_configured_and_bounded() -> None:
    assert parse_config(BASE).server.gc_young_threshold == 10_000
    assert parse_config("server: {gc_young_threshold: 0}\n" + BASE).server.gc_young_threshold == 0
    assert parse_config("server: {gc_young_threshold: 700}\n" + BASE).server.gc_young_threshold == 700
    for bad in ("5", "699", "1000001", "fast", "-1"):
        with pytest.raises(ConfigError) as caught:
            parse_config(f"server: {{gc_young_threshold: {bad}}}\n" + BASE)
        assert caught.value.path == "server.gc_young_threshold"


@pytest.mark.slow
def test_a_served_worker_settles_and_an_embedded_app_does_not(restored_gc: None, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from starlette.testclient import TestClient

    from gateway.api.app import create_app
    from gateway.cli import _app_factory

    gc.unfreeze()
    before = gc.get_threshold()
    config = parse_config("server: {gc_young_threshold: 4321}\n" + BASE)
    with TestClient(create_app(config)) as client:  # a test's or an embedding program's app: hands off
        assert client.get("/healthz").status_code == 200
        assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    path = tmp_path / "gateway.yaml"
    path.write_text("server: {gc_young_threshold: 4321}\n" + BASE)
    monkeypatch.setenv("LOOPGATE_CONFIG", str(path))
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, access_log.ACCESS)
    try:
        with TestClient(_app_factory()) as client:  # what each worker of ``loopgate serve --workers N`` runs
            assert client.get("/healthz").status_code == 200
            assert gc.get_threshold()[0] == 4321 and gc.get_freeze_count() > 0
    finally:  # the factory set up this process's logging, as a worker's
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        access_log.install(saved[2])
