"""``GET /v1/models``: the routes the caller's key may use, in OpenAI's list or, for a caller that speaks
Anthropic's API (``anthropic-version``, which its SDKs send), in Anthropic's (``messages/models.py``)."""

from __future__ import annotations

import orjson
from starlette.requests import Request

from gateway.api.driver import Operation
from gateway.api.messages.headers import use_api_key
from gateway.api.messages.models import anthropic_model_list
from gateway.api.request.lifecycle import Work
from gateway.api.services import ModelServices, model_services
from gateway.governance.access import visible_routes
from gateway.http.json_response import JSONResponse

PATH = "/v1/models"


async def list_models(request: Request, services: ModelServices, work: Work) -> JSONResponse:
    incoming = work.incoming
    anthropic = b"anthropic-version" in incoming.headers
    if anthropic:
        use_api_key(incoming)
    key = await work.authenticate()
    names = visible_routes(key, services.routes.names())
    if anthropic:
        return JSONResponse(orjson.dumps(anthropic_model_list(names, services.started)))
    created = services.started
    return JSONResponse(orjson.dumps({"object": "list", "data": [
        {"id": name, "object": "model", "created": created, "owned_by": "loopgate"} for name in names]}))


MODELS = Operation("GET", PATH, list_models, model_services)
