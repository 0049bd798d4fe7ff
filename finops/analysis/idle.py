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
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from sqlalchemy import delete, or_, select, text
from sqlalchemy.orm import Session

from finops.db.models import Allocation, Gpu, IdleEpisode, Job, Node, Team
from finops.ledger.costmodel import capacity_cost
from finops.pricing.catalog import PriceNotFound, Pricing
from finops.pricing.rules import pricing_models_by_node
from finops.timeutil import from_epoch, to_epoch

MEMORY_HELD_BYTES = 64 * 2**20
"""Memory in use above this (64 MiB) during an episode means a process still holds the GPU."""

_COVERED_UNTIL = "CASE WHEN next_ts IS NULL THEN ts WHEN next_ts - ts > :max_gap THEN ts + :max_gap ELSE next_ts END"
_IDLE_RUNS = text(f"""
WITH s AS (
    SELECT gpu_id, ts, utilization_ratio AS u, memory_used_bytes AS mem,
           LAG(ts) OVER (PARTITION BY gpu_id ORDER BY ts) AS prev_ts,
           LEAD(ts) OVER (PARTITION BY gpu_id ORDER BY ts) AS next_ts
    FROM gpu_samples
    WHERE gpu_id IN (SELECT id FROM gpus) AND ts >= :start AND ts < :end AND utilization_ratio IS NOT NULL
), runs AS (
    SELECT gpu_id, ts, u, mem, next_ts,
           SUM(CASE WHEN u > :threshold OR prev_ts IS NULL OR ts - prev_ts > :max_gap THEN 1 ELSE 0 END)
               OVER (PARTITION BY gpu_id ORDER BY ts) AS run
    FROM s
)
SELECT gpu_id, MIN(ts) AS first_ts, MAX({_COVERED_UNTIL}) AS covered_until, MAX(COALESCE(mem, 0)) AS max_mem
FROM runs WHERE u <= :threshold
GROUP BY gpu_id, run
HAVING MAX({_COVERED_UNTIL}) - MIN(ts) >= :window
""")  # noqa: S608 - the f-string only inlines the constant expression above


@dataclass(frozen=True, slots=True)
class IdlePolicy:
    """Utilisation ratio ≤ ``threshold`` for ≥ ``window_seconds``; samples > ``max_gap_seconds`` apart break a run;
    the first ``grace_seconds`` of an allocation are not judged; ``partition_thresholds`` override ``threshold``
    for jobs of those Slurm partitions."""

    threshold: float = 0.05
    window_seconds: int = 1800
    max_gap_seconds: int = 150
    grace_seconds: int = 600
    partition_thresholds: Mapping[str, float] = field(default_factory=dict)

    def threshold_for(self, partition: str) -> float:
        """The idle threshold ratio of a job in ``partition``."""
        return self.partition_thresholds.get(partition, self.threshold)


