"""Spend anomalies: a team's daily spend against its trailing 14-day baseline, judged robustly.

For a UTC day D and a team, x = the team's allocated cost on D; the baseline is its daily spend on the 14
days before D (days without ledger rows count as 0 once the ledger covers them). With m = median and
MAD = median(|b − m|) of the baseline, the modified z-score is ``0.6745 × (x − m) / MAD`` (Iglewicz and
Hoaglin, "How to Detect and Handle Outliers", 1993; 0.6745 makes MAD consistent with σ for normal data).
When MAD is 0 (a flat baseline) the mean absolute deviation stands in: ``(x − m) / (1.253314 × MeanAD)``
(1.253314 = √(π/2), the same consistency constant). D is an anomaly when |z| > 3.5 (their recommended
cut-off) and |x − m| is at least :data:`MIN_DEVIATION` of the currency, so pennies on an idle team are not
news; with both deviations 0, any change of at least that amount is one. At least 7 baseline days with
ledger rows are needed. Each anomaly is recorded once per team and day as a ``spend_anomaly`` event.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

from sqlalchemy import BigInteger, func, select, type_coerce
from sqlalchemy.orm import Session

from finops.analysis.events import SPEND_ANOMALY, record_event
from finops.db.ledger_tables import LedgerTeamHour
from finops.db.models import Team
from finops.jobs.teams import team_ids_by_name

BASELINE_DAYS = 14
MIN_BASELINE_DAYS = 7
Z_THRESHOLD = Decimal("3.5")
MAD_CONSISTENCY = Decimal("0.6745")
MEAN_AD_CONSISTENCY = Decimal("1.253314")
MIN_DEVIATION = Decimal("1")


@dataclass(frozen=True, slots=True)
class Anomaly:
    """A team's spend on ``day`` (exact), the baseline median, the modified z-score (None: flat baseline)."""

    team: str
    day: date
    spend: Decimal
    baseline_median: Decimal
    z_score: Decimal | None
    currency: str


def modified_z(value: Decimal, baseline: list[Decimal]) -> Decimal | None:
    """The modified z-score of ``value`` against ``baseline`` (formula in the module docstring); None when
    the baseline has no spread at all (every day equal)."""
    median = statistics.median(baseline)
    mad = statistics.median(abs(b - median) for b in baseline)
    if mad:
        return MAD_CONSISTENCY * (value - median) / mad
    mean_ad = sum((abs(b - median) for b in baseline), Decimal(0)) / len(baseline)
    if mean_ad:
        return (value - median) / (MEAN_AD_CONSISTENCY * mean_ad)
    return None


def is_anomalous(value: Decimal, baseline: list[Decimal]) -> bool:
    """Whether ``value`` is a spend anomaly against ``baseline`` (rules in the module docstring)."""
    median = statistics.median(baseline)
    if abs(value - median) < MIN_DEVIATION:
        return False
    z = modified_z(value, baseline)
    return z is None or abs(z) > Z_THRESHOLD


def _daily_spend(session: Session, start: date, end: date) -> tuple[dict[tuple[str, date], Decimal], set[date], str]:
    """({(team, day): spend}, days that have any ledger row, currency) over days [start, end)."""
    epoch = type_coerce(LedgerTeamHour.hour, BigInteger)  # the stored epoch seconds, not a datetime
    day = (epoch - epoch % 86400).label("day")
    lo, hi = datetime.combine(start, time(), UTC), datetime.combine(end, time(), UTC)
    rows = session.execute(
        select(Team.name, day, func.sum(LedgerTeamHour.allocated_cost), func.min(LedgerTeamHour.currency))
        .join(Team, Team.id == LedgerTeamHour.team_id)
        .where(LedgerTeamHour.hour >= lo, LedgerTeamHour.hour < hi)
        .group_by(Team.name, day)
    ).all()
    spend: dict[tuple[str, date], Decimal] = {}
    covered: set[date] = set()
    currency = ""
    for team, day_epoch, total, row_currency in rows:
        the_day = datetime.fromtimestamp(int(day_epoch), UTC).date()
        spend[team, the_day] = Decimal(total)
        covered.add(the_day)
        currency = row_currency
    return spend, covered, currency


def find_anomalies(session: Session, day: date) -> list[Anomaly]:
    """Every team whose spend on UTC ``day`` is anomalous against its 14 preceding days."""
    first = day - timedelta(days=BASELINE_DAYS)
    spend, covered, currency = _daily_spend(session, first, day + timedelta(days=1))
    baseline_days = [first + timedelta(days=i) for i in range(BASELINE_DAYS) if first + timedelta(days=i) in covered]
    if len(baseline_days) < MIN_BASELINE_DAYS or day not in covered:
        return []
    anomalies = []
    for team in sorted({team for team, _ in spend}):
        value = spend.get((team, day), Decimal(0))
        baseline = [spend.get((team, d), Decimal(0)) for d in baseline_days]
        if is_anomalous(value, baseline):
            z = modified_z(value, baseline)
            anomalies.append(Anomaly(team, day, value, statistics.median(baseline), z, currency))
    return anomalies


def record_anomaly_events(session: Session, at: datetime) -> int:
    """Judge the last complete UTC day before ``at`` and record a ``spend_anomaly`` event per anomalous team
    (once per team and day). Returns how many anomalies were found."""
    day = at.astimezone(UTC).date() - timedelta(days=1)
    anomalies = find_anomalies(session, day)
    team_ids = team_ids_by_name(session)
    for anomaly in anomalies:
        payload = {
            "team": anomaly.team,
            "day": anomaly.day.isoformat(),
            "spend": str(anomaly.spend),
            "baseline_median": str(anomaly.baseline_median),
            "z_score": None if anomaly.z_score is None else str(anomaly.z_score.quantize(Decimal("0.01"))),
            "currency": anomaly.currency,
        }
        record_event(
            session, SPEND_ANOMALY, f"anomaly:{anomaly.team}:{anomaly.day}", team_ids[anomaly.team], at, payload
        )
    return len(anomalies)
