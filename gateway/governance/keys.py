"""Bearer keys mapped to tenants. With no keys configured every caller is tenant ``default``.

Every caller key, from the config or managed through ``/admin/keys``, is looked up by the SHA-256
of the presented secret in one in-process dict (``KeyRing``): no store round trip per request.
The managed part of the ring is a snapshot that ``gateway.governance.key_sync`` replaces whenever the
store's key generation changes, so a revoke, an edit or an expiry takes effect on every replica
within a poll interval.

A key that was found is remembered with its digest (``KeyRing.digests``, at most
``REMEMBERED_KEYS``, forgotten with every new snapshot), so its later requests skip hashing it:
SHA-256 through OpenSSL was the costliest step of authenticating on a busy worker (bench/README.md).
Only secrets that matched a key are remembered: a caller trying secrets cannot fill it, and a
wrong secret costs the hash as before. The memo is a dict keyed by the secret, whose string hash is
keyed per process: how long a look-up takes says nothing usable about a secret.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from gateway.config.keys_section import legacy_config_key_id, secret_digest
from gateway.config.model import ApiKey
from gateway.errors import GatewayError

ANONYMOUS = ApiKey(key="", tenant="default", id="anonymous", name="anonymous")
#: secrets of found keys remembered with their digests (past it the memo starts over)
REMEMBERED_KEYS = 10_000


class KeyRing:
    """Caller keys by the SHA-256 of their secret: the config's (fixed) and the managed snapshot."""

    __slots__ = ("_by_id", "_config", "_legacy", "by_digest", "digests", "enabled", "generation")

    def __init__(self, config_keys: Iterable[ApiKey], enabled: bool) -> None:
        self._config: dict[bytes, ApiKey] = {secret_digest(key.key): key for key in config_keys}
        #: secret digest -> key (replaced whole by ``replace_managed``, never changed in place)
        self.by_digest = dict(self._config)
        #: False only when neither caller keys nor admin keys are configured (development mode)
        self.enabled = enabled
        #: secret -> digest of keys found since the last snapshot (``authenticate`` fills it)
        self.digests: dict[str, bytes] = {}
        self._by_id: dict[str, ApiKey] | None = None
        #: the store generation of the managed snapshot (-1: none loaded yet)
        self.generation = -1
        self._legacy: dict[str, ApiKey] | None = None

    def replace_managed(self, managed: Iterable[tuple[bytes, ApiKey]], generation: int = -1) -> None:
        """Swap in a new snapshot of managed keys (one assignment: a request sees the old or the new one)."""
        ring = {digest: key for digest, key in managed if not key.revoked}
        ring.update(self._config)  # a config key can never be shadowed by a managed record
        self.by_digest = ring
        self.digests = {}  # a revoked or replaced key's secret is not kept
        self._by_id = None
        self.generation = generation

    def add_found(self, digest: bytes, key: ApiKey, generation: int) -> None:
        """A key the store had at ``generation`` that the snapshot lacked (``key_lookup``).

        Kept only when no newer snapshot came in meanwhile: a snapshot read at a later generation
        is the truth (it may hold the key's revoke). A later snapshot replaces this addition with
        everything else, so a revoke drops it within a poll as it drops any key.
        """
        if generation < self.generation or key.revoked or digest in self._config:
            return
        self.by_digest[digest] = key
        self._by_id = None

    def find(self, key_id: str) -> ApiKey | None:
        """The live key with this public id (None: unknown, revoked or expired); what a resume is charged to.

        The index is built on first use after a snapshot: only resumes need it, never the hot path.
        """
        if not self.enabled:
            return ANONYMOUS if key_id == ANONYMOUS.id else None
        by_id = self._by_id
        if by_id is None:
            by_id = self._by_id = {key.id: key for key in self.by_digest.values()}
        found = by_id.get(key_id)
        if found is None and key_id.startswith("cfg_"):
            found = self._legacy_id(key_id)
        if found is None or (found.expires_at is not None and found.expires_at <= time.time()):
            return None
        return found

    def _legacy_id(self, key_id: str) -> ApiKey | None:
        """A config key by the id it had before ids were keyed: work paused before an upgrade still finds
        its asker (docs/surfaces/keys.md, "Upgrading")."""
        legacy = self._legacy
        if legacy is None:
            legacy = self._legacy = {legacy_config_key_id(key.key): key for key in self._config.values()}
        return legacy.get(key_id)

    def lookup(self, token: str) -> ApiKey | None:
        """The key of a presented secret, or None. Keys are compared by digest; a found key's secret is
        remembered with its digest (``digests``), a wrong one never."""
        digest = self.digests.get(token)
        if digest is not None:
            return self.by_digest.get(digest)
        digest = secret_digest(token)
        found = self.by_digest.get(digest)
        if found is not None:
            if len(self.digests) >= REMEMBERED_KEYS:
                self.digests.clear()
            self.digests[token] = digest
        return found


def bearer(header: str | None) -> str:
    """The token of an ``Authorization: Bearer`` value; 400 when the header came twice, 401 when missing."""
    if header is None:
        raise GatewayError(400, "the request has more than one Authorization header; send exactly one "
                                "'Authorization: Bearer <key>'", "invalid_request_error",
                           code="duplicate_authorization")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise GatewayError(401, "Missing API key: send 'Authorization: Bearer <key>'.", "invalid_request_error",
                           code="invalid_api_key")
    return token


def invalid_key() -> GatewayError:
    return GatewayError(401, "Incorrect API key provided.", "invalid_request_error", code="invalid_api_key")


def authenticate(header: str | None, keys: KeyRing) -> ApiKey:
    """The caller's key (config or managed); 401 for an unknown, revoked or expired one, alike.

    ``header`` is the raw ``Authorization`` value: empty when absent, ``None`` when sent twice or more.
    """
    if header is not None and header[:7] == "Bearer " and keys.enabled and (token := header[7:].strip()):
        # How every SDK writes it: ``bearer`` written out (one call less per request).
        # A remembered key is found without a call; anything else goes through ``lookup``.
        digest = keys.digests.get(token)
        found = keys.by_digest.get(digest) if digest is not None else keys.lookup(token)
    elif header is None or keys.enabled:
        found = keys.lookup(bearer(header))
    else:
        return ANONYMOUS
    if found is None or (found.expires_at is not None and found.expires_at <= time.time()):
        raise invalid_key()
    return found
