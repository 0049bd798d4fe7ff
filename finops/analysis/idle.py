"""Idle GPU episodes: an allocated GPU at or below the idle threshold for at least the idle window.

Judged sample by sample (a sliding window), never on a job's average: a run of consecutive samples with
utilisation ≤ threshold, with no gap longer than ``max_gap`` between them, that lies inside one job's
allocation. Each sample stands for the time until the next one (at most ``max_gap``), so a run covers
[first idle sample, the sample after the last idle one). A run qualifies once it lasts the window; it is
re-judged as data arrives, so an open episode grows until the GPU is busy again or the job ends.

The first ``grace_seconds`` of an allocation (a job loading data, compiling, waiting on its peers) are not
judged: an episode starts no earlier than allocation start + grace. A Slurm partition can have its own
threshold (an interactive partition may call 1 % idle where a batch partition uses 5 %): runs are found once
per distinct threshold and kept for the allocations whose job's partition uses it.

Episodes are re-judged over the hours a ledger rollup rebuilt (:func:`rejudge_idle`), which are the hours whose
readings or allocations changed however late they arrived: each run of consecutive hours widened by the idle
window (and the max gap) on both sides, and further to take in whole every stored episode it reaches
(:func:`detect_idle`), so that episodes crossing its edges are judged whole. Re-judging any set of hours therefore
stores the episodes that one detection over the whole period would.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Protocol

from sqlalchemy import TextClause, column, delete, func, or_, select, table, text
from sqlalchemy.orm import Session

from collector.contract.clocks_events import POWER_MASK, THERMAL_MASK
from finops.analysis.waste import MEMORY_HELD_BYTES, EpisodeRun, ReasonPolicy, Verdict, judge_episodes
from finops.db.dialect import insert_rows
from finops.db.models import Allocation, Gpu, IdleEpisode, Job, Node, Team
from finops.ledger.costmodel import capacity_cost
from finops.ledger.rollup import unpriced_fix
from finops.pricing.catalog import PriceNotFound, Pricing
from finops.pricing.rules import pricing_models_by_node
from finops.timeutil import HOUR, from_epoch, to_epoch

IDLE_READINGS_TABLE = "idle_readings"
"""The session-local temporary table :func:`detect_idle` judges a :class:`ReadingSource`'s readings in."""
_READINGS = table(
    IDLE_READINGS_TABLE, column("gpu_id"), column("ts"), column("utilization_ratio"), column("memory_used_bytes")
)

_COVERED_UNTIL = "CASE WHEN next_ts IS NULL THEN ts WHEN next_ts - ts > :max_gap THEN ts + :max_gap ELSE next_ts END"
# A reading's next one, also when it lies past the scanned period (the last reading before ``:end``), so that a
# run cut by the period's end covers what it covers in a scan of the whole history.
_NEXT_TS = """COALESCE(LEAD(ts) OVER (PARTITION BY gpu_id ORDER BY ts),
                    (SELECT MIN(later.ts) FROM {table} later WHERE later.gpu_id = g.gpu_id AND later.ts >= :end
                       AND later.utilization_ratio IS NOT NULL))"""


