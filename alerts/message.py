"""What a notification says, independent of the channel that carries it (Slack, e-mail)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file an e-mail carries: ``filename``, MIME ``content_type`` (``text/csv``), ``content`` (text, UTF-8)."""

    filename: str
    content_type: str
    content: str


@dataclass(frozen=True, slots=True)
class Document:
    """An e-mail's own bodies, written for the whole message (a monthly statement) instead of the layout
    :func:`alerts.mail.html_body` makes of a message's facts: the plain ``text``, its ``html`` alternative, and the
    ``attachments``. Slack shows the message's title, summary, fields and link, never the document."""

    text: str
    html: str
    attachments: tuple[Attachment, ...] = ()


@dataclass(frozen=True, slots=True)
class Message:
    """One notification.

    Attributes:
        title: one line, e.g. ``"[FIRING] Budget 80 % reached: team vision"``.
        summary: a few plain-text sentences.
        fields: ordered (name, value) facts: team, job, GPUs, cost so far, ...
        link: (label, URL) of the dashboard page to act from, if any.
        severity: ``"info"``, ``"warning"`` or ``"critical"``.
        mentions: Slack member IDs (``U012AB3CD``) the Slack message @-mentions; other channels leave them out.
        document: the e-mail's own bodies and attachments, if any (:class:`Document`).
    """

    title: str
    summary: str
    fields: list[tuple[str, str]] = field(default_factory=list)
    link: tuple[str, str] | None = None
    severity: str = "warning"
    mentions: tuple[str, ...] = ()
    document: Document | None = None

    def plain_text(self) -> str:
        """The message as plain text: the document's text, else title, summary, one ``name: value`` line per field,
        the link."""
        if self.document is not None:
            return self.document.text
        lines = [self.title, "", self.summary, ""]
        lines += [f"{name}: {value}" for name, value in self.fields]
        if self.link is not None:
            lines += ["", f"{self.link[0]}: {self.link[1]}"]
        return "\n".join(lines).rstrip() + "\n"
