"""``auth`` and ``tenants``: caller keys, admin keys and tenant limits, one message per mistake.

The field rules live here once and serve both the YAML config and the admin API
(``POST/PATCH /admin/keys``), which turns a ``ConfigError`` into a 400 naming the field.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from gateway.config.approval_section import key_tools
from gateway.config.checks import ConfigError, get, mapping, type_name

AUTH_KEYS = {"keys", "admin_keys", "key_retention_days", "key_id_secret"}
API_KEY_KEYS = {"key", "tenant", "headless", "name", "role", "models", "rpm", "tpm", "max_concurrent", "budget",
                "expires_at", "tools"}
ADMIN_KEY_KEYS = {"key", "name"}
TENANT_KEYS = {"rpm", "tpm", "max_concurrent", "budget"}
BUDGET_KEYS = {"limit", "unit", "period"}

KeyRole = Literal["caller", "approver"]
BudgetUnit = Literal["tokens", "usd"]
BudgetPeriod = Literal["day", "month", "total"]


@dataclass(frozen=True, slots=True)
class Budget:
    """A spending cap; parsed and stored here, enforced by the budget module (usage-budgets)."""

    limit: float
    unit: BudgetUnit = "tokens"
    period: BudgetPeriod = "month"


@dataclass(frozen=True, slots=True)
class Limits:
    """The rate limits of a key or a tenant; ``None`` = unlimited. A scope whose three are ``None`` costs nothing."""

    rpm: int | None = None
    tpm: int | None = None
    max_concurrent: int | None = None

    @property
    def any(self) -> bool:
        return self.rpm is not None or self.tpm is not None or self.max_concurrent is not None


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A caller key: from ``auth.keys`` (``key`` holds the secret) or managed (``key`` empty, ``managed`` true).

    ``id`` is stable and public: ``cfg_`` + 16 hex of a keyed HMAC of the secret for config keys
    (governance/key_ids.py), ``key_...`` for managed ones. ``models`` is the allow-list of routes
    (``None``: every route); an entry ``PROVIDER/*`` allows direct ``PROVIDER/MODEL`` calls to that provider.
    """

    key: str
    tenant: str
    headless: bool = False
    id: str = ""
    name: str = ""
    role: KeyRole = "caller"
    models: tuple[str, ...] | None = None
    rpm: int | None = None
    tpm: int | None = None
    max_concurrent: int | None = None
    budget: Budget | None = None
    #: Unix seconds (UTC); past it the key is rejected like an unknown one
    expires_at: float | None = None
    managed: bool = False
    created_at: float | None = None
    revoked: bool = False
    #: server tools this key may use (None: every tool of the route); others are never offered to the model
    tools: frozenset[str] | None = None

    @property
    def limits(self) -> Limits:
        return Limits(self.rpm, self.tpm, self.max_concurrent)


@dataclass(frozen=True, slots=True)
class AdminKey:
    """A key of the ``/admin/`` API (``auth.admin_keys``); it cannot call models."""

    key: str = field(repr=False)
    name: str


@dataclass(frozen=True, slots=True)
class TenantConfig:
    """``tenants.NAME``: limits shared by every key of the tenant, and its budget."""

    name: str
    rpm: int | None = None
    tpm: int | None = None
    max_concurrent: int | None = None
    budget: Budget | None = None

    @property
    def limits(self) -> Limits:
        return Limits(self.rpm, self.tpm, self.max_concurrent)


#: revoked or expired managed keys are kept this long, then purged (``auth.key_retention_days``)
DEFAULT_KEY_RETENTION_DAYS = 7.0
MAX_KEY_RETENTION_DAYS = 3650.0


@dataclass(frozen=True, slots=True)
class AuthConfig:
    keys: tuple[ApiKey, ...] = ()
    admin_keys: tuple[AdminKey, ...] = ()
    #: how long a revoked or expired managed key's record stays (``GET /admin/keys/{id}``) before it is purged
    key_retention_s: float = DEFAULT_KEY_RETENTION_DAYS * 86_400
    #: the HMAC key of public key ids (empty: a random salt kept in the store; see governance/key_ids.py)
    key_id_secret: str = field(default="", repr=False)

    @property
    def enabled(self) -> bool:
        # Admin keys switch auth on too: they can create caller keys, which must then be required.
        return bool(self.keys or self.admin_keys)


