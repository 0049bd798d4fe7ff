"""A candidate alert (:class:`Candidate`), and how the rules write money, durations and the team label."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any


@dataclass(frozen=True, slots=True)
class Candidate:
    """An alert whose condition holds: ``labels`` identify it (``rule`` and ``severity`` are added by the
    engine), ``annotations`` say it (``title``, ``name``, ``summary``, ``fields``, dashboard ``page``),
    ``figures`` are the numbers (money as decimal strings). ``starts_at``: when the condition became true;
    ``ends_at``: when an event alert ends by itself (None: a condition, ended when it stops holding)."""

    rule: str
    labels: dict[str, str]
    annotations: dict[str, Any]
    figures: dict[str, Any] = field(default_factory=dict)
    starts_at: datetime = datetime(1970, 1, 1, tzinfo=UTC)
    ends_at: datetime | None = None


def money(amount: Decimal | str, currency: str) -> str:
    """``1234.5`` → ``"1,234.50 USD"`` (two decimals, half-even as Decimal formats)."""
    return f"{Decimal(amount):,.2f} {currency}".strip()


def duration_text(seconds: float) -> str:
    """``5400`` → ``"1 h 30 min"``; under an hour ``"45 min"``; under a minute ``"40 s"``."""
    seconds = max(int(seconds), 0)
    if seconds < 60:
        return f"{seconds} s"
    hours, minutes = divmod(seconds // 60, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"


def team_label(team: str | None) -> dict[str, str]:
    """The ``team`` label of an alert: ``{"team": team}``, or none when there is no team."""
    return {"team": team} if team else {}