def _idle_runs(table: str, clocks: bool) -> TextClause:
    """The idle runs of the readings in ``table`` (``gpu_samples``, or :data:`IDLE_READINGS_TABLE`: columns
    ``gpu_id``, ``ts`` epoch seconds, ``utilization_ratio``, ``memory_used_bytes``): one statement, so that both
    sources are judged by the same rules. Each run also counts its readings, those with a thermal clocks-event
    reason, those with a power one, those with either and their mean SM clock
    (:data:`collector.contract.clocks_events.THERMAL_MASK`, ``POWER_MASK``), from ``clocks_event_reasons`` and
    ``sm_clock_hertz`` when ``clocks`` (the table has them), else as none."""
    next_ts = _NEXT_TS.format(table=table)
    clock_columns = (
        "clocks_event_reasons AS clk, sm_clock_hertz AS sm"
        if clocks
        else "CAST(NULL AS BIGINT) AS clk, CAST(NULL AS DOUBLE PRECISION) AS sm"
    )
    thermal, power = f"(COALESCE(clk, 0) & {THERMAL_MASK}) <> 0", f"(COALESCE(clk, 0) & {POWER_MASK}) <> 0"
    throttled = f"(COALESCE(clk, 0) & {THERMAL_MASK | POWER_MASK}) <> 0"
    return text(f"""
WITH s AS (
    SELECT gpu_id, ts, utilization_ratio AS u, memory_used_bytes AS mem, {clock_columns},
           LAG(ts) OVER (PARTITION BY gpu_id ORDER BY ts) AS prev_ts,
           {next_ts} AS next_ts
    FROM {table} g
    WHERE gpu_id IN (SELECT id FROM gpus) AND ts >= :start AND ts < :end AND utilization_ratio IS NOT NULL
), runs AS (
    SELECT gpu_id, ts, u, mem, clk, sm, next_ts,
           SUM(CASE WHEN u > :threshold OR prev_ts IS NULL OR ts - prev_ts > :max_gap THEN 1 ELSE 0 END)
               OVER (PARTITION BY gpu_id ORDER BY ts) AS run
    FROM s
)
SELECT gpu_id, MIN(ts) AS first_ts, MAX({_COVERED_UNTIL}) AS covered_until, MAX(COALESCE(mem, 0)) AS max_mem,
       COUNT(*) AS readings, SUM(CASE WHEN {thermal} THEN 1 ELSE 0 END) AS thermal_readings,
       SUM(CASE WHEN {power} THEN 1 ELSE 0 END) AS power_readings,
       SUM(CASE WHEN {throttled} THEN 1 ELSE 0 END) AS throttled_readings,
       AVG(CASE WHEN {throttled} THEN sm END) AS throttled_sm_clock
FROM runs WHERE u <= :threshold
GROUP BY gpu_id, run
HAVING MAX({_COVERED_UNTIL}) - MIN(ts) >= :window
""")  # noqa: S608 - the f-string only inlines the constant expressions above and a table name of this module's


_IDLE_RUNS = _idle_runs("gpu_samples", clocks=True)
_IDLE_RUNS_ELSEWHERE = _idle_runs(IDLE_READINGS_TABLE, clocks=False)


class ReadingSource(Protocol):
    """Readings kept elsewhere than ``gpu_samples`` (a TSDB: :class:`finops.ingest.tsdb_source.TsdbTelemetry`)."""

    def idle_readings(
        self, session: Session, start: int, end: int, threshold: float
    ) -> Iterable[tuple[int, int, float, float | None]]:
        """The readings with a utilisation in [start, end) (epoch seconds): (``gpus.id``, epoch second, utilisation
        ratio, memory used in bytes or None), of the GPUs the database knows. A reading above ``threshold`` (a
        utilisation ratio) that is neither just before nor just after one at or below it in its GPU's series ends
        no run and begins none: it may be left out, and so may every reading of a GPU with none at or below it."""
        ...


@dataclass(frozen=True, slots=True)
class IdlePolicy:
    """Utilisation ratio ≤ ``threshold`` for ≥ ``window_seconds``; samples > ``max_gap_seconds`` apart break a run;
    the first ``grace_seconds`` of an allocation are not judged; ``partition_thresholds`` override ``threshold``
    for jobs of those Slurm partitions; ``reasons``: the thresholds of the waste reason each episode is given
    (:mod:`finops.analysis.waste`)."""

    threshold: float = 0.05
    window_seconds: int = 1800
    max_gap_seconds: int = 150
    grace_seconds: int = 600
    partition_thresholds: Mapping[str, float] = field(default_factory=dict)
    reasons: ReasonPolicy = field(default_factory=ReasonPolicy)

    def threshold_for(self, partition: str) -> float:
        """The idle threshold ratio of a job in ``partition``."""
        return self.partition_thresholds.get(partition, self.threshold)


