"""The service's cost series for Prometheus and Grafana: low cardinality (team, project), no job ids.

Refreshed by the scheduler after each rollup (one query each over the team-hours, budgets and samples) and
served from that snapshot, so a scrape never queries the database. Names follow the Prometheus naming
rules: base units (seconds), ``_ratio``, ``_timestamp_seconds``; money is in the catalog currency, named by a
``currency`` label (Prometheus has no money unit, as OpenCost's ``node_total_hourly_cost`` also shows).

- ``gpufinops_team_allocated_cost{team,currency}``, ``…_used_cost``, ``…_idle_cost``, ``…_energy_cost``: the
  ledger's sums since it began. Gauges, not counters: a rebuilt hour restates them, down as well as up (a job imported
  for hours already built moves their cost from ``__unallocated__`` to its team; a price change re-costs them), and a
  counter that falls reads as a reset to ``rate()`` and ``increase()``, which would add the whole sum again. The cost
  of a window is ``delta(…[1d])`` or ``… - … offset 1d``.
- ``gpufinops_team_gpu_seconds{team}``, ``gpufinops_team_used_gpu_seconds{team}``: GPU-seconds held and
  GPU-seconds × utilisation, gauges for the same reason.
- Hardware activity (DCGM profiling fields, NVML GPM), only for a team whose GPUs measured it (absent, not 0,
  otherwise): ``gpufinops_team_sm_active_cost{team,currency}``, the ledger's SM-active cost (allocated × SM
  activity) since it began, a gauge like the costs above; ``gpufinops_team_profiled_gpu_seconds{team}``,
  held GPU-seconds metered with a profiling field; ``gpufinops_team_sm_active_ratio{team}``,
  ``gpufinops_team_tensor_active_ratio{team}``, ``gpufinops_team_dram_active_ratio{team}``: the mean activity of
  the current calendar month (UTC) over the profiled GPU-seconds that measured it (the cost report's rule).
- ``gpufinops_budget_used_ratio{team,project}``: month-to-date spend ÷ budget.
- ``gpufinops_budget_forecast_ratio{team,project}``: forecast month-end spend ÷ budget.
  Neither for a budget in another currency than the spend (not comparable: ``gpu-finops budget status`` says so).
- ``gpufinops_newest_sample_timestamp_seconds`` (within the last day),
  ``gpufinops_ledger_newest_hour_timestamp_seconds``: data freshness (a stalled collector fleet or rollup
  shows as a growing ``time() - …``);
  ``gpufinops_ledger_pending_rebuilds``: hours waiting for a rebuild.
- ``gpufinops_unpriced_gpu_hours{model}``: GPU-hours of the current calendar month (UTC) in the ledger whose GPU
  model has no price in the catalog (counted, never costed); absent when there are none. The fix: add a price for
  the model to the catalog (``gpu-finops prices import FILE``) or set the node's model.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import BigInteger, func, select, type_coerce
from sqlalchemy.orm import Session, sessionmaker

from finops.analysis.budgets import budget_status
from finops.analysis.quality import newest_reading
from finops.analysis.report import unpriced_by_model
from finops.db.ledger_tables import DirtyHour, LedgerEntry, LedgerTeamHour
from finops.db.models import Gpu, Team
from finops.ledger.team_hours import TEAM_ACTIVITIES
from finops.timeutil import month_start, utc_now

_MONEY = ("allocated", "used", "idle", "energy")
_ACTIVITY_TEXT = {
    "sm_active": "SM activity (DCGM_FI_PROF_SM_ACTIVE)",
    "tensor_active": "tensor-pipe activity (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)",
    "dram_active": "DRAM activity (DCGM_FI_PROF_DRAM_ACTIVE)",
}
"""How each of :data:`finops.ledger.team_hours.TEAM_ACTIVITIES` is named in a series' help."""


@dataclass
class _Snapshot:
    money: dict[str, dict[tuple[str, str], float]] = field(default_factory=dict)
    gpu_seconds: dict[str, float] = field(default_factory=dict)
    used_gpu_seconds: dict[str, float] = field(default_factory=dict)
    budget_used: dict[tuple[str, str], float] = field(default_factory=dict)
    budget_forecast: dict[tuple[str, str], float] = field(default_factory=dict)
    newest_sample: float | None = None
    newest_hour: float | None = None
    dirty_hours: int = 0
    unpriced_gpu_hours: dict[str, float] = field(default_factory=dict)
    sm_active_cost: dict[tuple[str, str], float] = field(default_factory=dict)
    profiled_gpu_seconds: dict[str, float] = field(default_factory=dict)
    activity: dict[str, dict[str, float]] = field(default_factory=dict)