def detect_idle(session: Session, start: datetime, end: datetime, policy: IdlePolicy, pricing: Pricing) -> int:
    """Re-judge idle episodes over [start, end) (UTC) and store them; returns how many are stored.

    Episodes already stored that reach into the period are re-judged from their own start, so running
    this again, or on overlapping periods, stores each episode once.
    """
    earliest_open = session.scalar(
        select(IdleEpisode.start).where(IdleEpisode.end >= start).order_by(IdleEpisode.start).limit(1)
    )
    scan_from = min(start, earliest_open) if earliest_open is not None else start
    session.execute(delete(IdleEpisode).where(IdleEpisode.end >= scan_from))
    parameters = {
        "start": to_epoch(scan_from),
        "end": to_epoch(end),
        "max_gap": policy.max_gap_seconds,
        "window": policy.window_seconds,
    }
    thresholds = {policy.threshold, *policy.partition_thresholds.values()}
    runs = {t: session.execute(_IDLE_RUNS, {**parameters, "threshold": t}).all() for t in sorted(thresholds)}
    gpu_ids = {run.gpu_id for found in runs.values() for run in found}
    if not gpu_ids:
        return 0
    allocations = defaultdict(list)
    for gpu_id, holder, allocated_from, allocated_until, partition in session.execute(
        select(Allocation.gpu_id, Allocation.job_pk, Allocation.start, Allocation.end, Job.partition)
        .join(Job, Job.id == Allocation.job_pk)
        .where(
            Allocation.gpu_id.in_(gpu_ids),
            Allocation.start < end,
            or_(Allocation.end.is_(None), Allocation.end > scan_from),
        )
    ):
        until = None if allocated_until is None else to_epoch(allocated_until)
        allocations[gpu_id].append((holder, to_epoch(allocated_from), until, policy.threshold_for(partition)))
    node_models = pricing_models_by_node(session, pricing.model)
    priced_as = {
        gpu_id: (model, node_models.get(node_id, pricing.model))
        for gpu_id, model, node_id in session.execute(select(Gpu.id, Gpu.model, Gpu.node_id).where(Gpu.id.in_(gpu_ids)))
    }
    stored = 0
    for threshold, found in runs.items():
        for run in found:
            for job_pk, a_start, a_end, job_threshold in allocations[run.gpu_id]:
                if job_threshold != threshold:
                    continue
                lo = max(run.first_ts, a_start + policy.grace_seconds)
                hi = run.covered_until if a_end is None else min(run.covered_until, a_end)
                if hi - lo < policy.window_seconds:
                    continue
                try:
                    rate = pricing.catalog.rate(*priced_as[run.gpu_id], from_epoch(lo))
                    cost = capacity_cost(rate, hi - lo)
                except PriceNotFound:
                    cost = Decimal(0)
                session.add(
                    IdleEpisode(
                        gpu_id=run.gpu_id,
                        job_pk=job_pk,
                        start=from_epoch(lo),
                        end=from_epoch(hi),
                        memory_held=run.max_mem > MEMORY_HELD_BYTES,
                        cost=cost,
                        currency=pricing.catalog.currency,
                    )
                )
                stored += 1
    session.flush()
    return stored


@dataclass(frozen=True, slots=True)
class EpisodeView:
    """An idle episode as people read it: where, whose, how long, what it cost."""

    node: str
    gpu_index: int
    job_id: str
    user: str
    team: str
    start: datetime
    end: datetime
    memory_held: bool
    cost: Decimal
    currency: str

    @property
    def hours(self) -> float:
        """Duration in hours."""
        return (self.end - self.start).total_seconds() / 3600


def list_episodes(
    session: Session,
    start: datetime,
    end: datetime,
    *,
    cluster: str | None = None,
    team: str | None = None,
    partition: str | None = None,
) -> list[EpisodeView]:
    """Idle episodes overlapping [start, end), costliest first; only those of jobs of ``cluster``, ``team`` and
    ``partition`` when given."""
    query = (
        select(IdleEpisode, Node.hostname, Gpu.gpu_index, Job.job_id, Job.user, Team.name)
        .join(Gpu, Gpu.id == IdleEpisode.gpu_id)
        .join(Node, Node.id == Gpu.node_id)
        .join(Job, Job.id == IdleEpisode.job_pk)
        .join(Team, Team.id == Job.team_id)
        .where(IdleEpisode.start < end, IdleEpisode.end > start)
        .order_by(IdleEpisode.cost.desc(), IdleEpisode.start)
    )
    if cluster is not None:
        query = query.where(Job.cluster == cluster)
    if team is not None:
        query = query.where(Team.name == team)
    if partition is not None:
        query = query.where(Job.partition == partition)
    return [
        EpisodeView(host, index, job_id, user, team, ep.start, ep.end, ep.memory_held, ep.cost, ep.currency)
        for ep, host, index, job_id, user, team in session.execute(query)
    ]
