"""Turning derived jobs into what the demo feeds the real pipeline: a sacct log and per-node GPU readings.

DERIVED, and labelled so everywhere: the job log comes from :mod:`finops.demo.allocation`; each job is
busy (the capture's ``load`` readings on all its GPUs) or idle (its ``idle`` readings, the job holding the
GPUs and doing nothing), drawn once per job with a seeded generator, :data:`IDLE_JOB_SHARE` of jobs idle;
GPUs no job holds read idle. Energy counters integrate the profile's power over each minute.
"""

from __future__ import annotations

import random
import uuid
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from collector.contract import metric_names as m
from collector.contract.sample import Sample
from finops.demo.activity import GpuProfile
from finops.demo.allocation import GPUS_PER_NODE, DerivedJob
from finops.jobs.slurm import SacctJob, format_sacct_line

IDLE_JOB_SHARE = 0.1
CLUSTER = "earth"
PARTITION = "h100"
STEP = timedelta(minutes=1)
_UUID_NAMESPACE = uuid.UUID("5b0f4c1e-9d2a-4c35-8e21-6a1f0e7d9c40")


@dataclass(frozen=True, slots=True)
class Trace:
    """A derived workload placed in time: minute 0 starts at ``start``; ``minutes`` long."""

    jobs: Sequence[DerivedJob]
    nodes: Sequence[str]
    start: datetime
    minutes: int

    @property
    def end(self) -> datetime:
        """End of the trace (exclusive), UTC."""
        return self.start + self.minutes * STEP


def gpu_uuid(node: str, index: int) -> str:
    """A stable, clearly synthetic NVML-style UUID for a demo GPU."""
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{node}/{index}')}"


def idle_jobs(jobs: Sequence[DerivedJob], seed: int = 11, share: float = IDLE_JOB_SHARE) -> set[int]:
    """Job numbers drawn (seeded) to sit idle."""
    rng = random.Random(seed)
    return {job.job_number for job in jobs if rng.random() < share}


def sacct_lines(trace: Trace) -> list[str]:
    """The derived job log as ``sacct --parsable2 --noheader`` lines (the demo imports them like a real log)."""
    lines = []
    for job in trace.jobs:
        start = trace.start + job.start * STEP
        end = None if job.end is None else trace.start + job.end * STEP
        elapsed = (end if end is not None else trace.end) - start
        record = SacctJob(
            job_id=str(job.job_number),
            job_id_raw=str(job.job_number),
            cluster=CLUSTER,
            partition=PARTITION,
            account=job.team,
            user=f"{job.team.lower()}-user",
            submit=start,
            start=start,
            end=end,
            elapsed=elapsed,
            state="RUNNING" if end is None else "COMPLETED",
            cancelled_by=None,
            gpus=job.gpu_count,
            gpu_type=None,
            nodes=tuple(job.nodes),
            name=f"derived-{job.team}-{job.job_number}",
        )
        lines.append(format_sacct_line(record, tz=UTC))
    return lines


def node_steps(
    trace: Trace, node: str, profile: GpuProfile, idle: set[int], minutes_per_step: int = 60
) -> Iterator[list[Sample]]:
    """One node's GPU readings, ``minutes_per_step`` minutes of its 8 GPUs per step, in time order."""
    timelines: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for job in trace.jobs:
        for host, index in job.gpus:
            if host == node:
                timelines[index].append((job.start, trace.minutes if job.end is None else job.end, job.job_number))
    for timeline in timelines.values():
        timeline.sort()
    cursor = [0] * GPUS_PER_NODE
    energy = [0.0] * GPUS_PER_NODE
    labels = [{"gpu": str(i), "uuid": gpu_uuid(node, i), "model": profile.model} for i in range(GPUS_PER_NODE)]
    busy_values = {**profile.busy, m.GPU_MEMORY_TOTAL: float(profile.memory_total_bytes)}
    idle_values = {**profile.idle, m.GPU_MEMORY_TOTAL: float(profile.memory_total_bytes)}
    step: list[Sample] = []
    for minute in range(trace.minutes):
        timestamp = trace.start + minute * STEP
        for index in range(GPUS_PER_NODE):
            timeline = timelines[index]
            while cursor[index] < len(timeline) and timeline[cursor[index]][1] <= minute:
                cursor[index] += 1
            holder = None
            if cursor[index] < len(timeline) and timeline[cursor[index]][0] <= minute:
                holder = timeline[cursor[index]][2]
            values = busy_values if holder is not None and holder not in idle else idle_values
            step.append(
                Sample(
                    "gpu",
                    labels[index],
                    {**values, m.GPU_ENERGY: energy[index]},
                    timestamp,
                    None if holder is None else str(holder),
                )
            )
            energy[index] += values[m.GPU_POWER] * STEP.total_seconds()
        if (minute + 1) % minutes_per_step == 0:
            yield step
            step = []
    if step:
        yield step
