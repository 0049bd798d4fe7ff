"""The ledger summed per UTC hour and team (``ledger_team_hours``), kept in step with the ledger.

A month of a 1,024-GPU cluster is about 800,000 ledger rows but only 720 hours × teams team-hours (≈ 10,000 for
14 teams), so what is per team — the cost report by team, budgets' month-to-date spend, spend anomalies, the
service's cost series — reads the team-hours. :func:`finops.ledger.rollup.rebuild` rewrites the team-hours of
the hours it rewrites, in the same transaction, so they always equal the ledger's sums (the tests compare them).
Filters by cluster or partition select ledger rows by job and node (:mod:`finops.analysis.filters`), which the
team-hours do not keep: queries with them read the ledger.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ColumnElement, Connection, case, delete, func, insert, literal, select
from sqlalchemy.orm import Session

from finops.db.ledger_tables import LedgerEntry, LedgerTeamHour
from finops.db.sqltypes import Money


def ledger_team_sums() -> dict[str, ColumnElement[object]]:
    """The aggregates of :class:`LedgerEntry` rows that make a :class:`LedgerTeamHour`, by its column names.

    Money sums the priced rows (0 when there are none); an unpriced row (NULL money: no price for its GPU's model)
    counts in ``seconds`` and ``unpriced_gpu_seconds``. Hardware activity: :func:`activity_sums`, and
    ``sm_active_cost`` the sum of the rows' (NULL when none has one)."""
    held = LedgerEntry.job_pk.is_not(None)
    zero = literal(0, Money())
    return {
        "seconds": func.sum(LedgerEntry.seconds),
        "used_gpu_seconds": func.sum(LedgerEntry.used_gpu_seconds),
        "metered_gpu_seconds": func.sum(case((held & (LedgerEntry.sample_count > 0), LedgerEntry.seconds), else_=0)),
        "unmetered_gpu_seconds": func.sum(case((held & (LedgerEntry.sample_count == 0), LedgerEntry.seconds), else_=0)),
        "energy_joules": func.sum(LedgerEntry.energy_joules),
        "allocated_cost": func.coalesce(func.sum(LedgerEntry.allocated_cost), zero),
        "used_cost": func.coalesce(func.sum(LedgerEntry.used_cost), zero),
        "idle_cost": func.coalesce(func.sum(LedgerEntry.idle_cost), zero),
        "energy_cost": func.sum(LedgerEntry.energy_cost),
        "currency": func.min(LedgerEntry.currency),
        "unpriced_gpu_seconds": func.sum(case((LedgerEntry.allocated_cost.is_(None), LedgerEntry.seconds), else_=0)),
        "profiled_gpu_seconds": func.sum(LedgerEntry.profiled_seconds),
        **activity_sums(),
        "sm_active_cost": func.sum(LedgerEntry.sm_active_cost),
    }


TEAM_ACTIVITIES = ("sm_active", "tensor_active", "dram_active")
"""The activities whose sums the team-hours keep (the ledger keeps all of
:data:`collector.contract.wire.ACTIVITY_COLUMNS`)."""


def activity_sums(names: tuple[str, ...] = TEAM_ACTIVITIES) -> dict[str, ColumnElement[object]]:
    """Per activity of ``names`` (default :data:`TEAM_ACTIVITIES`; any ``<name>_ratio`` column of
    :class:`LedgerEntry`, e.g. ``sm_occupancy``), over :class:`LedgerEntry` rows: ``<activity>_gpu_seconds`` = Σ
    profiled seconds × the row's mean (NULL when no row measured it) and ``<activity>_measured_gpu_seconds`` = Σ
    profiled seconds of the rows that measured it; their quotient is the activity's mean over those seconds."""
    sums: dict[str, ColumnElement[object]] = {}
    for name in names:
        ratio = getattr(LedgerEntry, f"{name}_ratio")
        sums[f"{name}_gpu_seconds"] = func.sum(LedgerEntry.profiled_seconds * ratio)
        sums[f"{name}_measured_gpu_seconds"] = func.sum(
            case((ratio.is_not(None), LedgerEntry.profiled_seconds), else_=0)
        )
    return sums


def refresh_team_hours(session: Session | Connection, start: datetime | int, end: datetime | int) -> None:
    """Rewrite the team-hours of the hours in [start, end) (aware datetimes or epoch seconds) from the ledger:
    one DELETE and one ``INSERT … SELECT … GROUP BY hour, team``."""
    session.execute(delete(LedgerTeamHour).where(LedgerTeamHour.hour >= start, LedgerTeamHour.hour < end))
    sums = ledger_team_sums()
    rows = (
        select(LedgerEntry.hour, LedgerEntry.team_id, *sums.values())
        .where(LedgerEntry.hour >= start, LedgerEntry.hour < end)
        .group_by(LedgerEntry.hour, LedgerEntry.team_id)
    )
    session.execute(insert(LedgerTeamHour).from_select(["hour", "team_id", *sums], rows))
