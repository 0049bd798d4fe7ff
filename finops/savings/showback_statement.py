"""What a showback statement is, whoever builds or renders it: a :class:`Statement` of :class:`Section` tables whose
:class:`Column` says what its cells are (text, money in cents, GPU-hours, percent), and the rows of its idle and
right-sizing sections (built by :func:`finops.savings.showback.build_statement`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Literal

ColumnKind = Literal["text", "money", "hours", "percent"]
Cell = str | Decimal | float | None
"""A cell: text; money in cents or a percent (``Decimal``); GPU-hours (``float``); None: unknown (unpriced, not
comparable), never 0."""


@dataclass(frozen=True, slots=True)
class Column:
    """A column of a section: ``key`` (the CSV header, snake_case), ``title`` (what people read), ``kind``."""

    key: str
    title: str
    kind: ColumnKind


@dataclass(frozen=True, slots=True)
class Section:
    """One table of a statement. ``rows`` hold one cell per column; ``total`` (or None) adds them up; ``shown``: the
    rows the e-mail and the text show (None: all), the rest summed on one line that counts them as ``noun``
    (``jobs``). ``note``: sentences under the title ("" none); a section without rows is its note alone."""

    key: str
    title: str
    columns: tuple[Column, ...]
    rows: tuple[tuple[Cell, ...], ...] = ()
    total: tuple[Cell, ...] | None = None
    note: str = ""
    shown: int | None = None
    noun: str = "rows"


@dataclass(frozen=True, slots=True)
class IdleReason:
    """One reason's share of a team's idle cost over the period: ``reason`` (a key), ``title`` (as people read it),
    the idle GPU-hours and their exact cost (priced GPU-hours only; ``unpriced_gpu_hours`` apart, never as 0)."""

    reason: str
    title: str
    gpu_hours: float
    cost: Decimal
    unpriced_gpu_hours: float = 0.0


@dataclass(frozen=True, slots=True)
class Saving:
    """What one job could have asked for instead, and what that would have saved over the period: ``change`` (the
    request line that fixes it), the GPU-hours it would not have held, the exact saving (None: unpriced)."""

    job_id: str
    user: str
    change: str
    gpu_hours_saved: float
    saving: Decimal | None


@dataclass(frozen=True, slots=True)
class Statement:
    """A team's showback for one month (module docstring). ``month``: its first instant; [``start``, ``end``): the
    ledger hours it covers, the whole month when ``complete``; ``made_at``: when it was made; ``pending_hours``: ledger
    hours of the period still waiting for a rollup then (its figures may change). ``summary``: one paragraph of the
    headline figures, ``facts``: those figures as (name, value) pairs (a chat message's fields)."""

    team: str
    month: datetime
    start: datetime
    end: datetime
    complete: bool
    currency: str
    made_at: datetime
    summary: str
    facts: tuple[tuple[str, str], ...]
    sections: tuple[Section, ...] = field(default=())
    pending_hours: int = 0

    @property
    def title(self) -> str:
        """``GPU showback October 2026: team vision`` (``… month to date`` while the month runs)."""
        to_date = "" if self.complete else " month to date"
        return f"GPU showback {self.month:%B %Y}{to_date}: team {self.team}"

    def section(self, key: str) -> Section:
        """The section called ``key``; KeyError if there is none."""
        for section in self.sections:
            if section.key == key:
                return section
        raise KeyError(key)


def money(amount: Decimal | None, currency: str) -> str:
    """``1234.5`` → ``1,234.50 USD``; None → ``unpriced``."""
    return "unpriced" if amount is None else f"{amount:,.2f} {currency}"


def sum_cells(values: Sequence[Cell]) -> Cell:
    """The sum of a column's numbers (None and text left out): exact ``Decimal`` when all are, else a float to 6
    decimals; None when there is no number."""
    numbers = [v for v in values if isinstance(v, Decimal | float)]
    if not numbers:
        return None
    if all(isinstance(v, Decimal) for v in numbers):
        return sum((v for v in numbers if isinstance(v, Decimal)), Decimal(0))
    return round(sum(float(v) for v in numbers), 6)