FRESHNESS_LOOKBACK_SECONDS = 86400
"""How far back the newest reading is looked for: older data reads as no reading at all (the series is absent)."""


def _newest_sample(session: Session) -> int | None:
    """Epoch seconds of the newest reading of the last day, by :func:`finops.analysis.quality.newest_reading` per
    GPU."""
    since = int(utc_now().timestamp()) - FRESHNESS_LOOKBACK_SECONDS
    return session.scalar(select(func.max(newest_reading(since))).select_from(Gpu))


def _month_activity(session: Session) -> dict[str, dict[str, float]]:
    """Activity (``sm_active`` …, :data:`finops.ledger.team_hours.TEAM_ACTIVITIES`) → team → mean over the current
    calendar month's (UTC) profiled GPU-seconds that measured it: Σ ``<activity>_gpu_seconds`` ÷ Σ
    ``<activity>_measured_gpu_seconds`` of the team-hours; a team that measured none is left out."""
    columns = []
    for name in TEAM_ACTIVITIES:
        columns += [
            func.sum(getattr(LedgerTeamHour, f"{name}_gpu_seconds")),
            func.sum(getattr(LedgerTeamHour, f"{name}_measured_gpu_seconds")),
        ]
    rows = session.execute(
        select(Team.name, *columns)
        .join(Team, Team.id == LedgerTeamHour.team_id)
        .where(LedgerTeamHour.hour >= month_start(utc_now()))
        .group_by(Team.name)
    ).all()
    means: dict[str, dict[str, float]] = {name: {} for name in TEAM_ACTIVITIES}
    for team, *sums in rows:
        for i, name in enumerate(TEAM_ACTIVITIES):
            total, measured = sums[2 * i], sums[2 * i + 1]
            if total is not None and measured:
                means[name][team] = float(total) / float(measured)
    return means


