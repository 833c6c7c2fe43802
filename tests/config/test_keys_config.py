"""Key, admin key and tenant config: the fields parse into the key model, and every mistake names its key."""

from __future__ import annotations

import hashlib

import pytest

from gateway.config import ConfigError, parse_config
from gateway.config.model import Budget

BASE = """
providers:
  openai: {type: openai, api_key: k}
models:
  smart: {targets: [{provider: openai, model: gpt-4.1}]}
  cheap: {targets: [{provider: openai, model: gpt-4.1-mini}]}
"""


def parse(auth: str, tenants: str = "") -> object:
    return parse_config(BASE + auth + tenants, env={})


def test_key_fields_parse_and_ids_hide_the_secret() -> None:
    config = parse_config(BASE + """
auth:
  admin_keys: [{key: adm-secret, name: ops}]
  keys:
    - {key: secret-a, tenant: team-a}
    - key: secret-b
      tenant: team-b
      name: reporting
      role: approver
      models: [smart, openai/*]
      rpm: 60
      tpm: 10000
      max_concurrent: 4
      budget: {limit: 12.5, unit: usd, period: day}
      headless: true
      expires_at: "2030-01-02T03:04:05Z"
tenants:
  team-a: {rpm: 100, budget: {limit: 1000000}}
""", env={})
    first, second = config.auth.keys
    assert first.name == "team-a-0" and first.role == "caller" and first.models is None
    # Regression (issue 29): the id was the plain SHA-256 of the secret, testable offline against guesses.
    assert first.id.startswith("cfg_") and len(first.id) == 20 and first.id != second.id
    assert first.id != "cfg_" + hashlib.sha256(b"secret-a").hexdigest()[:16]
    assert "secret" not in first.id and first.rpm is None and first.budget is None and not first.managed
    assert (second.name, second.role, second.models) == ("reporting", "approver", ("smart", "openai/*"))
    assert (second.rpm, second.tpm, second.max_concurrent, second.headless) == (60, 10000, 4, True)
    assert second.budget == Budget(12.5, "usd", "day")
    assert second.expires_at == 1893553445.0
    assert config.auth.admin_keys[0].name == "ops" and config.auth.enabled
    tenant = config.tenants["team-a"]
    assert (tenant.rpm, tenant.tpm, tenant.budget) == (100, None, Budget(1000000.0, "tokens", "month"))


def test_admin_keys_alone_switch_auth_on() -> None:
    config = parse_config(BASE + "auth: {admin_keys: [{key: adm, name: ops}]}\n", env={})
    assert config.auth.enabled and config.auth.keys == ()


