"""One notification for one group of alerts: the :class:`alerts.message.Message` that Slack and e-mail carry.

Title as Alertmanager's default templates put it: ``[FIRING]`` / ``[FIRING:3]`` / ``[RESOLVED]`` (and
``[FIRING:2, RESOLVED:1]``), then the alert's own title for one alert, or the rule and group for several. One
alert: its summary and fields. Several: a summary line and one field per alert (its name → its summary),
at most :data:`MAX_LISTED`, then how many more; Slack's block limits are applied by :mod:`alerts.slack`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from alerts.config import SEVERITIES
from alerts.message import Attachment, Document, Message

MAX_LISTED = 30
RULE_TITLES = {
    "budget-50": "Budget 50 % reached",
    "budget-80": "Budget 80 % reached",
    "budget-100": "Budget 100 % reached",
    "budget-forecast": "Budget forecast above budget",
    "spend-anomaly": "Spend anomaly",
    "idle-gpu": "Idle GPUs",
    "throttling": "GPUs throttled",
    "collector-silent": "Collectors silent",
    "gpu-lost": "GPUs lost",
    "data-quality": "Data quality",
}


@dataclass(frozen=True, slots=True)
class Shown:
    """An alert as a message shows it: rule, severity and its annotations (title, name, summary, fields, page)."""

    rule: str
    severity: str
    annotations: Mapping[str, Any]


def _rank(severity: str) -> int:
    return SEVERITIES.index(severity) if severity in SEVERITIES else 0


def _status(firing: int, resolved: int) -> str:
    parts = []
    if firing:
        parts.append("FIRING" if firing == 1 and not resolved else f"FIRING:{firing}")
    if resolved:
        parts.append("RESOLVED" if resolved == 1 and not firing else f"RESOLVED:{resolved}")
    return "[" + ", ".join(parts) + "]"


def dashboard_link(dashboard_url: str, annotations: Mapping[str, Any]) -> str | None:
    """The URL of an alert's dashboard page (its ``page`` annotation) under ``dashboard_url``; None without either."""
    page = str(annotations.get("page", ""))
    return f"{dashboard_url.rstrip('/')}/{page}" if page and dashboard_url else None


def render_group(
    firing: Sequence[Shown], resolved: Sequence[Shown], group_labels: Mapping[str, str], dashboard_url: str
) -> Message:
    """The message for a group notification (at least one alert in ``firing`` or ``resolved``), with a link to the
    first alert's dashboard page under ``dashboard_url`` (none when ``dashboard_url`` is empty)."""
    shown = [*firing, *resolved]
    if not shown:
        raise ValueError("a notification needs at least one alert")
    status = _status(len(firing), len(resolved))
    severity = max((a.severity for a in firing or resolved), key=_rank)
    url = dashboard_link(dashboard_url, shown[0].annotations)
    link = None if url is None else ("Open in gpu-finops", url)
    if len(shown) == 1:
        only = shown[0].annotations
        own = [(str(n), str(v)) for n, v in only.get("fields", [])]
        summary = str(only.get("summary", ""))
        if resolved:
            summary = f"Resolved: {summary}"
        return Message(f"{status} {only.get('title', shown[0].rule)}", summary, own, link, severity)
    rules = sorted({a.rule for a in shown})
    what = RULE_TITLES.get(rules[0], rules[0]) if len(rules) == 1 else "Alerts"
    scope = ", ".join(f"{name} {value}" for name, value in group_labels.items() if name != "rule" and value)
    title = f"{status} {what}" + (f": {scope}" if scope else "")
    counts = [f"{len(firing)} firing"] if firing else []
    if resolved:
        counts.append(f"{len(resolved)} resolved")
    summary = f"{what}: {' and '.join(counts)}."
    fields: list[tuple[str, str]] = []
    for alert, state in [*((a, "") for a in firing), *((a, "Resolved: ") for a in resolved)][:MAX_LISTED]:
        name = str(alert.annotations.get("name", alert.rule))
        fields.append((f"{state}{name}", str(alert.annotations.get("summary", ""))))
    if len(shown) > MAX_LISTED:
        fields.append(("More", f"{len(shown) - MAX_LISTED} more alerts in this group"))
    return Message(title, summary, fields, link, severity)


def message_to_payload(message: Message) -> dict[str, Any]:
    """A message as the outbox stores it (JSON); ``mentions`` only when it has some; its document, if any, under
    ``document`` (``text``, ``html``, ``attachments``: a list of ``filename``, ``content_type``, ``content``)."""
    payload: dict[str, Any] = {
        "title": message.title,
        "summary": message.summary,
        "fields": [list(pair) for pair in message.fields],
        "link": None if message.link is None else list(message.link),
        "severity": message.severity,
    }
    if message.mentions:
        payload["mentions"] = list(message.mentions)
    if message.document is not None:
        document = message.document
        payload["document"] = {
            "text": document.text,
            "html": document.html,
            "attachments": [
                {"filename": a.filename, "content_type": a.content_type, "content": a.content}
                for a in document.attachments
            ],
        }
    return payload


def payload_to_message(payload: Mapping[str, Any]) -> Message:
    """The message stored by :func:`message_to_payload`."""
    link = payload.get("link")
    stored = payload.get("document")
    document = None
    if stored is not None:
        attachments = tuple(
            Attachment(str(a["filename"]), str(a["content_type"]), str(a["content"]))
            for a in stored.get("attachments", [])
        )
        document = Document(str(stored["text"]), str(stored["html"]), attachments)
    return Message(
        title=str(payload["title"]),
        summary=str(payload.get("summary", "")),
        fields=[(str(n), str(v)) for n, v in payload.get("fields", [])],
        link=None if not link else (str(link[0]), str(link[1])),
        severity=str(payload.get("severity", "warning")),
        mentions=tuple(str(m) for m in payload.get("mentions", ())),
        document=document,
    )
