"""Sealing (``gateway/canonical/sealing.py``): opaque, tamper-evident, bound to a tenant and a kind, rotatable."""

from __future__ import annotations

import base64
import time

import pytest

from gateway.canonical.sealing import PREFIX, SealBroken, Sealer

SECRET, OTHER = b"s" * 32, b"o" * 32
PAYLOAD = {"summary": "The user wants a Lisbon offsite; budget 9000 EUR.", "n": [1, 2, 3]}


def test_round_trip_and_opacity() -> None:
    sealer = Sealer([SECRET])
    token = sealer.seal("team-a", "compaction", PAYLOAD)
    assert token.startswith(PREFIX) and "Lisbon" not in token and "9000" not in token
    assert sealer.unseal("team-a", "compaction", token) == PAYLOAD
    assert sealer.seal("team-a", "compaction", PAYLOAD) != token  # a fresh nonce each time
    assert Sealer([SECRET]).unseal("team-a", "compaction", token) == PAYLOAD  # another process, same secret


def test_every_changed_byte_is_refused() -> None:
    sealer = Sealer([SECRET])
    token = sealer.seal("team-a", "compaction", {"summary": "x"})
    body = token[len(PREFIX):]
    raw = bytearray(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    for index in range(len(raw)):  # key id, nonce, ciphertext and tag alike
        changed = bytearray(raw)
        changed[index] ^= 0x01
        forged = PREFIX + base64.urlsafe_b64encode(bytes(changed)).rstrip(b"=").decode()
        with pytest.raises(SealBroken):
            sealer.unseal("team-a", "compaction", forged)


@pytest.mark.parametrize("token", [
    "", "lgs1.", "lgs1.AAAA", "lgs2." + "A" * 60, "gAAAAABo-fernet-from-someone-else", "lgs1.!!!!" + "A" * 60,
    "lgs1." + "A" * 60 + "=", "lgs1." + "A" * 60 + "\n",
], ids=["empty", "prefix-only", "short", "other-version", "foreign", "bad-alphabet", "padded", "newline"])
def test_what_is_not_a_sealed_token_is_refused(token: str) -> None:
    with pytest.raises(SealBroken):
        Sealer([SECRET]).unseal("team-a", "compaction", token)


def test_another_encoding_of_the_same_bytes_is_refused() -> None:
    sealer = Sealer([SECRET])
    token = sealer.seal("t", "compaction", 1)
    body = token[len(PREFIX):]
    standard = base64.b64encode(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))).decode()
    if standard.rstrip("=") != body:  # only when the token has a '-' or '_' to spell the other way
        with pytest.raises(SealBroken):
            sealer.unseal("t", "compaction", PREFIX + standard)


def test_bound_to_the_tenant_and_the_kind() -> None:
    sealer = Sealer([SECRET])
    token = sealer.seal("team-a", "compaction", PAYLOAD)
    for tenant, kind in (("team-b", "compaction"), ("team-a", "reasoning"), ("team-a ", "compaction"),
                         ("", "compaction"), ("team-acompaction", "")):
        with pytest.raises(SealBroken):
            sealer.unseal(tenant, kind, token)


def test_other_deployments_cannot_open_and_rotation_keeps_old_tokens() -> None:
    old = Sealer([SECRET]).seal("t", "compaction", PAYLOAD)
    with pytest.raises(SealBroken):
        Sealer([OTHER]).unseal("t", "compaction", old)
    rotated = Sealer([OTHER, SECRET])
    assert rotated.unseal("t", "compaction", old) == PAYLOAD  # the old secret still opens its tokens
    new = rotated.seal("t", "compaction", PAYLOAD)
    assert Sealer([OTHER]).unseal("t", "compaction", new) == PAYLOAD  # the first secret sealed it
    with pytest.raises(SealBroken):
        Sealer([SECRET]).unseal("t", "compaction", new)
    with pytest.raises(ValueError):
        Sealer([])


def test_hostile_sizes_are_refused_quickly() -> None:
    sealer = Sealer([SECRET])
    started = time.perf_counter()
    for token in ("lgs1." + "A" * 4_000_000, "lgs1." + "-" * 4_000_001, "x" * 4_000_000):
        with pytest.raises(SealBroken):
            sealer.unseal("t", "compaction", token)
    assert time.perf_counter() - started < 2.0  # bounded work: decoded once, one tag check at most
    big = {"summary": "y" * 1_000_000}
    assert sealer.unseal("t", "compaction", sealer.seal("t", "compaction", big)) == big
