"""What a key may call: its role and its route allow-list, checked in one place for every surface.

Chat completions, continuation resumes and the Responses API all call ``check_model_access``
with the plan they are about to run. Direct ``PROVIDER/MODEL`` calls are allowed when the key has
no allow-list, or its list names ``PROVIDER/*`` or that exact ``PROVIDER/MODEL``.
"""

from __future__ import annotations

from gateway.config.model import ApiKey
from gateway.errors import GatewayError, quoted
from gateway.routing.routes import RoutePlan


def check_model_access(key: ApiKey, plan: RoutePlan, resume: bool = False) -> None:
    """403 when ``key`` may not run ``plan``.

    ``resume``: deciding a paused call (``POST /v1/continuations/{id}``) is what approver keys are
    for, so the role check is skipped there; the allow-list still applies.
    """
    if key.role == "approver" and not resume:
        raise GatewayError(403, f"key {quoted(key.name)} has the approver role: it may list and decide approvals "
                                "but not call models", "permission_error", "model", "approver_key")
    allowed = key.models
    if allowed is not None and plan.name not in allowed and plan.metric_label not in allowed:
        raise GatewayError(403, f"key {quoted(key.name)} may not use the model {quoted(plan.name)}; it may use: "
                                f"{', '.join(allowed) or 'none'}", "permission_error", "model", "model_not_allowed")


def visible_routes(key: ApiKey, names: list[str]) -> list[str]:
    """The configured routes ``key`` may call: what ``/v1/models`` and a 404's hint list."""
    if key.models is None:
        return names
    allowed = set(key.models)
    return [name for name in names if name in allowed]
