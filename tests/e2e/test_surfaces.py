"""The surface table (``gateway/api/surfaces.py``): one driver serves every path in it, nothing else does.

- Starlette has no route of its own for a table path (no handler that never runs), nor two for
  one method and path (it takes the first: the second would never run);
- a table path asked with another method is a 405 in the surface's own error shape, with its
  ``x-request-id``, from the real gateway;
- the aliases without ``/v1`` are served by the same surface (recorded under its template).
"""

from __future__ import annotations

import httpx
import pytest

from gateway.api.app import create_app
from gateway.api.surfaces import EVERY_SURFACE, SURFACES
from gateway.config import PACKAGED_PATH, load_config
from tests.e2e.conftest import KEY, Gateway


def test_every_table_path_is_the_drivers_alone() -> None:
    app = create_app(load_config(PACKAGED_PATH, {}))
    routed = {getattr(route, "path", None) for route in app.app.routes}
    assert not routed & set(SURFACES), "a Starlette route for a table path never runs"
    for path, surface in SURFACES.items():
        assert surface.path.startswith("/v1/"), path  # recorded under its template, never the alias
        assert callable(surface.errors) and callable(surface.serve)
    assert SURFACES["/chat/completions"] is SURFACES["/v1/chat/completions"]
    assert SURFACES["/embeddings"] is SURFACES["/v1/embeddings"]


def test_no_two_routes_for_one_method_and_path() -> None:
    app = create_app(load_config(PACKAGED_PATH, {}))
    routed = [(method, getattr(route, "path", None)) for route in app.app.routes
              for method in getattr(route, "methods", None) or ()]
    assert sorted(pair for pair in set(routed) if routed.count(pair) > 1) == []
    declared = [(operation.method, operation.path) for surface in EVERY_SURFACE for operation in surface.operations]
    assert {("DELETE", "/v1/continuations/{id}"), ("GET", "/v1/responses/{id}"), ("POST", "/admin/keys")} <= \
        set(declared) <= set(routed)  # every surface's operations are routed, the table's surfaces' included


@pytest.mark.parametrize("path", sorted(SURFACES))
def test_another_method_is_a_405_in_the_surfaces_shape(gateway: Gateway, path: str) -> None:
    # PUT: a GET of /v1/responses opens its WebSocket mode (426 without the handshake: test_responses_websocket.py)
    answer = httpx.put(f"{gateway.url}{path}", headers={"authorization": f"Bearer {KEY}", "x-request-id": "rid-405"},
                       timeout=20)
    assert answer.status_code == 405, answer.text
    assert answer.headers["x-request-id"] == "rid-405"
    body = answer.json()
    if path == "/v1/messages":  # Anthropic's shape, as every other error of that surface
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
    else:
        assert body["error"]["type"] == "invalid_request_error", body
    assert "PUT" not in answer.text  # the method is caller text: not echoed