@pytest.mark.parametrize(("auth", "path", "words"), [
    ("auth: {keys: [{key: a, tenant: t, role: admin}]}", "auth.keys[0].role", "caller or approver"),
    ("auth: {keys: [{key: a, tenant: t, models: [smrt]}]}", "auth.keys[0].models[0]", "did you mean 'smart'"),
    ("auth: {keys: [{key: a, tenant: t, models: [nope/*]}]}", "auth.keys[0].models[0]", "unknown model route"),
    ("auth: {keys: [{key: a, tenant: t, models: smart}]}", "auth.keys[0].models", "list of route names"),
    ("auth: {keys: [{key: a, tenant: t, rpm: 0}]}", "auth.keys[0].rpm", "between 1 and"),
    ("auth: {keys: [{key: a, tenant: t, tpm: -5}]}", "auth.keys[0].tpm", "between 1 and"),
    ("auth: {keys: [{key: a, tenant: t, max_concurrent: 1.5}]}", "auth.keys[0].max_concurrent", "an integer"),
    ("auth: {keys: [{key: a, tenant: t, budget: {limit: 5, unit: eur}}]}", "auth.keys[0].budget.unit", "usd"),
    ("auth: {keys: [{key: a, tenant: t, budget: {limit: 5, period: week}}]}", "auth.keys[0].budget.period",
     "day, month or total"),
    ("auth: {keys: [{key: a, tenant: t, budget: {unit: usd}}]}", "auth.keys[0].budget.limit", "required"),
    ("auth: {keys: [{key: a, tenant: t, budget: {limit: 0}}]}", "auth.keys[0].budget.limit", "above 0"),
    ("auth: {keys: [{key: a, tenant: t, budget: {limit: 1, cap: 2}}]}", "auth.keys[0].budget.cap", "unknown key"),
    ("auth: {keys: [{key: a, tenant: t, expires_at: tomorrow}]}", "auth.keys[0].expires_at", "ISO 8601"),
    ("auth: {keys: [{key: a, tenant: t, rps: 3}]}", "auth.keys[0].rps", "unknown key"),
    ("auth: {keys: [{key: a, tenant: t, name: x}, {key: b, tenant: t, name: x}]}", "auth.keys[1].name",
     "duplicates the name"),
    ("auth: {keys: [{key: a, tenant: t}], admin_keys: [{key: a, name: ops}]}", "auth.admin_keys[0].key",
     "must differ"),
    ("auth: {admin_keys: [{key: '', name: ops}]}", "auth.admin_keys[0].key", "is empty"),
    ("auth: {admin_keys: [{key: x, role: approver}]}", "auth.admin_keys[0].role", "unknown key"),
    # Regression (issue 29): valid ISO 8601, but in year 10000 once in UTC (the create was a 500, every
    # listing after it too).
    ("auth: {keys: [{key: a, tenant: t, expires_at: '9999-12-31T23:59:59-12:00'}]}", "auth.keys[0].expires_at",
     "9999-12-31T23:59:59Z"),
    ("auth: {keys: [{key: a, tenant: t, expires_at: '0001-01-01T00:00:00+14:00'}]}", "auth.keys[0].expires_at",
     "between 1970-01-01"),
    ("auth: {key_retention_days: -1}", "auth.key_retention_days", "between 0 and"),
    ("auth: {key_retention_days: .nan}", "auth.key_retention_days", "between 0 and"),
    ("auth: {key_id_secret: short}", "auth.key_id_secret", "at least 16"),
])
def test_key_mistakes_name_their_key(auth: str, path: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(auth + "\n")
    assert caught.value.path == path, str(caught.value)
    assert words in str(caught.value)


@pytest.mark.parametrize(("tenants", "path", "words"), [
    ("tenants: {team-a: {rpm: 0}}", "tenants.team-a.rpm", "between 1 and"),
    ("tenants: {team-a: {requests: 5}}", "tenants.team-a.requests", "unknown key"),
    ("tenants: [team-a]", "tenants", "mapping of tenant names"),
    ("tenants: {team-a: {budget: {limit: x}}}", "tenants.team-a.budget.limit", "a number"),
])
def test_tenant_mistakes_name_their_key(tenants: str, path: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse("", tenants + "\n")
    assert caught.value.path == path, str(caught.value)
    assert words in str(caught.value)


def test_retention_and_id_secret_defaults() -> None:
    config = parse_config(BASE + "auth: {keys: [{key: a, tenant: t, expires_at: '9999-12-31T23:59:59Z'}]}\n", env={})
    assert config.auth.key_retention_s == 7 * 86_400 and config.auth.key_id_secret == ""
    assert config.auth.keys[0].expires_at == 253402300799.0
    tuned = parse_config(BASE + "auth: {key_retention_days: 0.5, key_id_secret: a-long-enough-secret}\n", env={})
    assert tuned.auth.key_retention_s == 43_200


def test_config_key_ids_are_a_keyed_hmac_stable_for_one_id_key() -> None:
    from gateway.config.keys_section import config_key_id, secret_id_key

    auth = "auth: {key_id_secret: a-long-enough-secret, keys: [{key: secret-a, tenant: t}]}\n"
    one, two = parse_config(BASE + auth, env={}), parse_config(BASE + auth, env={})
    expected = config_key_id("secret-a", secret_id_key("a-long-enough-secret"))
    assert one.auth.keys[0].id == two.auth.keys[0].id == expected
    other = parse_config(BASE + auth.replace("a-long-enough-secret", "another-long-secret"), env={})
    assert other.auth.keys[0].id != one.auth.keys[0].id


async def test_the_id_key_comes_from_the_config_the_store_or_the_admin_keys() -> None:
    import dataclasses

    from gateway.config.keys_section import config_key_id
    from gateway.governance.key_ids import id_key, with_key_ids
    from gateway.store.keys.memory import MemoryKeyStore

    auth = "auth: {admin_keys: [{key: adm-secret-1, name: ops}], keys: [{key: a, tenant: t}]}\n"
    config = parse_config(BASE + auth, env={})
    store = MemoryKeyStore()
    # memory://: from the admin keys, the same after a restart (a new store) while they stay.
    first = await id_key(config.auth, store, shared=False)
    assert first == await id_key(config.auth, MemoryKeyStore(), shared=False)
    assert with_key_ids(config, first).auth.keys[0].id == config_key_id("a", first) != config.auth.keys[0].id
    rotated = dataclasses.replace(config.auth, admin_keys=())
    assert await id_key(rotated, store, shared=False) != first  # random: nothing stable to derive from
    configured = dataclasses.replace(config.auth, key_id_secret="a-long-enough-secret")
    assert await id_key(configured, store, shared=False) == await id_key(configured, store, shared=True)
