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
readings or allocations changed however late they arrived: each run of consecutive hours widened by the idle window
(and the max gap) on both sides, and further, per GPU, to take in whole every stored episode of that GPU it reaches
(:func:`detect_idle`), so that episodes crossing its edges are judged whole. Re-judging any set of hours therefore
stores the episodes that one detection over the whole period would. The runs are found a UTC day at a time from the
day's idle readings, the others read only where they lie among idle ones (:mod:`finops.analysis.idle_runs`). Hours
that only a price change marked are not judged again: their stored episodes are re-priced
(:mod:`finops.analysis.idle_prices`).
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from itertools import accumulate
from math import inf
from typing import Any, Protocol

from sqlalchemy import column, or_, select, table, text
from sqlalchemy.orm import Session

from finops.analysis.episode_evidence import episode_evidence
from finops.analysis.idle_carry import RunCarry, Settled
from finops.analysis.idle_pieces import IdleRun
from finops.analysis.idle_prices import EpisodePrices, reprice_episodes
from finops.analysis.idle_runs import day_chunks, idle_runs
from finops.analysis.idle_spans import forget_taken, spans_of_stored, wide_reads, within_spans
from finops.analysis.waste import MEMORY_HELD_BYTES, ReasonPolicy, Verdict
from finops.analysis.waste_facts import EpisodeRun, judge_episodes
from finops.db.dialect import insert_rows
from finops.db.models import Allocation, Gpu, IdleEpisode, Job, Node, Team
from finops.ledger.rollup import ROLLUP_CONNECTIONS
from finops.ledger.rollup_result import unpriced_fix
from finops.pricing.catalog import Pricing
from finops.timeutil import HOUR, from_epoch, to_epoch

log = logging.getLogger(__name__)

_EPISODES = table("idle_episodes", *(column(c.name, c.type) for c in IdleEpisode.__table__.c if c.name != "id"))
"""The columns :func:`detect_idle` writes (``COPY`` on PostgreSQL: times as epoch seconds, cost a Decimal)."""

