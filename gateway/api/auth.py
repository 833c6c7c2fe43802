"""Bearer keys mapped to tenants. With no keys configured every caller is tenant ``default``."""

from __future__ import annotations

import hmac

from gateway.config.model import ApiKey
from gateway.errors import GatewayError

ANONYMOUS = ApiKey(key="", tenant="default")


def authenticate(header: str | None, keys: dict[str, ApiKey]) -> ApiKey:
    """``header`` is the raw ``Authorization`` value: empty when absent, ``None`` when sent twice or more."""
    if header is None:
        raise GatewayError(400, "the request has more than one Authorization header; send exactly one "
                                "'Authorization: Bearer <key>'", "invalid_request_error",
                           code="duplicate_authorization")
    if not keys:
        return ANONYMOUS
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise GatewayError(401, "Missing API key: send 'Authorization: Bearer <key>'.", "invalid_request_error",
                           code="invalid_api_key")
    found = keys.get(token)
    # The dict lookup answers; compare_digest keeps the final check constant-time.
    if found is None or not hmac.compare_digest(found.key, token):
        raise GatewayError(401, "Incorrect API key provided.", "invalid_request_error", code="invalid_api_key")
    return found


def key_id(key: ApiKey) -> str:
    """The key's id in usage rows ("" for the anonymous caller of a gateway without keys)."""
    return getattr(key, "id", "") or ""