def detect_idle(
    session: Session,
    start: datetime,
    end: datetime,
    policy: IdlePolicy,
    pricing: Pricing,
    readings: ReadingSource | None = None,
) -> int:
    """Re-judge idle episodes over [start, end) (UTC) and store them, each with its waste reason and evidence
    (:func:`finops.analysis.waste.judge_episodes`); returns how many are stored. The readings are ``gpu_samples``',
    or ``readings``' (those of the grown period and of the max gap after it, put in the temporary table
    :data:`IDLE_READINGS_TABLE` for the same statement to judge, and removed after it; they carry no clocks-event
    reasons, so no episode judged on them is throttled).

    The period first grows to take in whole every stored episode that touches it, with the max gap to spare on
    both sides (:func:`_span_of_stored`); the stored episodes in the grown period are replaced by those judged
    over it, and those outside it are kept. Running this again, or on overlapping periods, stores each episode
    once; episodes that start before ``start`` or end after ``end`` are judged whole when they are stored ones,
    and :func:`rejudge_idle` widens the period for those that are not yet.
    """
    scan_from, scan_until = _span_of_stored(session, to_epoch(start), to_epoch(end), policy.max_gap_seconds)
    session.execute(
        delete(IdleEpisode).where(IdleEpisode.end >= from_epoch(scan_from), IdleEpisode.start <= from_epoch(scan_until))
    )
    end = from_epoch(scan_until)
    parameters = {
        "start": scan_from,
        "end": scan_until,
        "max_gap": policy.max_gap_seconds,
        "window": policy.window_seconds,
    }
    thresholds = {policy.threshold, *policy.partition_thresholds.values()}
    if readings is None:
        statement = _IDLE_RUNS
    else:
        _load_readings(
            session,
            readings.idle_readings(session, scan_from, scan_until + policy.max_gap_seconds + 1, max(thresholds)),
        )
        statement = _IDLE_RUNS_ELSEWHERE
    runs = {t: session.execute(statement, {**parameters, "threshold": t}).all() for t in sorted(thresholds)}
    if readings is not None:
        session.execute(text(f"DELETE FROM {IDLE_READINGS_TABLE}"))  # noqa: S608 - a constant
    gpu_ids = {run.gpu_id for found in runs.values() for run in found}
    if not gpu_ids:
        return 0
    allocations = defaultdict(list)
    for gpu_id, holder, allocated_from, allocated_until, partition, job_name in session.execute(
        select(Allocation.gpu_id, Allocation.job_pk, Allocation.start, Allocation.end, Job.partition, Job.name)
        .join(Job, Job.id == Allocation.job_pk)
        .where(
            Allocation.gpu_id.in_(gpu_ids),
            Allocation.start < end,
            or_(Allocation.end.is_(None), Allocation.end > from_epoch(scan_from)),
        )
    ):
        until = None if allocated_until is None else to_epoch(allocated_until)
        allocations[gpu_id].append(
            (holder, to_epoch(allocated_from), until, policy.threshold_for(partition), partition, job_name)
        )
    node_models = pricing_models_by_node(session, pricing.model)
    priced_as, nodes = {}, {}
    for gpu_id, model, node_id in session.execute(select(Gpu.id, Gpu.model, Gpu.node_id).where(Gpu.id.in_(gpu_ids))):
        priced_as[gpu_id] = (model, node_models.get(node_id, pricing.model))
        nodes[gpu_id] = node_id
    episodes: list[tuple[EpisodeRun, Decimal | None]] = []
    for threshold, found in runs.items():
        for run in found:
            for job_pk, a_start, a_end, job_threshold, partition, job_name in allocations[run.gpu_id]:
                if job_threshold != threshold:
                    continue
                lo = max(run.first_ts, a_start + policy.grace_seconds)
                hi = run.covered_until if a_end is None else min(run.covered_until, a_end)
                if hi - lo < policy.window_seconds:
                    continue
                cost: Decimal | None
                try:
                    rate = pricing.catalog.rate(*priced_as[run.gpu_id], from_epoch(lo))
                    cost = capacity_cost(rate, hi - lo)
                except PriceNotFound:
                    cost = None  # unpriced, never 0: the rollup after a catalog import that prices it re-judges it
                episode = EpisodeRun(
                    run.gpu_id, nodes[run.gpu_id], job_pk, partition, job_name, lo, hi, float(run.max_mem),
                    int(run.readings), int(run.thermal_readings), int(run.power_readings),
                    int(run.throttled_readings), run.throttled_sm_clock,
                )  # fmt: skip
                episodes.append((episode, cost))
    verdicts = judge_episodes(session, [episode for episode, _ in episodes], policy.reasons)
    for (episode, cost), verdict in zip(episodes, verdicts, strict=True):
        session.add(
            IdleEpisode(
                gpu_id=episode.gpu_id,
                job_pk=episode.job_pk,
                start=from_epoch(episode.start),
                end=from_epoch(episode.end),
                memory_held=episode.memory_bytes > MEMORY_HELD_BYTES,
                cost=cost,
                currency=pricing.catalog.currency,
                reason=verdict.reason,
                evidence=verdict.evidence,
            )
        )
    stored = len(episodes)
    session.flush()
    return stored


