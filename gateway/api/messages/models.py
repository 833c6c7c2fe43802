"""``GET /v1/models`` in Anthropic's list shape, for callers that send ``anthropic-version``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def anthropic_model_list(names: list[str], created: int) -> dict[str, Any]:
    """Anthropic's page object: every route this key may see, on one page."""
    created_at = datetime.fromtimestamp(created, UTC).isoformat().replace("+00:00", "Z")
    data = [{"type": "model", "id": name, "display_name": name, "created_at": created_at} for name in names]
    return {"data": data, "has_more": False, "first_id": names[0] if names else None,
            "last_id": names[-1] if names else None}
