"""Who may use ``/admin/``: the keys of ``auth.admin_keys`` (never a caller key, whatever its role)."""

from __future__ import annotations

from gateway.config.keys_section import secret_digest
from gateway.config.model import AdminKey
from gateway.errors import GatewayError
from gateway.governance.keys import bearer, invalid_key
from gateway.http.incoming import Incoming


def admin_ring(keys: tuple[AdminKey, ...]) -> dict[bytes, AdminKey]:
    return {secret_digest(key.key): key for key in keys}


def require_admin(incoming: Incoming, admin_keys: dict[bytes, AdminKey]) -> AdminKey:
    """The admin key the request presents; 404 when no admin key is configured, 401 for any other key."""
    if not admin_keys:
        raise GatewayError(404, "the admin API is disabled: configure auth.admin_keys to enable it",
                           "not_found_error", code="admin_disabled")
    found = admin_keys.get(secret_digest(bearer(incoming.authorization)))
    if found is None:
        raise invalid_key()
    return found