#: ``auth.key_id_secret`` shorter than this is refused
MIN_ID_SECRET_CHARS = 16
#: ``rpm``, ``tpm`` and ``max_concurrent`` above this are typos, not limits
MAX_LIMIT = 1_000_000_000
#: a budget above this (tokens or USD) is a typo
MAX_BUDGET = 1e15
#: names, tenants and allow-list entries are short labels; these bound what a caller can store
MAX_NAME_CHARS = 64
MAX_MODELS = 256
ROLES: tuple[str, ...] = ("caller", "approver")
UNITS: tuple[str, ...] = ("tokens", "usd")
PERIODS: tuple[str, ...] = ("day", "month", "total")
# Tenants end up in store keys (escaped) and metric labels: managed keys get a plain alphabet.
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]*")
# An empty SHA-256 state: copying it skips OpenSSL's algorithm look-up (``EVP_MD_fetch``), much of what
# hashing a short secret costs once the CPU's caches are cold (bench/README.md).
_SHA256 = hashlib.sha256()


def secret_digest(secret: str) -> bytes:
    """The SHA-256 of a key's secret: what the store keeps and what lookups compare, never the secret."""
    state = _SHA256.copy()
    state.update(secret.encode("utf-8", "surrogatepass"))
    return state.digest()


KEY_ID_DOMAIN = b"loopgate key ids v2\x00"


def config_key_id(secret: str, id_key: bytes) -> str:
    """A config key's public id: ``cfg_`` + 16 hex digits of ``HMAC-SHA256(id_key, secret)``.

    Keyed, so the id says nothing about the secret to whoever sees it (approver keys do); the id
    key is the deployment's (governance/key_ids.py chooses it at start-up).
    """
    return "cfg_" + hmac.new(id_key, secret.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()[:16]


def legacy_config_key_id(secret: str) -> str:
    """The id a config key had before ids were keyed (the plain SHA-256 prefix): only to recognise it where
    records written before the change still name it (a paused continuation's asker), never to show it."""
    return "cfg_" + secret_digest(secret).hex()[:16]


def secret_id_key(key_id_secret: str) -> bytes:
    """The id key derived from ``auth.key_id_secret``."""
    return hashlib.sha256(KEY_ID_DOMAIN + key_id_secret.encode("utf-8", "surrogatepass")).digest()


def limit(section: dict[str, Any], key: str, path: str) -> int | None:
    """A positive integer limit (1 to 1e9), or None when absent."""
    value = get(section, key, path, int, None)
    if value is not None and not 0 < value <= MAX_LIMIT:
        raise ConfigError(f"{path}.{key}", f"must be between 1 and {MAX_LIMIT}, got {value}")
    return cast(int | None, value)


def budget(raw: Any, path: str) -> Budget | None:
    if raw is None:
        return None
    section = mapping(raw, path, BUDGET_KEYS)
    amount = get(section, "limit", path, float, None)
    if amount is None:
        raise ConfigError(f"{path}.limit", "is required (a number of tokens or USD)")
    if not 0 < amount <= MAX_BUDGET:  # also refuses nan
        raise ConfigError(f"{path}.limit", f"must be a number above 0 and at most {MAX_BUDGET:g}, got {amount}")
    unit = get(section, "unit", path, str, "tokens")
    if unit not in UNITS:
        raise ConfigError(f"{path}.unit", f"must be tokens or usd, got {unit!r}")
    period = get(section, "period", path, str, "month")
    if period not in PERIODS:
        raise ConfigError(f"{path}.period", f"must be day, month or total, got {period!r}")
    return Budget(limit=amount, unit=cast(BudgetUnit, unit), period=cast(BudgetPeriod, period))


#: the range of an ``expires_at``, in UTC: whatever is stored can be shown as a date again
EARLIEST_EXPIRY = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
LATEST_EXPIRY = dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=dt.UTC)