def _load_readings(session: Session, rows: Iterable[tuple[int, int, float, float | None]]) -> None:
    """Put ``rows`` (``gpus.id``, epoch second, utilisation ratio, memory bytes) in the session's temporary table
    :data:`IDLE_READINGS_TABLE`, made if missing and emptied first (:func:`finops.db.dialect.insert_rows`: a
    ``COPY`` on PostgreSQL). It is indexed by GPU and time, as ``gpu_samples`` is: the statement looks up each
    GPU's first reading past the period there."""
    session.execute(
        text(
            f"CREATE TEMPORARY TABLE IF NOT EXISTS {IDLE_READINGS_TABLE} (gpu_id INTEGER NOT NULL, ts BIGINT NOT NULL, "
            "utilization_ratio DOUBLE PRECISION NOT NULL, memory_used_bytes DOUBLE PRECISION)"
        )
    )
    session.execute(
        text(f"CREATE INDEX IF NOT EXISTS {IDLE_READINGS_TABLE}_gpu_ts ON {IDLE_READINGS_TABLE} (gpu_id, ts)")
    )
    session.execute(text(f"DELETE FROM {IDLE_READINGS_TABLE}"))  # noqa: S608 - a constant
    columns = [c.name for c in _READINGS.columns]
    insert_rows(session.connection(), _READINGS, [dict(zip(columns, row, strict=True)) for row in rows])


def _span_of_stored(session: Session, start: int, end: int, margin: int) -> tuple[int, int]:
    """[start, end) (epoch seconds) grown until every stored episode touching it lies inside it with ``margin``
    seconds to spare on both sides (an episode reached by the growth is taken in too)."""
    while True:
        first, last = session.execute(
            select(func.min(IdleEpisode.start), func.max(IdleEpisode.end)).where(
                IdleEpisode.end >= from_epoch(start), IdleEpisode.start <= from_epoch(end)
            )
        ).one()
        grown = (
            min(start, to_epoch(first) - margin) if first is not None else start,
            max(end, to_epoch(last) + margin) if last is not None else end,
        )
        if grown == (start, end):
            return start, end
        start, end = grown


def rejudge_idle(
    session: Session,
    hours: Iterable[int],
    policy: IdlePolicy,
    pricing: Pricing,
    readings: ReadingSource | None = None,
) -> int:
    """Re-judge idle episodes over the UTC hours ``hours`` (epoch starts; the hours a ledger rollup rebuilt) and
    store them; returns how many are stored.

    Each run of consecutive hours is widened by the idle window and the max gap on both sides, so that an episode
    crossing its edges, with readings partly in the hours and partly outside, is judged whole, then judged by
    :func:`detect_idle` (which widens it further for the stored episodes it reaches). Hours days apart (a late
    backfill and the current hour) are separate periods: the readings between them are not read. ``readings``: as
    for :func:`detect_idle`.
    """
    margin = policy.window_seconds + policy.max_gap_seconds
    spans: list[list[int]] = []
    for hour in sorted(set(hours)):
        if spans and hour - margin <= spans[-1][1] + margin:
            spans[-1][1] = hour + HOUR
        else:
            spans.append([hour, hour + HOUR])
    return sum(
        detect_idle(session, from_epoch(h0 - margin), from_epoch(h1 + margin), policy, pricing, readings)
        for h0, h1 in spans
    )