class CostMetrics(Collector):
    """A Prometheus collector of the cost series in the module docstring; :meth:`refresh` updates them."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._snapshot = _Snapshot()
        self._lock = threading.Lock()
        registry.register(self)

    def refresh(self, sessions: sessionmaker[Session]) -> None:
        """Read the ledger, this month's budgets and the newest sample into a new snapshot."""
        snapshot = _Snapshot()
        with sessions() as session:
            sums = session.execute(
                select(
                    Team.name,
                    func.min(LedgerTeamHour.currency),
                    func.sum(LedgerTeamHour.allocated_cost),
                    func.sum(LedgerTeamHour.used_cost),
                    func.sum(LedgerTeamHour.idle_cost),
                    func.sum(LedgerTeamHour.energy_cost),
                    func.sum(LedgerTeamHour.seconds),
                    func.sum(LedgerTeamHour.used_gpu_seconds),
                    func.sum(LedgerTeamHour.profiled_gpu_seconds),
                    func.sum(LedgerTeamHour.sm_active_cost),
                )
                .join(Team, Team.id == LedgerTeamHour.team_id)
                .group_by(Team.name)
            ).all()
            for team, currency, *amounts, seconds, used_seconds, profiled, sm_active_cost in sums:
                for kind, amount in zip(_MONEY, amounts[:4], strict=True):
                    snapshot.money.setdefault(kind, {})[team, currency] = float(amount)
                snapshot.gpu_seconds[team] = float(seconds)
                snapshot.used_gpu_seconds[team] = float(used_seconds)
                if profiled:
                    snapshot.profiled_gpu_seconds[team] = float(profiled)
                if sm_active_cost is not None:
                    snapshot.sm_active_cost[team, currency] = float(sm_active_cost)
            snapshot.activity = _month_activity(session)
            for status in budget_status(session, utc_now()):
                if not status.comparable:  # budget and spend in two currencies: no ratio (the pages say why)
                    continue
                snapshot.budget_used[status.team, status.project] = status.used_ratio
                forecast = float(status.forecast / status.budget) if status.budget else 0.0
                snapshot.budget_forecast[status.team, status.project] = forecast
            newest_sample = _newest_sample(session)
            newest_hour = session.scalar(select(func.max(type_coerce(LedgerEntry.hour, BigInteger))))
            snapshot.newest_sample = None if newest_sample is None else float(newest_sample)
            snapshot.newest_hour = None if newest_hour is None else float(newest_hour)
            snapshot.dirty_hours = session.scalar(select(func.count()).select_from(DirtyHour)) or 0
            now = utc_now()
            for unpriced in unpriced_by_model(session, month_start(now), now + timedelta(hours=1)):
                snapshot.unpriced_gpu_hours[unpriced.model] = unpriced.gpu_seconds / 3600
        with self._lock:
            self._snapshot = snapshot

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The snapshot's series (called by prometheus_client on each scrape)."""
        with self._lock:
            snapshot = self._snapshot
        for kind in _MONEY:
            family = GaugeMetricFamily(
                f"gpufinops_team_{kind}_cost",
                f"{kind.capitalize()} GPU cost of the team in the ledger, in the currency label's unit.",
                labels=["team", "currency"],
            )
            for (team, currency), amount in sorted(snapshot.money.get(kind, {}).items()):
                family.add_metric([team, currency], amount)
            yield family
        for name, values, text in (
            ("gpufinops_team_gpu_seconds", snapshot.gpu_seconds, "GPU-seconds the team held (ledger)."),
            ("gpufinops_team_used_gpu_seconds", snapshot.used_gpu_seconds, "GPU-seconds × utilisation (ledger)."),
        ):
            gauge = GaugeMetricFamily(name, text, labels=["team"])
            for team, value in sorted(values.items()):
                gauge.add_metric([team], value)
            yield gauge
        sm_active_cost = GaugeMetricFamily(
            "gpufinops_team_sm_active_cost",
            "SM-active GPU cost of the team in the ledger (allocated cost x SM activity, DCGM_FI_PROF_SM_ACTIVE), in "
            "the currency label's unit; only teams whose GPUs measured SM activity.",
            labels=["team", "currency"],
        )
        for (team, currency), amount in sorted(snapshot.sm_active_cost.items()):
            sm_active_cost.add_metric([team, currency], amount)
        yield sm_active_cost
        profiled = GaugeMetricFamily(
            "gpufinops_team_profiled_gpu_seconds",
            "GPU-seconds the team held that were metered with a hardware activity (profiling) field (ledger).",
            labels=["team"],
        )
        for team, seconds in sorted(snapshot.profiled_gpu_seconds.items()):
            profiled.add_metric([team], seconds)
        yield profiled
        for name in TEAM_ACTIVITIES:
            gauge = GaugeMetricFamily(
                f"gpufinops_team_{name}_ratio",
                f"Mean {_ACTIVITY_TEXT[name]} of the team's GPUs this calendar month (UTC), over the profiled "
                "GPU-seconds that measured it; absent when none did.",
                labels=["team"],
            )
            for team, ratio in sorted(snapshot.activity.get(name, {}).items()):
                gauge.add_metric([team], ratio)
            yield gauge
        for name, ratios, text in (
            ("gpufinops_budget_used_ratio", snapshot.budget_used, "Month-to-date spend / monthly budget."),
            ("gpufinops_budget_forecast_ratio", snapshot.budget_forecast, "Forecast month-end spend / budget."),
        ):
            gauge = GaugeMetricFamily(name, text, labels=["team", "project"])
            for (team, project), ratio in sorted(ratios.items()):
                gauge.add_metric([team, project], ratio)
            yield gauge
        freshness = (
            ("gpufinops_newest_sample_timestamp_seconds", snapshot.newest_sample, "Time of the newest GPU reading."),
            ("gpufinops_ledger_newest_hour_timestamp_seconds", snapshot.newest_hour, "Newest ledger hour's start."),
        )
        for name, instant, text in freshness:
            if instant is not None:
                yield GaugeMetricFamily(name, text, value=instant)
        yield GaugeMetricFamily(
            "gpufinops_ledger_pending_rebuilds",
            "Ledger hours marked for a rebuild (a count; the current hour, marked by ingest, is one of them).",
            value=snapshot.dirty_hours,
        )
        unpriced = GaugeMetricFamily(
            "gpufinops_unpriced_gpu_hours",
            "GPU-hours of this month (UTC) whose GPU model has no price: counted, not costed. Add a price for the "
            "model to the catalog (gpu-finops prices import) or set the node's model.",
            labels=["model"],
        )
        for model, hours in sorted(snapshot.unpriced_gpu_hours.items()):
            unpriced.add_metric([model], hours)
        yield unpriced
