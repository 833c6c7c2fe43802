"""``format: slack``: a Slack incoming-webhook message (``text`` + ``blocks``) linking to the approvals page.

Every value that came from a caller or a model (tool names of client tools, denial reasons) is
escaped for Slack's mrkdwn (``&``, ``<``, ``>``), so it cannot forge a link or a mention.
"""

from __future__ import annotations

from typing import Any

_HEADLINES = {
    "paused": "Approval needed",
    "resumed": "Continuation resumed",
    "decided": "Decision made",
    "expired": "Approval expired",
    "headless_denied": "Tool call denied (headless)",
}


def escape(text: Any) -> str:
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _calls(event: dict[str, Any]) -> str:
    names = [escape(c.get("name") or "?") for c in event.get("tool_calls") or ()]
    return ", ".join(f"`{n}`" for n in names) if names else "no tool calls"


def _detail(event: dict[str, Any]) -> str:
    kind = event["type"]
    if kind == "decided":
        parts = []
        for d in event.get("decisions") or ():
            verdict = "approved" if d.get("approved") else "denied"
            reason = f" ({escape(d['reason'])})" if d.get("reason") else ""
            parts.append(f"`{escape(d.get('name') or '?')}` {verdict}{reason}")
        who = f" by {escape(event['decided_by'])}" if event.get("decided_by") else ""
        return "; ".join(parts) + who
    if kind == "expired":
        return f"{_calls(event)}: {escape(event.get('reason') or 'expired')}"
    if kind == "headless_denied":
        return f"{_calls(event)}: {escape(event.get('reason') or 'denied')}"
    return _calls(event)


def slack_payload(event: dict[str, Any], public_url: str | None) -> dict[str, Any]:
    headline = _HEADLINES.get(event["type"], event["type"])
    where = f"tenant *{escape(event['tenant'])}*"
    if event.get("route"):
        where += f", route *{escape(event['route'])}*"
    if event.get("asked_by"):
        where += f", asked by *{escape(event['asked_by'])}*"
    detail = _detail(event)
    text = f"{headline}: {detail} ({where})"
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{headline}*\n{detail}\n{where}"}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": (
            f"continuation `{escape(event.get('continuation_id') or '-')}` · event `{escape(event['id'])}`")}]},
    ]
    if public_url:
        link = f"{public_url}/ui/approvals"
        text += f" <{link}|Open approvals>"
        blocks.append({"type": "actions", "elements": [
            {"type": "button", "text": {"type": "plain_text", "text": "Open approvals"}, "url": link}]})
    return {"text": text, "blocks": blocks}
