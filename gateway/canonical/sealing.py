"""Sealing: state the gateway hands a caller to carry, that only this gateway can read, for one tenant.

A stateless client keeps state the gateway made for it and sends it back later: a compaction
item's summary (``POST /v1/responses/compact``), a reasoning item's provider artifacts. It must
be opaque (the caller learns nothing from it), tamper-evident (a changed byte is refused, never
sent on to a model) and bound to the tenant it was made for (one tenant cannot replay another's).
``Sealer.seal(tenant, kind, payload)`` gives such a token; ``Sealer.unseal(tenant, kind, token)``
gives the payload back, or raises :class:`SealBroken`.

The token is ``lgs1.`` + unpadded base64url of ``key id (4 bytes) | nonce (12) | ciphertext | tag (16)``:
AES-256-GCM over the payload's JSON, with the ``kind`` and the ``tenant`` as associated data (not
in the token, checked by the tag: a token of another tenant or of another kind does not open).
Each secret is stretched to its AES key with HKDF-SHA256, so any high-entropy string is a secret;
the key id (a digest of the derived key, not of the secret) lets a token name the key that sealed
it. The first secret seals, every secret unseals: to rotate, put the new secret first and keep the
old one listed until the tokens it sealed are no longer sent. A random 96-bit nonce per seal keeps
a key safe for far more seals than a deployment makes (2^32 per key by NIST's bound).

Which secrets a deployment uses is its configuration's business (``responses.sealing_keys``,
``governance/sealing_keys.py``); this module only seals and unseals.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Sequence
from typing import Any

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

PREFIX = "lgs1."
_KEY_ID_BYTES = 4
_NONCE_BYTES = 12
_TAG_BYTES = 16
_HKDF_SALT = b"loopgate sealing"
_HKDF_INFO = b"aes-256-gcm key v1"
_AAD_DOMAIN = b"loopgate-seal-v1"


class SealBroken(ValueError):
    """A token this gateway cannot open: not a sealed token, damaged, changed, sealed by a key it does not
    have, for another tenant or for another kind. Which of these is deliberately not told."""


def _derive(secret: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=_HKDF_SALT, info=_HKDF_INFO).derive(secret)


def _associated(tenant: str, kind: str) -> bytes:
    """What a token is bound to: the kind and the tenant, each length-prefixed (no two pairs give the same bytes)."""
    kind_bytes = kind.encode()
    tenant_bytes = tenant.encode("utf-8", "surrogatepass")
    return (_AAD_DOMAIN + len(kind_bytes).to_bytes(2, "big") + kind_bytes + len(tenant_bytes).to_bytes(4, "big")
            + tenant_bytes)


def _encoded(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


class Sealer:
    """Seals with the first of its secrets, unseals with any of them (see the module docstring)."""

    __slots__ = ("_keys",)

    def __init__(self, secrets: Sequence[bytes]) -> None:
        if not secrets:
            raise ValueError("a sealer needs at least one secret")
        keys = []
        for secret in secrets:
            key = _derive(secret)
            keys.append((hashlib.sha256(b"loopgate seal key id\x00" + key).digest()[:_KEY_ID_BYTES], AESGCM(key)))
        self._keys = tuple(keys)

    def seal(self, tenant: str, kind: str, payload: Any) -> str:
        """``payload`` (any JSON value) as a token only this gateway opens, for ``tenant`` and ``kind`` only."""
        key_id, aead = self._keys[0]
        nonce = os.urandom(_NONCE_BYTES)
        sealed = aead.encrypt(nonce, orjson.dumps(payload), _associated(tenant, kind))
        return PREFIX + _encoded(key_id + nonce + sealed)

    def unseal(self, tenant: str, kind: str, token: str) -> Any:
        """The payload ``token`` was sealed with, for ``tenant`` and ``kind``; :class:`SealBroken` otherwise."""
        if not token.startswith(PREFIX):
            raise SealBroken("not a token sealed by this gateway")
        body = token[len(PREFIX):]
        try:
            raw = base64.b64decode(body + "=" * (-len(body) % 4), altchars=b"-_", validate=True)
        except (binascii.Error, ValueError):
            raise SealBroken("not a token sealed by this gateway") from None
        # Only the one encoding ``seal`` makes: a token spelled another way is not this gateway's.
        if len(raw) < _KEY_ID_BYTES + _NONCE_BYTES + _TAG_BYTES or _encoded(raw) != body:
            raise SealBroken("not a token sealed by this gateway")
        key_id, nonce, sealed = raw[:_KEY_ID_BYTES], raw[_KEY_ID_BYTES:_KEY_ID_BYTES + _NONCE_BYTES], \
            raw[_KEY_ID_BYTES + _NONCE_BYTES:]
        associated = _associated(tenant, kind)
        for candidate_id, aead in self._keys:
            if candidate_id != key_id:
                continue
            try:
                plain = aead.decrypt(nonce, sealed, associated)
            except InvalidTag:
                continue
            return orjson.loads(plain)
        raise SealBroken("sealed by a key this gateway does not have, for another tenant or kind, or changed")