IDLE_READINGS_TABLE = "idle_readings"
"""The session-local temporary table :func:`detect_idle` judges a :class:`ReadingSource`'s readings in."""
_READINGS = table(
    IDLE_READINGS_TABLE, column("gpu_id"), column("ts"), column("utilization_ratio"), column("memory_used_bytes")
)


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

    @property
    def thresholds(self) -> list[float]:
        """Every idle threshold ratio in force, the default and the partitions', sorted."""
        return sorted({self.threshold, *self.partition_thresholds.values()})

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
    carry: RunCarry | None = None,
) -> int:
    """Re-judge idle episodes over [start, end) (UTC) and store them, each with its cost
    (:class:`finops.analysis.idle_prices.EpisodePrices`), waste reason and evidence
    (:func:`finops.analysis.waste_facts.judge_episodes`); returns how many are stored. The readings are ``gpu_samples``'
    (a UTC day at a time: :func:`finops.analysis.idle_runs.idle_runs`), or ``readings``' (those of the grown period
    and of the max gap after it, put in the temporary table :data:`IDLE_READINGS_TABLE` for the same statements to
    judge, and removed after it; they carry no clocks-event reasons, so no episode judged on them is throttled).

    For each GPU the period first grows to take in whole every stored episode of that GPU that touches it, with the
    max gap to spare on both sides (:func:`finops.analysis.idle_spans.spans_of_stored`): the GPUs whose period grew
    are read apart, over their own periods (:func:`finops.analysis.idle_spans.wide_reads`), the others over
    ``[start, end)``. The stored episodes taken in are replaced by those judged over the periods, and the others are
    kept. Running this again, or on overlapping periods, stores each episode once; episodes that start before
    ``start`` or end after ``end`` are judged whole when they are stored ones, and :func:`rejudge_idle` widens the
    period for those that are not yet.

    ``carry``: the runs the last scheduled re-judging read of the same periods (:class:`finops.analysis.idle_carry.
    RunCarry`), from ``gpu_samples`` only: each GPU's readings settled then are not read again.
    """
    base = (to_epoch(start), to_epoch(end))
    spans, taken = spans_of_stored(session, *base, policy.max_gap_seconds)
    wide = {gpu_id: span for gpu_id, span in spans.items() if span != base}
    reads = [(*base, None), *wide_reads(wide)]
    scan_from, scan_until = min(lo for lo, _, _ in reads), max(hi for _, hi, _ in reads)
    thresholds = policy.thresholds
    gap, window = policy.max_gap_seconds, policy.window_seconds
    runs: dict[float, list[IdleRun]] = {t: [] for t in thresholds}
    if readings is None:
        session.flush()
        source: dict[str, Any] = {"helpers": ROLLUP_CONNECTIONS}
    else:
        _load_readings(session, readings.idle_readings(session, scan_from, scan_until + gap + 1, max(thresholds)))
        source = {"table": IDLE_READINGS_TABLE, "clocks": False}
    for lo, hi, only in reads:
        if carry is not None and readings is None:
            exclude = wide if only is None else ()
            by_threshold = carry.runs(session.connection(), (lo, hi, only), thresholds, gap, window, exclude=exclude,
                                      helpers=ROLLUP_CONNECTIONS)  # fmt: skip
        else:
            chunks = list(day_chunks(lo, hi)) if readings is None else [(lo, hi)]
            by_threshold = {t: idle_runs(session.connection(), chunks, t, gap, window, only=only, **source)
                            for t in thresholds}  # fmt: skip
        for t, found in by_threshold.items():
            runs[t] += found if only is not None else [run for run in found if run.gpu_id not in wide]
    held = _held_runs(session, runs, policy, scan_from, scan_until) if any(runs.values()) else iter(())
    held_runs = list(within_spans(held, wide, window))
    table = IDLE_READINGS_TABLE if readings is not None else "gpu_samples"
    own = episode_evidence(session.connection(), [(run, held.threshold, lo, hi) for held, run, lo, hi in held_runs],
                           table, clocks=readings is None)  # fmt: skip
    if readings is not None:
        session.execute(text(f"DELETE FROM {IDLE_READINGS_TABLE}"))  # noqa: S608 - a constant
    # The stored episodes taken in go once the runs are read: on SQLite a transaction that has written nothing yet
    # reads the readings on helper connections too (finops.analysis.idle_runs.may_read_elsewhere).
    forget_taken(session, taken)
    if not held_runs:
        return 0
    prices = EpisodePrices(session, pricing, {run.gpu_id for _, run, _, _ in held_runs})
    episodes = [
        EpisodeRun(
            run.gpu_id, prices.node(run.gpu_id), held.job_pk, held.partition, held.job_name, lo, hi, seen.max_mem,
            seen.readings, seen.thermal_readings, seen.power_readings, seen.throttled_readings,
            seen.throttled_sm_clock,
        )
        for (held, run, lo, hi), seen in zip(held_runs, own, strict=True)
    ]  # fmt: skip
    verdicts = judge_episodes(session, episodes, policy.reasons)
    rows = [
        {
            "gpu_id": episode.gpu_id,
            "job_pk": episode.job_pk,
            "start": episode.start,
            "end": episode.end,
            "memory_held": episode.memory_bytes > MEMORY_HELD_BYTES,
            "cost": prices.cost(episode.gpu_id, episode.start, episode.end),
            "currency": prices.currency,
            "reason": verdict.reason,
            "evidence": verdict.evidence,
        }
        for episode, verdict in zip(episodes, verdicts, strict=True)
    ]
    insert_rows(session.connection(), _EPISODES, rows)
    return len(rows)


@dataclass(frozen=True, slots=True)
class _Holding:
    """An allocation of a GPU as idle detection needs it: [start, end) epoch seconds (end None: still held), the
    job's idle threshold, partition and name."""

    job_pk: int
    start: int
    end: int | None
    threshold: float
    partition: str
    job_name: str


