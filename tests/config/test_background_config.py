"""The ``background`` config section: defaults, bounds, and errors that name the bad key."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError
from gateway.config.model import BackgroundConfig
from gateway.config.validate import build_config


def test_defaults_when_absent() -> None:
    assert build_config({}).background == BackgroundConfig()
    assert BackgroundConfig().max_concurrent == 64 and BackgroundConfig().lease_s == 30.0


def test_values_are_read() -> None:
    config = build_config({"background": {"max_concurrent": 3, "max_events": 100, "max_event_bytes": 65536,
                                          "lease_s": 10, "heartbeat_s": 2, "poll_s": 0.5}}).background
    assert config == BackgroundConfig(max_concurrent=3, max_events=100, max_event_bytes=65536,
                                     lease_s=10.0, heartbeat_s=2.0, poll_s=0.5)


@pytest.mark.parametrize(("section", "path"), [
    ({"max_concurrent": -1}, "background.max_concurrent"),
    ({"max_events": 1}, "background.max_events"),
    ({"max_event_bytes": 10}, "background.max_event_bytes"),
    ({"lease_s": 0}, "background.lease_s"),
    ({"poll_s": 60}, "background.poll_s"),
    ({"lease_s": 4, "heartbeat_s": 3}, "background.heartbeat_s"),
    ({"max_concurrent": "many"}, "background.max_concurrent"),
    ({"lease": 4}, "background.lease"),
])
def test_bad_values_name_the_key(section: dict[str, object], path: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_config({"background": section})
    assert info.value.path == path


def test_a_background_key_elsewhere_names_its_section() -> None:
    with pytest.raises(ConfigError) as info:
        build_config({"routing": {"lease_s": 3}})
    assert "background.lease_s" in str(info.value)
