"""The audit log: every change of configuration made through the REST API or the command line, with who, when,
what, before and after (``gpu-finops audit list``, ``GET /api/v1/audit``).

Changes are recorded by the function that makes them, in the same transaction, so that a change and its entry are
stored together or not at all, whichever way in it came; a refused change writes no entry. Each such function takes
a keyword-only ``actor``. The actor is a string: ``api-token:<id>`` (an API token), ``api-token:FINOPS_API_TOKEN``
(the setting), ``os-user:<login>`` (a command run on the service's host, :func:`os_user_actor`), ``system:<what>``
(the service itself, e.g. ``system:demo`` seeding the demo).

Recorded (action: what): ``budget.set``, ``budget.delete``; ``team_rule.set``, ``team_rule.delete`` (with the jobs
moved); ``pricing_rule.set``, ``pricing_rule.delete``; ``prices.import`` (a summary of the catalogue, never its
YAML); ``node.set_model``; ``gpu.replace``; ``silence.create``, ``silence.expire``; ``delivery.retry``;
``showback.queue`` (a monthly statement queued: team, month, route, outbox ids);
``node_token.create``, ``node_token.revoke``, ``api_token.create``, ``api_token.revoke`` (id, node or role, team,
name, expiry: never a token's secret or its hash). ``before`` and ``after`` are JSON objects (money as decimal
text, times as ISO 8601), None when the thing did not exist before or does not any more.

Not recorded: data, as opposed to configuration: readings ingested, Slurm and Kubernetes job imports, the node
inventory imported from ``scontrol``, rollups, the pruning of old samples, alert evaluation.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from finops.db.models import AuditEntry
from finops.timeutil import utc_now

ACTOR_MAX_LENGTH = 160
SUBJECT_MAX_LENGTH = 512
DEFAULT_LIMIT = 200
"""Entries :func:`list_entries` returns unless told otherwise."""
MAX_LIMIT = 10_000
"""Most entries one :func:`list_entries` call returns."""


def os_user_actor() -> str:
    """The actor of a command run here: ``os-user:<login>`` (``os-user:uid-<n>`` when the login has no name)."""
    try:
        return f"os-user:{getpass.getuser()}"
    except (KeyError, OSError):  # a uid without a passwd entry, as in some containers
        return f"os-user:uid-{os.getuid()}"


def iso(at: datetime | None) -> str | None:
    """``at`` as ISO 8601 text for ``before`` and ``after``; None stays None."""
    return None if at is None else at.isoformat()


def record(
    session: Session,
    actor: str,
    action: str,
    subject: str,
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    at: datetime | None = None,
) -> None:
    """Add one entry in ``session``'s transaction: ``actor`` did ``action`` (``budget.set``) to ``subject`` at
    ``at`` (None: now), which went from ``before`` to ``after`` (JSON-able mappings; None: absent). ``actor`` and
    ``subject`` are cut to their columns' widths. ValueError for an empty ``actor``: every change has someone to
    answer for it."""
    if not actor.strip():
        raise ValueError("an audited change needs an actor")
    session.add(
        AuditEntry(
            at=utc_now() if at is None else at,
            actor=actor[:ACTOR_MAX_LENGTH],
            action=action,
            subject=subject[:SUBJECT_MAX_LENGTH],
            before=None if before is None else dict(before),
            after=None if after is None else dict(after),
        )
    )


@dataclass(frozen=True)
class AuditView:
    """One entry as listed: ``id``, ``at`` (UTC), ``actor``, ``action``, ``subject``, ``before``, ``after``."""

    id: int
    at: datetime
    actor: str
    action: str
    subject: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ``at`` as ISO 8601."""
        return {
            "id": self.id,
            "at": self.at.isoformat(),
            "actor": self.actor,
            "action": self.action,
            "subject": self.subject,
            "before": self.before,
            "after": self.after,
        }


def list_entries(
    session: Session,
    since: datetime | None = None,
    until: datetime | None = None,
    actor: str | None = None,
    action: str | None = None,
    limit: int = DEFAULT_LIMIT,
) -> list[AuditView]:
    """Entries at [since, until) (None: unbounded), of ``actor`` and ``action`` if given, newest first, at most
    ``limit`` (1 to :data:`MAX_LIMIT`; ValueError otherwise)."""
    if not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit: 1 to {MAX_LIMIT}")
    query = select(AuditEntry).order_by(AuditEntry.at.desc(), AuditEntry.id.desc()).limit(limit)
    if since is not None:
        query = query.where(AuditEntry.at >= since)
    if until is not None:
        query = query.where(AuditEntry.at < until)
    if actor is not None:
        query = query.where(AuditEntry.actor == actor)
    if action is not None:
        query = query.where(AuditEntry.action == action)
    return [AuditView(e.id, e.at, e.actor, e.action, e.subject, e.before, e.after) for e in session.scalars(query)]