def _held_runs(
    session: Session, runs: Mapping[float, Sequence[IdleRun]], policy: IdlePolicy, scan_from: int, scan_until: int
) -> Iterator[tuple[_Holding, IdleRun, int, int]]:
    """Each run (by idle threshold) clipped to each allocation of its GPU whose job uses that threshold, from the
    allocation's start + the grace: (the allocation, the run, episode start, episode end) where that lasts the
    window. The allocations of a GPU are sorted by start, so each run is matched against those that can overlap
    it only."""
    gpu_ids = {run.gpu_id for found in runs.values() for run in found}
    holdings: dict[int, list[_Holding]] = defaultdict(list)
    for gpu_id, job_pk, allocated_from, allocated_until, partition, job_name in session.execute(
        select(Allocation.gpu_id, Allocation.job_pk, Allocation.start, Allocation.end, Job.partition, Job.name)
        .join(Job, Job.id == Allocation.job_pk)
        .where(
            Allocation.gpu_id.in_(gpu_ids),
            Allocation.start < from_epoch(scan_until),
            or_(Allocation.end.is_(None), Allocation.end > from_epoch(scan_from)),
        )
    ):
        until = None if allocated_until is None else to_epoch(allocated_until)
        threshold = policy.threshold_for(partition)
        holdings[gpu_id].append(_Holding(job_pk, to_epoch(allocated_from), until, threshold, partition, job_name))
    starts: dict[int, list[int]] = {}
    latest_ends: dict[int, list[float]] = {}
    for gpu_id, held in holdings.items():
        held.sort(key=lambda h: (h.start, h.job_pk))
        starts[gpu_id] = [h.start for h in held]
        latest_ends[gpu_id] = list(accumulate((inf if h.end is None else h.end for h in held), max))
    for threshold, found in runs.items():
        for run in found:
            held, ends = holdings.get(run.gpu_id, []), latest_ends.get(run.gpu_id, [])
            # Those starting before the run's end less the grace, back to the first still held at its start.
            stop = bisect_left(starts.get(run.gpu_id, []), run.covered_until - policy.grace_seconds)
            begin = stop
            while begin > 0 and ends[begin - 1] > run.first_ts:
                begin -= 1
            for holding in held[begin:stop]:
                if holding.threshold != threshold:
                    continue
                lo = max(run.first_ts, holding.start + policy.grace_seconds)
                hi = run.covered_until if holding.end is None else min(run.covered_until, holding.end)
                if hi - lo >= policy.window_seconds:
                    yield holding, run, lo, hi


def _load_readings(session: Session, rows: Iterable[tuple[int, int, float, float | None]]) -> None:
    """Put ``rows`` (``gpus.id``, epoch second, utilisation ratio, memory bytes) in the session's temporary table
    :data:`IDLE_READINGS_TABLE`, made if missing and emptied first (:func:`finops.db.dialect.insert_rows`: a
    ``COPY`` on PostgreSQL). It is indexed by GPU and time, as ``gpu_samples`` is: the statements count and look up
    readings by that key there."""
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


def rejudge_idle(
    session: Session,
    hours: Iterable[int],
    policy: IdlePolicy,
    pricing: Pricing,
    readings: ReadingSource | None = None,
    repriced: Collection[int] = frozenset(),
    settled: Settled | None = None,
) -> int:
    """Re-judge idle episodes over the UTC hours ``hours`` (epoch starts; the hours a ledger rollup rebuilt) and
    store them; returns how many are stored.

    Each run of consecutive hours is widened by the idle window and the max gap on both sides, so that an episode
    crossing its edges, with readings partly in the hours and partly outside, is judged whole, then judged by
    :func:`detect_idle` (which widens it further for the stored episodes it reaches). Hours days apart (a late
    backfill and the current hour) are separate periods: the readings between them are not read. ``readings``: as
    for :func:`detect_idle`.

    ``repriced``: hours that only a price change marked (:func:`finops.analysis.idle_prices.claim_repriced_hours`):
    not judged again (their readings and jobs are those their episodes were judged on), but the stored episodes
    starting in them are given the cost of ``pricing`` (:func:`finops.analysis.idle_prices.reprice_episodes`).

    ``settled``: given by the scheduler's rollup that rebuilt the hours (:func:`finops.service.scheduler.run_rollup`),
    with the readings in ``gpu_samples``: the runs read by the re-judging after the scheduler's last rollup are carried
    to this one, which reads only each GPU's readings since (:mod:`finops.analysis.idle_carry`), and this one's
    runs are carried to the next.
    """
    margin = policy.window_seconds + policy.max_gap_seconds
    spans: list[list[int]] = []
    for hour in sorted(set(hours) - set(repriced)):
        if spans and hour - margin <= spans[-1][1] + margin:
            spans[-1][1] = hour + HOUR
        else:
            spans.append([hour, hour + HOUR])
    carry = None
    if settled is not None and readings is None:
        carry = RunCarry(session, settled, [policy.thresholds, policy.max_gap_seconds, policy.window_seconds])
    stored = sum(
        detect_idle(session, from_epoch(h0 - margin), from_epoch(h1 + margin), policy, pricing, readings, carry)
        for h0, h1 in spans
    )
    if carry is not None:
        carry.store(session)
    if repriced:
        changed = reprice_episodes(session, pricing, repriced)
        log.info("idle episodes: %d re-priced over %d hours whose prices alone changed", changed, len(repriced))
    return stored


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
        """What to do to give the episode its cost (:func:`finops.ledger.rollup_result.unpriced_fix`), when unpriced."""
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
