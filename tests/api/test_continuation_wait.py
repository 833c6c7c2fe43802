"""``GET /v1/continuations/{id}?wait=N`` is bounded in count as in time: past MAX_WAITERS it answers at once."""

from __future__ import annotations

import time

import pytest
from starlette.testclient import TestClient

from gateway.api.app import create_app
from gateway.api.continuations import endpoint
from gateway.config import parse_config

CONFIG = """
auth: {keys: [{key: waiter-key-0001, tenant: t}]}
providers: {mock: {type: mock}}
tools:
  delete_record:
    description: Delete a record
    parameters: {type: object, properties: {id: {type: string}}, required: [id]}
    python: "tests.e2e.sample_tools:delete_record"
    approval: required
models: {agent: {targets: [{provider: mock, model: m}], tools: [delete_record]}}
"""
HEADERS = {"authorization": "Bearer waiter-key-0001"}


def test_past_the_waiter_cap_wait_answers_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    with TestClient(create_app(parse_config(CONFIG))) as client:
        paused = client.post("/v1/chat/completions", headers=HEADERS, json={
            "model": "agent", "messages": [{"role": "user", "content": "Please use delete_record on record 42."}]})
        continuation_id = paused.json()["gateway"]["continuation_id"]
        monkeypatch.setattr(endpoint, "MAX_WAITERS", 0)
        started = time.monotonic()
        view = client.get(f"/v1/continuations/{continuation_id}", params={"wait": 60}, headers=HEADERS)
        assert view.status_code == 200 and view.json()["status"] == "pending"
        assert time.monotonic() - started < 30  # not the 60 s it asked for (generous: a busy machine is slow)
        assert endpoint._waiting == 0