def expires_at(value: Any, path: str) -> float | None:
    """ISO 8601 with a UTC offset (``2026-12-31T00:00:00Z``) as Unix seconds; YAML's own timestamps too.

    In UTC it must fall between 1970-01-01 and 9999-12-31T23:59:59Z: ``9999-12-31T23:59:59-12:00`` is a
    valid ISO string but a time in year 10000, which no view could show.
    """
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise ConfigError(path, "must be an ISO 8601 UTC time like 2026-12-31T00:00:00Z") from None
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            # YAML parses '...Z' into a naive UTC datetime; a string without an offset is ambiguous.
            value = value.replace(tzinfo=dt.UTC)
    elif isinstance(value, dt.date):
        value = dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC)
    else:
        raise ConfigError(path, f"must be an ISO 8601 UTC time like 2026-12-31T00:00:00Z, got {type_name(value)}")
    try:
        # Comparing aware datetimes subtracts their offsets, which can overflow past year 9999.
        in_range = EARLIEST_EXPIRY <= value <= LATEST_EXPIRY
    except OverflowError:
        in_range = False
    if not in_range:
        raise ConfigError(path, "must be between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z (in UTC)")
    return value.timestamp()


def label(value: Any, path: str, what: str) -> str:
    """A name or tenant: 1 to 64 characters, none of them a control character."""
    if not isinstance(value, str) or not value:
        raise ConfigError(path, f"{what} must be a non-empty string")
    if len(value) > MAX_NAME_CHARS or not value.isprintable():
        raise ConfigError(path, f"{what} must be at most {MAX_NAME_CHARS} printable characters")
    return value


def plain_label(value: Any, path: str, what: str) -> str:
    """A tenant of a managed key: letters, digits and ``._:@-`` (it reaches store keys and metric labels)."""
    text = label(value, path, what)
    if not _LABEL.fullmatch(text):
        raise ConfigError(path, f"{what} may use only letters, digits and . _ : @ - (starting with a letter or digit)")
    return text


