"""Slack incoming webhooks: a Block Kit payload within Slack's limits, and one POST with its outcome.

Format: Slack "Sending messages using incoming webhooks" and the Block Kit reference
(https://api.slack.com/reference/block-kit/blocks): a ``header`` block's plain text is at most 150 characters,
a ``section`` text at most 3,000, a section has at most 10 ``fields`` of at most 2,000 characters each, a
button's text at most 75 and its URL at most 3,000; a message has at most 50 blocks. ``text`` is the
notification fallback, shown where blocks are not; mrkdwn text escapes ``&``, ``<`` and ``>``
("Formatting text for app surfaces"), where ``<@U012AB3CD>`` @-mentions a member: a message's ``mentions`` open its
summary and its fallback text.

Each POST carries an ``Idempotency-Key`` header (IETF draft-ietf-httpapi-idempotency-key-header), the same for
every attempt at one outbox row: Slack ignores it; a receiver of its own (a relay, a chat bridge) can drop a
message it has had, which makes the one resend the outbox allows (:mod:`alerts.delivery`) harmless there.

Responses: 200 ``ok``; 4xx such as 400 ``invalid_payload``, 403 ``action_prohibited``, 404
``channel_not_found``, 410 ``channel_is_archived`` are final; 429 carries ``Retry-After``; 5xx may pass.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

from alerts.message import Message
from alerts.webhooks import Attempt, WebhookPolicy, WebhookRefused, post_json

HEADER_LIMIT = 150
SECTION_LIMIT = 3000
FIELD_LIMIT = 2000
FIELDS_PER_SECTION = 10
BUTTON_TEXT_LIMIT = 75
FALLBACK_LIMIT = 3000


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _mrkdwn(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _mentions(message: Message) -> str:
    """``<@U012AB3CD> `` for each of the message's mentions that is a member ID (upper-case letters and digits)."""
    return "".join(f"<@{member}> " for member in message.mentions if re.fullmatch(r"[A-Z0-9]+", member))


def slack_payload(message: Message) -> dict[str, Any]:
    """The webhook JSON for ``message``: header, summary (after its mentions), fields (10 per section), a link
    button; text fallback."""
    mentions = _mentions(message)
    summary = _clip(mentions + _mrkdwn(message.summary), SECTION_LIMIT)
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _clip(message.title, HEADER_LIMIT)}},
        {"type": "section", "text": {"type": "mrkdwn", "text": summary}},
    ]
    for start in range(0, len(message.fields), FIELDS_PER_SECTION):
        chunk = message.fields[start : start + FIELDS_PER_SECTION]
        fields = [
            {"type": "mrkdwn", "text": _clip(f"*{_mrkdwn(name)}*\n{_mrkdwn(value)}", FIELD_LIMIT)}
            for name, value in chunk
        ]
        blocks.append({"type": "section", "fields": fields})
    if message.link is not None:
        label, url = message.link
        button = {"type": "button", "text": {"type": "plain_text", "text": _clip(label, BUTTON_TEXT_LIMIT)}, "url": url}
        blocks.append({"type": "actions", "elements": [button]})
    return {"text": _clip(mentions + message.plain_text(), FALLBACK_LIMIT), "blocks": blocks}


def post_to_slack(
    client: httpx.Client, url: str, message: Message, policy: WebhookPolicy, key: str | None = None
) -> Attempt:
    """POST ``message`` to the webhook ``url`` once, with ``key`` (if given) as its ``Idempotency-Key`` header.
    A URL the policy refuses is a ``refused`` attempt.

    The URL never appears in the returned reason (only :func:`alerts.webhooks.redact` of it).
    """
    try:
        policy.check(url)
    except WebhookRefused as exc:
        return Attempt("refused", str(exc))
    headers = {"Idempotency-Key": key} if key is not None else None
    return post_json(client, url, slack_payload(message), headers)
