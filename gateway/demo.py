"""The demo server tool of the example config (route ``demo``): fake weather, no network.

Deterministic: the same city always gets the same made-up report, so the README's first-run
``curl`` (and the test that runs it) shows a stable answer from a real server-side tool loop.
"""

from __future__ import annotations

import hashlib
from typing import Any

_CONDITIONS = ("sunny", "partly cloudy", "cloudy", "light rain", "windy", "clear")
MAX_CITY_CHARS = 100


def get_weather(city: str, unit: str = "celsius") -> dict[str, Any]:
    """A made-up current weather report for ``city`` (``unit``: celsius or fahrenheit)."""
    name = " ".join(str(city).split())[:MAX_CITY_CHARS] or "nowhere"
    digest = hashlib.sha256(name.lower().encode()).digest()
    celsius = digest[0] % 36 - 5  # -5 .. 30
    temperature = celsius if unit != "fahrenheit" else round(celsius * 9 / 5 + 32)
    return {
        "city": name,
        "temperature": temperature,
        "unit": "fahrenheit" if unit == "fahrenheit" else "celsius",
        "conditions": _CONDITIONS[digest[1] % len(_CONDITIONS)],
        "source": "Loopgate demo data (made up)",
    }


def book_meeting(title: str, day: str, attendees: list[str] | None = None) -> dict[str, Any]:
    """Book a made-up meeting: the demo tool that needs a person's approval first (``approval: required``).

    Nothing is booked anywhere; the loop pauses until someone approves it in the inbox
    (``/ui/approvals``) or by decisions, which is what this tool is there to show.
    """
    name = " ".join(str(title).split())[:MAX_CITY_CHARS] or "meeting"
    when = " ".join(str(day).split())[:MAX_CITY_CHARS]
    people = [" ".join(str(p).split())[:MAX_CITY_CHARS] for p in (attendees or [])][:20]
    digest = hashlib.sha256(f"{name}|{when}".lower().encode()).hexdigest()[:8]
    return {"booked": True, "id": f"demo-{digest}", "title": name, "day": when, "attendees": people,
            "source": "Loopgate demo (nothing was really booked)"}