def models_list(value: Any, path: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ConfigError(path, "must be a list of route names (or PROVIDER/*)")
    if len(value) > MAX_MODELS:
        raise ConfigError(path, f"lists more than {MAX_MODELS} routes")
    return tuple(dict.fromkeys(value))


def check_models(models: tuple[str, ...] | None, path: str, routes: set[str], providers: set[str]) -> None:
    """Every entry is a configured route, ``PROVIDER/*`` or ``PROVIDER/MODEL`` of a configured provider."""
    from gateway.config.checks import closest  # start-up only

    for index, entry in enumerate(models or ()):
        if entry in routes:
            continue
        provider, slash, _ = entry.partition("/")
        if slash and provider in providers:
            continue
        raise ConfigError(f"{path}[{index}]", f"unknown model route {entry!r}{closest(entry, routes)} "
                                              "(a route name, PROVIDER/* or PROVIDER/MODEL)")


def key_options(item: dict[str, Any], path: str) -> dict[str, Any]:
    """The fields every key has besides its secret, tenant and name, as ``ApiKey`` keyword arguments."""
    role = get(item, "role", path, str, "caller")
    if role not in ROLES:
        raise ConfigError(f"{path}.role", f"must be caller or approver, got {role!r}")
    return {
        "headless": get(item, "headless", path, bool, False),
        "role": cast(KeyRole, role),
        "models": models_list(item.get("models"), f"{path}.models"),
        "rpm": limit(item, "rpm", path),
        "tpm": limit(item, "tpm", path),
        "max_concurrent": limit(item, "max_concurrent", path),
        "budget": budget(item.get("budget"), f"{path}.budget"),
        "expires_at": expires_at(item.get("expires_at"), f"{path}.expires_at"),
        "tools": key_tools(item, path),
    }


def _secret(item: dict[str, Any], path: str, seen: set[str], duplicate: str) -> str:
    """An entry's ``key``: present, and unique across caller and admin keys (``seen`` collects them)."""
    key = get(item, "key", path, str, "")
    if not key:
        raise ConfigError(f"{path}.key", "is empty (is its environment variable set?)")
    if key in seen:
        raise ConfigError(f"{path}.key", duplicate)
    seen.add(key)
    return key


def auth_section(raw: Any) -> AuthConfig:
    section = mapping(raw, "auth", AUTH_KEYS)
    parsed: list[ApiKey] = []
    seen: set[str] = set()
    names: set[str] = set()
    for i, entry in enumerate(get(section, "keys", "auth", list, [])):
        path = f"auth.keys[{i}]"
        item = mapping(entry, path, API_KEY_KEYS)
        key = _secret(item, path, seen, "duplicates an earlier key")
        tenant = get(item, "tenant", path, str, "")
        if not tenant:
            raise ConfigError(f"{path}.tenant", "is required")
        name = label(get(item, "name", path, str, f"{tenant}-{i}"), f"{path}.name", "a key name")
        if name in names:
            raise ConfigError(f"{path}.name", f"duplicates the name of an earlier key ({name!r})")
        names.add(name)
        parsed.append(ApiKey(key=key, tenant=tenant, name=name, **key_options(item, path)))
    admins: list[AdminKey] = []
    for i, entry in enumerate(get(section, "admin_keys", "auth", list, [])):
        path = f"auth.admin_keys[{i}]"
        item = mapping(entry, path, ADMIN_KEY_KEYS)
        key = _secret(item, path, seen, "duplicates an earlier key (admin keys and caller keys must differ)")
        admins.append(AdminKey(key=key, name=label(get(item, "name", path, str, f"admin-{i}"), f"{path}.name",
                                                   "an admin key name")))
    days = get(section, "key_retention_days", "auth", float, DEFAULT_KEY_RETENTION_DAYS)
    if not 0 <= days <= MAX_KEY_RETENTION_DAYS:  # also refuses nan
        raise ConfigError("auth.key_retention_days", f"must be between 0 and {MAX_KEY_RETENTION_DAYS:g}, got {days}")
    id_secret = get(section, "key_id_secret", "auth", str, "")
    if id_secret and len(id_secret) < MIN_ID_SECRET_CHARS:
        raise ConfigError("auth.key_id_secret", f"must be at least {MIN_ID_SECRET_CHARS} characters (it keys the "
                                                "HMAC of public key ids: a short one can be guessed)")
    # Final here when the id key is configured; otherwise keyed by a random one until the runtime
    # knows the deployment's (governance/key_ids.py): never the secret's plain hash.
    id_key = secret_id_key(id_secret) if id_secret else secrets.token_bytes(32)
    parsed = [dataclasses.replace(item, id=config_key_id(item.key, id_key)) for item in parsed]
    return AuthConfig(keys=tuple(parsed), admin_keys=tuple(admins), key_retention_s=days * 86_400,
                      key_id_secret=id_secret)


def tenants_section(raw: Any) -> dict[str, TenantConfig]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError("tenants", f"expected a mapping of tenant names, got {type_name(raw)}")
    tenants = {}
    for name, value in raw.items():
        path = f"tenants.{name}"
        section = mapping(value, path, TENANT_KEYS)
        tenants[str(name)] = TenantConfig(name=str(name), rpm=limit(section, "rpm", path),
                                          tpm=limit(section, "tpm", path),
                                          max_concurrent=limit(section, "max_concurrent", path),
                                          budget=budget(section.get("budget"), f"{path}.budget"))
    return tenants


def check_key_models(auth: AuthConfig, routes: set[str], providers: set[str]) -> None:
    """Allow-lists name what exists: a typo would otherwise lock a key out of its route silently."""
    for i, key in enumerate(auth.keys):
        check_models(key.models, f"auth.keys[{i}].models", routes, providers)
