"""The secrets a deployment seals with (``gateway/governance/sealing_keys.py``): configured keys first, else the
deployment's key-id key, which a restart or another replica sharing the store derives the same."""

from __future__ import annotations

import logging

import pytest

from gateway.canonical.sealing import SealBroken, Sealer
from gateway.config.validate import build_config
from gateway.governance.sealing_keys import deployment_sealer

KEY_A, KEY_B = "a" * 32, "b" * 32
ID_KEY = b"i" * 32


def test_configured_keys_seal_and_the_key_id_key_is_not_used() -> None:
    config = build_config({"responses": {"sealing_keys": [KEY_B, KEY_A]}})
    sealer = deployment_sealer(config, ID_KEY, shared_store=False)
    token = sealer.seal("t", "compaction", 1)
    assert Sealer([KEY_B.encode()]).unseal("t", "compaction", token) == 1
    assert sealer.unseal("t", "compaction", Sealer([KEY_A.encode()]).seal("t", "compaction", 2)) == 2
    with pytest.raises(SealBroken):
        deployment_sealer(build_config({}), ID_KEY, shared_store=True).unseal("t", "compaction", token)


def test_without_keys_the_same_key_id_key_gives_the_same_sealer(caplog: pytest.LogCaptureFixture) -> None:
    config = build_config({})
    with caplog.at_level(logging.WARNING, "loopgate.sealing"):
        token = deployment_sealer(config, ID_KEY, shared_store=True).seal("t", "compaction", 3)
        assert deployment_sealer(config, ID_KEY, shared_store=True).unseal("t", "compaction", token) == 3
    assert not caplog.records  # a shared store: every replica derives the same key
    with pytest.raises(SealBroken):  # the derived secret is never the id key itself
        Sealer([ID_KEY]).unseal("t", "compaction", token)
    with pytest.raises(SealBroken):
        deployment_sealer(config, b"j" * 32, shared_store=True).unseal("t", "compaction", token)


def test_a_key_of_this_process_only_is_said(caplog: pytest.LogCaptureFixture) -> None:
    keyed = build_config({"auth": {"keys": [{"key": "k" * 20, "tenant": "t"}]}})
    with caplog.at_level(logging.INFO, "loopgate.sealing"):
        deployment_sealer(keyed, ID_KEY, shared_store=False)
        deployment_sealer(build_config({}), ID_KEY, shared_store=False)  # auth off: development, only a note
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]
    assert "responses.sealing_keys" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, "loopgate.sealing"):
        deployment_sealer(build_config({"auth": {"key_id_secret": "x" * 20}}), ID_KEY, shared_store=False)
    assert not caplog.records
