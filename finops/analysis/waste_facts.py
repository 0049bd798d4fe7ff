"""The facts the waste rules (:mod:`finops.analysis.waste`) judge, read from the database: for idle episodes about to
be stored, the ledger's utilisation of their jobs' GPUs, the nodes' fabric and storage rates over the episodes and, for
throttled ones, the GPU's highest SM clock in the day before; for a job's idle time outside its episodes, its GPUs'
mean utilisations and its stored episodes' reasons."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from finops.analysis.waste import (
    REFERENCE_CLOCK_SECONDS,
    EpisodeFacts,
    JobGpuFacts,
    ReasonPolicy,
    Verdict,
    bounded_evidence,
    judge_episode,
)
from finops.db.dialect import json_rows
from finops.db.models import GpuSample
from finops.ingest.node_io import node_rates
from finops.timeutil import from_epoch


@dataclass(frozen=True, slots=True)
class EpisodeRun:
    """An idle episode about to be stored, and what its readings showed (:mod:`finops.analysis.idle`,
    :mod:`finops.analysis.episode_evidence`): [start, end) epoch seconds, the most memory used, its reading counts and
    throttled SM clock."""

    gpu_id: int
    node_id: int
    job_pk: int
    partition: str
    job_name: str
    start: int
    end: int
    memory_bytes: float
    readings: int
    thermal_readings: int
    power_readings: int
    throttled_readings: int
    throttled_sm_clock: float | None


def judge_episodes(session: Session, runs: Sequence[EpisodeRun], policy: ReasonPolicy) -> list[Verdict]:
    """The verdict of each of ``runs``, in order (:func:`judge_episode`), their facts read in a few queries: the
    ledger's utilisation of their jobs' GPUs, the nodes' rates over the episodes, and for the throttled ones the
    GPU's highest SM clock in the day before."""
    usage = gpu_usage(session, {run.job_pk for run in runs})
    rates = node_rates(session, [(run.node_id, from_epoch(run.start), from_epoch(run.end)) for run in runs])
    verdicts = []
    for run in runs:
        gpu_mean, sibling_mean = _means(usage_means(usage.get(run.job_pk, {}))[1], run.gpu_id)
        facts = EpisodeFacts(
            partition=run.partition,
            job_name=run.job_name,
            gpu_mean=gpu_mean,
            sibling_mean=sibling_mean,
            memory_bytes=run.memory_bytes,
            readings=run.readings,
            thermal_readings=run.thermal_readings,
            power_readings=run.power_readings,
            throttled_readings=run.throttled_readings,
            throttled_sm_clock=run.throttled_sm_clock,
            node_rates=rates[run.node_id, from_epoch(run.start), from_epoch(run.end)],
        )
        if facts.throttled_share() >= policy.throttled_share and facts.throttled_sm_clock is not None:
            facts = _with_reference_clock(session, facts, run)
        verdict = judge_episode(facts, policy)
        verdicts.append(Verdict(verdict.reason, bounded_evidence(verdict.evidence)))
    return verdicts


def _with_reference_clock(session: Session, facts: EpisodeFacts, run: EpisodeRun) -> EpisodeFacts:
    clock = session.scalar(
        select(func.max(GpuSample.sm_clock_hertz)).where(
            GpuSample.gpu_id == run.gpu_id,
            GpuSample.ts >= from_epoch(run.end - REFERENCE_CLOCK_SECONDS),
            GpuSample.ts < from_epoch(run.end),
        )
    )
    return replace(facts, reference_sm_clock=clock)


GpuUsage = dict[int, tuple[float, int]]
"""``gpus.id`` → (used GPU-seconds, metered GPU-seconds) of one job, from the ledger."""


def gpu_usage(session: Session, job_pks: Iterable[int]) -> dict[int, GpuUsage]:
    """Per job of ``job_pks``: its GPUs' used and metered GPU-seconds over all its ledger rows (the whole job so far,
    whatever period is asked about), in one query (the jobs passed as one JSON parameter)."""
    wanted = sorted(set(job_pks))
    usage: dict[int, GpuUsage] = defaultdict(dict)
    if not wanted:
        return usage
    jobs = json_rows(session.get_bind().dialect.name, "jobs", "j", {"job_pk": "integer"})
    query = text(
        "SELECT l.job_pk, l.gpu_id, SUM(l.used_gpu_seconds), SUM(CASE WHEN l.sample_count > 0 THEN l.seconds "  # noqa: S608
        "ELSE 0 END) FROM " + jobs + " JOIN ledger l ON l.job_pk = j.job_pk GROUP BY l.job_pk, l.gpu_id"
    )  # fmt: skip
    for job_pk, gpu_id, used, seconds in session.execute(query, {"jobs": json.dumps([{"job_pk": j} for j in wanted])}):
        usage[job_pk][gpu_id] = (float(used or 0.0), int(seconds or 0))
    return usage


def usage_means(usage: GpuUsage) -> tuple[float | None, dict[int, float]]:
    """A job's mean utilisation over its metered GPU-seconds (None: none metered) and each metered GPU's, from its
    :data:`GpuUsage`."""
    used = sum(u for u, _ in usage.values())
    metered = sum(s for _, s in usage.values())
    means = {gpu: u / seconds for gpu, (u, seconds) in usage.items() if seconds > 0}
    return (used / metered if metered else None), means


def _means(means: Mapping[int, float], gpu_id: int) -> tuple[float | None, float | None]:
    """(the GPU's mean utilisation, the busiest other GPU's) of a job's per-GPU means; None where unmetered."""
    others = [mean for gpu, mean in means.items() if gpu != gpu_id]
    return means.get(gpu_id), (max(others) if others else None)


def job_gpu_facts(job_mean: float | None, means: Mapping[int, float], gpu_id: int, **job: Any) -> JobGpuFacts:
    """The :class:`JobGpuFacts` of GPU ``gpu_id`` of a job with the mean utilisations :func:`usage_means` gives;
    ``job``: its ``partition``, ``job_name`` and ``episodes``."""
    gpu_mean, sibling_mean = _means(means, gpu_id)
    return JobGpuFacts(job_mean=job_mean, gpu_mean=gpu_mean, sibling_mean=sibling_mean, **job)


def episode_summaries(
    rows: Iterable[tuple[str | None, datetime, datetime, str | None]],
) -> dict[str, tuple[float, str]]:
    """The ``episodes`` of :class:`JobGpuFacts` from a job's stored episodes (reason, start, end, evidence): per
    reason, their GPU-seconds and the evidence of the longest. Episodes without a reason (stored before reasons
    were) are left out."""
    summary: dict[str, tuple[float, str, float]] = {}
    for reason, start, end, evidence in rows:
        if reason is None:
            continue
        seconds = (end - start).total_seconds()
        total, example, longest = summary.get(reason, (0.0, "", -1.0))
        if seconds > longest:
            example, longest = evidence or "", seconds
        summary[reason] = (total + seconds, example, longest)
    return {reason: (total, example) for reason, (total, example, _) in summary.items()}
