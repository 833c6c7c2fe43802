"""Public ids of config keys: a keyed HMAC of the secret, so an id tells nothing about the secret.

A config key's id (``cfg_`` + 16 hex digits) is shown to approver keys (``/v1/continuations``,
``/v1/audit``), written in usage rows and audit entries, and used by admins
(``/admin/usage?key=``). It used to be the start of the secret's unsalted SHA-256: anyone who saw
it could test guesses of a weak secret offline. Now it is ``HMAC-SHA256(id key, secret)``, and
the id key is, in order:

1. ``auth.key_id_secret`` when configured (the same on every replica by construction);
2. with a Redis store, a random 32-byte salt stored there once (``loopgate:{keys}:salt``, set if
   absent): every replica reads the same one, and it outlives restarts;
3. with ``memory://``, a digest of the admin keys' secrets (held by operators, never by callers),
   so ids stay the same across restarts while the admin keys do;
4. otherwise a random salt of this process (ids change with each restart; a warning says so).

If the Redis store does not answer at start-up, step 2 is skipped for this process (logged):
set ``auth.key_id_secret`` where ids must match across replicas whatever the store does.

Ids computed the old way no longer match: continuations, audit entries and usage rows written
before the change keep the old ids (docs/surfaces/keys.md says what that means).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import secrets

from gateway.config.keys_section import KEY_ID_DOMAIN, config_key_id, secret_id_key
from gateway.config.model import AuthConfig, Config
from gateway.store.errors import StoreUnavailable
from gateway.store.keys.base import KeyStore

log = logging.getLogger("loopgate.keys")

def _from_admin_keys(auth: AuthConfig) -> bytes | None:
    if not auth.admin_keys:
        return None
    state = hashlib.sha256(KEY_ID_DOMAIN + b"admin\x00")
    for secret in sorted(key.key for key in auth.admin_keys):
        state.update(secret.encode("utf-8", "surrogatepass") + b"\x00")
    return state.digest()


async def id_key(auth: AuthConfig, store: KeyStore, shared: bool) -> bytes:
    """The HMAC key of this deployment's config key ids (see the module docstring for the order)."""
    if auth.key_id_secret:
        return secret_id_key(auth.key_id_secret)
    if shared:
        try:
            salt = await store.salt(secrets.token_bytes(32))
        except StoreUnavailable as exc:
            log.warning("the key-id salt could not be read from the store (%s): config key ids of this process may "
                        "differ from other replicas'; set auth.key_id_secret to make them independent of the store",
                        exc)
        else:
            if salt is not None:
                return salt
    derived = _from_admin_keys(auth)
    if derived is not None:
        return derived
    if auth.keys:
        log.warning("config key ids are keyed by a random salt of this process (no auth.key_id_secret, no admin "
                    "keys, no shared store): they change when it restarts")
    return secrets.token_bytes(32)


def with_key_ids(config: Config, key: bytes) -> Config:
    """``config`` with every config key's id computed under ``key``."""
    keys = tuple(dataclasses.replace(item, id=config_key_id(item.key, key)) for item in config.auth.keys)
    return dataclasses.replace(config, auth=dataclasses.replace(config.auth, keys=keys))