@dataclass(frozen=True, slots=True)
class EpisodeView:
    """An idle episode as people read it: where, whose, how long, what it cost, and why (``reason``, a key of
    :data:`finops.analysis.waste.REASONS`, with its ``evidence``; None for an episode judged before reasons were).
    ``cost`` is None (unpriced) when the GPU's model (``model``) had no price in effect: :attr:`unpriced_model` and
    :attr:`unpriced_fix` say which and what to do."""

    node: str
    gpu_index: int
    job_id: str
    user: str
    team: str
    start: datetime
    end: datetime
    memory_held: bool
    cost: Decimal | None
    currency: str
    model: str = ""
    reason: str | None = None
    evidence: str | None = None

    @property
    def verdict(self) -> Verdict | None:
        """The episode's reason and evidence, when it has been given one."""
        return None if self.reason is None else Verdict(self.reason, self.evidence or "")

    @property
    def hours(self) -> float:
        """Duration in hours."""
        return (self.end - self.start).total_seconds() / 3600

    @property
    def unpriced_model(self) -> str | None:
        """The GPU model that has no price, when the episode is unpriced; else None."""
        return self.model if self.cost is None else None

    @property
    def unpriced_fix(self) -> str | None:
        """What to do to give the episode its cost (:func:`finops.ledger.rollup.unpriced_fix`), when unpriced."""
        return None if self.cost is not None else unpriced_fix(self.model)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, as the REST API and ``gpu-finops idle list`` give it: times ISO 8601 UTC, hours rounded to
        6 decimals, cost a decimal string, or null when unpriced, with ``unpriced_model`` and ``unpriced_fix`` set
        (null for a priced episode); ``reason`` (key), ``reason_title`` and ``evidence`` (null when not judged)."""
        return {
            "node": self.node,
            "gpu_index": self.gpu_index,
            "job_id": self.job_id,
            "user": self.user,
            "team": self.team,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "hours": round(self.hours, 6),
            "memory_held": self.memory_held,
            "cost": None if self.cost is None else str(self.cost),
            "currency": self.currency,
            "unpriced_model": self.unpriced_model,
            "unpriced_fix": self.unpriced_fix,
            "reason": self.reason,
            "reason_title": None if self.verdict is None else self.verdict.title,
            "evidence": self.evidence,
        }


@dataclass(slots=True)
class EpisodeTotals:
    """What some episodes of one currency add up to: GPU-hours, the cost of the priced ones, and the GPU-hours of
    the unpriced ones by model (never counted as 0 in the cost)."""

    currency: str
    count: int = 0
    gpu_hours: float = 0.0
    cost: Decimal = Decimal(0)
    priced_count: int = 0
    unpriced_gpu_hours: dict[str, float] = field(default_factory=dict)

    @property
    def all_unpriced(self) -> bool:
        """True when none of the episodes has a price: their cost is unknown, not 0."""
        return self.count > 0 and self.priced_count == 0

    def add(self, episode: EpisodeView) -> None:
        """Count ``episode`` in (same currency)."""
        self.count += 1
        self.gpu_hours += episode.hours
        if episode.cost is None:
            self.unpriced_gpu_hours[episode.model] = self.unpriced_gpu_hours.get(episode.model, 0.0) + episode.hours
        else:
            self.cost += episode.cost
            self.priced_count += 1


def episode_totals(episodes: Iterable[EpisodeView]) -> list[EpisodeTotals]:
    """Totals of ``episodes`` per currency, sorted by currency: the cost sums the priced episodes only, and the
    unpriced ones are counted in GPU-hours by model."""
    totals: dict[str, EpisodeTotals] = {}
    for e in episodes:
        totals.setdefault(e.currency, EpisodeTotals(e.currency)).add(e)
    return [totals[c] for c in sorted(totals)]


def list_episodes(
    session: Session,
    start: datetime,
    end: datetime,
    *,
    cluster: str | None = None,
    team: str | None = None,
    partition: str | None = None,
) -> list[EpisodeView]:
    """Idle episodes overlapping [start, end), costliest first, then the unpriced ones (no price for the GPU's
    model) longest first; only those of jobs of ``cluster``, ``team`` and ``partition`` when given."""
    query = (
        select(IdleEpisode, Node.hostname, Gpu.gpu_index, Gpu.model, Job.job_id, Job.user, Team.name)
        .join(Gpu, Gpu.id == IdleEpisode.gpu_id)
        .join(Node, Node.id == Gpu.node_id)
        .join(Job, Job.id == IdleEpisode.job_pk)
        .join(Team, Team.id == Job.team_id)
        .where(IdleEpisode.start < end, IdleEpisode.end > start)
        .order_by(
            IdleEpisode.cost.is_(None),
            IdleEpisode.cost.desc(),
            (IdleEpisode.end - IdleEpisode.start).desc(),
            IdleEpisode.start,
        )
    )
    if cluster is not None:
        query = query.where(Job.cluster == cluster)
    if team is not None:
        query = query.where(Team.name == team)
    if partition is not None:
        query = query.where(Job.partition == partition)
    return [
        EpisodeView(
            host,
            index,
            job_id,
            user,
            team,
            ep.start,
            ep.end,
            ep.memory_held,
            ep.cost,
            ep.currency,
            model,
            ep.reason,
            ep.evidence,
        )
        for ep, host, index, model, job_id, user, team in session.execute(query)
    ]
