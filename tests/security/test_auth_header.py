"""``authenticate``: the written-out path for ``Bearer <key>`` and the general one agree on every header."""

from __future__ import annotations

import time

import pytest

from gateway.config.model import ApiKey
from gateway.errors import GatewayError
from gateway.governance.keys import ANONYMOUS, KeyRing, authenticate

KEY = ApiKey(key="sk-live", tenant="t", id="k1", name="k1")
EXPIRED = ApiKey(key="sk-old", tenant="t", id="k2", name="k2", expires_at=time.time() - 1)


def _outcome(header: str | None, ring: KeyRing) -> str:
    try:
        return authenticate(header, ring).id
    except GatewayError as exc:
        return f"{exc.status} {exc.code}"


@pytest.mark.parametrize(("header", "expected"), [
    ("Bearer sk-live", "k1"),  # the written-out path
    ("bearer sk-live", "k1"), ("BEARER sk-live", "k1"),  # the scheme in any case: the general path
    ("Bearer   sk-live  ", "k1"), ("Bearer sk-live\t", "k1"),  # spaces around the token
    ("Bearer sk-old", "401 invalid_api_key"),  # expired: as unknown
    ("Bearer sk-other", "401 invalid_api_key"), ("Bearer sk-live2", "401 invalid_api_key"),
    ("Bearer ", "401 invalid_api_key"), ("Bearer    ", "401 invalid_api_key"), ("Bearer", "401 invalid_api_key"),
    ("", "401 invalid_api_key"), ("Basic sk-live", "401 invalid_api_key"), ("sk-live", "401 invalid_api_key"),
    ("Bearer sk-live extra", "401 invalid_api_key"),  # the whole rest is the token
    (None, "400 duplicate_authorization"),
    ("Bearer \udcff", "401 invalid_api_key"),  # a lone surrogate: hashed, not an error
])
def test_every_authorization_header_is_judged_alike(header: str | None, expected: str) -> None:
    ring = KeyRing([KEY, EXPIRED], enabled=True)
    assert _outcome(header, ring) == expected


@pytest.mark.parametrize("header", ["Bearer sk-live", "Bearer whatever", "", "Basic x"])
def test_without_keys_every_caller_is_anonymous_unless_the_header_came_twice(header: str) -> None:
    ring = KeyRing([], enabled=False)
    assert authenticate(header, ring) is ANONYMOUS
    assert _outcome(None, ring) == "400 duplicate_authorization"


def test_a_managed_key_is_found_and_a_revoked_one_is_not() -> None:
    from gateway.config.keys_section import secret_digest

    managed = ApiKey(key="", tenant="t", id="key_1", name="m", managed=True)
    revoked = ApiKey(key="", tenant="t", id="key_2", name="r", managed=True, revoked=True)
    ring = KeyRing([KEY], enabled=True)
    ring.replace_managed([(secret_digest("sk-managed"), managed), (secret_digest("sk-revoked"), revoked)])
    assert _outcome("Bearer sk-managed", ring) == "key_1"
    assert _outcome("bearer sk-managed", ring) == "key_1"
    assert _outcome("Bearer sk-revoked", ring) == "401 invalid_api_key"
    assert _outcome("Bearer sk-live", ring) == "k1"


def test_a_key_digest_is_sha256_of_its_utf8_whatever_came_before() -> None:
    """``secret_digest`` copies one shared empty state: no call may leave anything in it for the next
    (stored managed keys were hashed with ``hashlib.sha256`` directly)."""
    import hashlib

    from gateway.config.keys_section import secret_digest

    secrets = ["sk-live", "", "sk-live", "x" * 10_000, "sk-live", "é \udcff", "sk-live"]
    digests = [secret_digest(secret) for secret in secrets]
    assert digests == [hashlib.sha256(s.encode("utf-8", "surrogatepass")).digest() for s in secrets]
    assert len(set(digests)) == 4  # the same key hashes alike every time


def test_found_keys_are_remembered_by_secret_wrong_ones_never_and_a_snapshot_forgets_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.config.keys_section import secret_digest
    from gateway.governance import keys as auth

    managed = ApiKey(key="", tenant="t", id="key_1", name="m", managed=True)
    ring = KeyRing([KEY], enabled=True)
    ring.replace_managed([(secret_digest("sk-managed"), managed)])
    hashed: list[str] = []
    monkeypatch.setattr(auth, "secret_digest", lambda secret: hashed.append(secret) or secret_digest(secret))
    for _ in range(3):
        assert _outcome("Bearer sk-managed", ring) == "key_1"
        assert _outcome("Bearer sk-wrong", ring) == "401 invalid_api_key"
    assert hashed == ["sk-managed", "sk-wrong", "sk-wrong", "sk-wrong"]  # a found key is hashed once
    assert set(ring.digests) == {"sk-managed"}  # a wrong secret is never kept
    revoked = ApiKey(key="", tenant="t", id="key_1", name="m", managed=True, revoked=True)
    ring.replace_managed([(secret_digest("sk-managed"), revoked)])
    assert ring.digests == {}  # a new snapshot drops what was remembered
    assert _outcome("Bearer sk-managed", ring) == "401 invalid_api_key"
    assert _outcome("Bearer sk-live", ring) == "k1" and set(ring.digests) == {"sk-live"}


def test_the_memo_of_found_keys_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.governance import keys as auth

    monkeypatch.setattr(auth, "REMEMBERED_KEYS", 3)
    keys = [ApiKey(key=f"sk-{n}", tenant="t", id=f"k{n}", name=f"k{n}") for n in range(7)]
    ring = KeyRing(keys, enabled=True)
    for key in keys:
        assert _outcome(f"Bearer {key.key}", ring) == key.id
        assert len(ring.digests) <= 3
    assert _outcome("Bearer sk-0", ring) == "k0"  # forgotten or not, still found


def test_a_config_key_is_found_by_the_id_it_had_before_ids_were_keyed() -> None:
    """Work paused before the upgrade names its asker by the old id (the plain SHA-256 prefix)."""
    import hashlib

    ring = KeyRing([KEY], enabled=True)
    old_id = "cfg_" + hashlib.sha256(KEY.key.encode()).hexdigest()[:16]
    assert old_id != KEY.id and ring.find(old_id) is KEY and ring.find(KEY.id) is KEY
    assert ring.find("cfg_" + "0" * 16) is None
