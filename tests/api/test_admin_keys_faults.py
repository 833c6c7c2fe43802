"""The admin key API when the store fails between a change and its audit entry (in process, ``memory://``).

A created key whose audit write failed was a 500 without its secret: a live key nobody holds.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gateway.api.app import create_app
from gateway.config import parse_config
from gateway.store.errors import StoreUnavailable

CONFIG = """
providers:
  openai: {type: openai, api_key: k, base_url: "http://127.0.0.1:9"}
models:
  smart: {targets: [{provider: openai, model: gpt-4.1}]}
auth:
  admin_keys: [{key: admin-secret-1, name: ops}]
"""
ADMIN = {"authorization": "Bearer admin-secret-1"}


async def test_a_change_whose_audit_entry_fails_still_answers_with_the_secret(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    app = create_app(parse_config(CONFIG, env={}))
    async with app.app.router.lifespan_context(app.app):
        runtime = app.state.runtime

        async def unavailable(entry: dict[str, Any]) -> None:
            raise StoreUnavailable("redis unavailable during append_audit: test")

        monkeypatch.setattr(runtime.store, "append_audit", unavailable)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            created = await client.post("/admin/keys", json={"tenant": "t"}, headers=ADMIN)
            assert created.status_code == 201, created.text
            secret = created.json()["key"]
            models = await client.get("/v1/models", headers={"authorization": f"Bearer {secret}"})
            assert models.status_code == 200
            revoked = await client.delete(f"/admin/keys/{created.json()['id']}", headers=ADMIN)
            assert revoked.status_code == 200 and revoked.json()["deleted"] is True
    assert "audit entry was lost" in caplog.text
