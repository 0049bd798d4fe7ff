"""Turning derived jobs into what the demo feeds the real pipeline: a sacct log, per-node GPU readings and node I/O.

DERIVED, and labelled so everywhere: the job log comes from :mod:`finops.demo.allocation`; each job is
busy (the capture's ``load`` readings on all its GPUs) or idle (its ``idle`` readings, the job holding the
GPUs and doing nothing), drawn once per job with a seeded generator, :data:`IDLE_JOB_SHARE` of jobs idle;
GPUs no job holds read idle. Energy counters integrate the profile's power over each minute.

Each job's plan (:func:`plan_jobs`, seeded) adds: its workload profile (:mod:`finops.demo.profiling`; drawn by
:data:`PROFILE_WEIGHTS`, None: its GPUs carry no activity field, not measured) with its jitter factors; for an idle
job, what it waits on (:mod:`finops.demo.waits`); for a busy job of two GPUs or more, :data:`SPARE_GPU_SHARE` of
them leave their last GPU idle (asked for more GPUs than used). A measured job's idle GPUs, and free GPUs, read the
idle capture's activity (0).
"""

from __future__ import annotations

import random
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from collector.contract import metric_names as m
from collector.contract import wire
from collector.contract.sample import Sample
from collector.shipper import Shipper
from finops.demo.activity import GpuProfile
from finops.demo.allocation import GPUS_PER_NODE, DerivedJob
from finops.demo.profiling import ACTIVITY_METRICS, JITTER, WorkloadProfile, job_activity
from finops.demo.waits import (
    INTERACTIVE,
    STALLED,
    THROTTLE_BURST_MINUTES,
    THROTTLE_PERIOD_MINUTES,
    THROTTLE_REASONS,
    THROTTLED,
    NodeTraffic,
    draw_wait,
    interactive_name,
)
from finops.jobs.slurm import SacctJob, format_sacct_line

IDLE_JOB_SHARE = 0.1
PROFILE_WEIGHTS: tuple[float, ...] = (0.5, 0.3)
"""Share of jobs drawn to each profile of :data:`finops.demo.profiling.PROFILES`, in order; the rest (0.2) are not
measured (no activity field: the job paused DCGM profiling, as running Nsight requires)."""
SPARE_GPU_SHARE = 0.1
CLUSTER = "earth"
PARTITION = "h100"
STEP = timedelta(minutes=1)
_UUID_NAMESPACE = uuid.UUID("5b0f4c1e-9d2a-4c35-8e21-6a1f0e7d9c40")


@dataclass(frozen=True, slots=True)
class JobPlan:
    """What a derived job does: ``busy`` or idle; its ``profile`` (None: not measured) and per-metric jitter
    ``factors``; for an idle job its ``wait`` (:mod:`finops.demo.waits`; None: nothing derived); for a busy job the
    ``spare`` GPU (hostname, index) it leaves idle, if any."""

    busy: bool
    profile: WorkloadProfile | None
    factors: dict[str, float]
    wait: str | None = None
    spare: tuple[str, int] | None = None


@dataclass(frozen=True, slots=True)
class Trace:
    """A derived workload placed in time: minute 0 starts at ``start``; ``minutes`` long; ``plans`` by job number
    (:func:`plan_jobs`; a job without one is busy and not measured)."""

    jobs: Sequence[DerivedJob]
    nodes: Sequence[str]
    start: datetime
    minutes: int
    plans: Mapping[int, JobPlan] = field(default_factory=dict)

    @property
    def end(self) -> datetime:
        """End of the trace (exclusive), UTC."""
        return self.start + self.minutes * STEP

    def plan(self, job_number: int) -> JobPlan:
        """The plan of job ``job_number`` (busy and not measured when it has none)."""
        return self.plans.get(job_number) or JobPlan(True, None, {})

    def traffic(self) -> NodeTraffic:
        """The nodes' derived traffic: each waiting job's on its nodes over its minutes."""
        traffic = NodeTraffic(self.start)
        for job in self.jobs:
            end = self.minutes if job.end is None else job.end
            traffic.add(job.nodes, job.start, end, self.plan(job.job_number).wait)
        return traffic


def gpu_uuid(node: str, index: int) -> str:
    """A stable, clearly synthetic NVML-style UUID for a demo GPU."""
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{node}/{index}')}"


def idle_jobs(jobs: Sequence[DerivedJob], seed: int = 11, share: float = IDLE_JOB_SHARE) -> set[int]:
    """Job numbers drawn (seeded) to sit idle."""
    rng = random.Random(seed)
    return {job.job_number for job in jobs if rng.random() < share}


def plan_jobs(jobs: Sequence[DerivedJob], profiles: Sequence[WorkloadProfile], seed: int = 13) -> dict[int, JobPlan]:
    """Every job's plan (module docstring), the same for the same jobs, profiles and seed: idle or busy as
    :func:`idle_jobs` draws, then per job in order one draw each for its profile, its factors (uniform in
    1 ± :data:`~finops.demo.profiling.JITTER` per activity metric), its wait and its spare GPU. No profiles (the
    captures are missing): every job not measured."""
    idle = idle_jobs(jobs)
    rng = random.Random(seed)
    plans = {}
    for job in jobs:
        pick, profile = rng.random(), None
        for candidate, weight in zip(profiles, PROFILE_WEIGHTS, strict=False):
            if pick < weight:
                profile = candidate
                break
            pick -= weight
        factors = {metric: rng.uniform(1 - JITTER, 1 + JITTER) for metric in ACTIVITY_METRICS}
        wait_draw, spare_draw = rng.random(), rng.random()
        busy = job.job_number not in idle
        spare = max(job.gpus) if busy and job.gpu_count > 1 and spare_draw < SPARE_GPU_SHARE else None
        plans[job.job_number] = JobPlan(busy, profile, factors, None if busy else draw_wait(wait_draw), spare)
    return plans


def sacct_lines(trace: Trace) -> list[str]:
    """The derived job log as ``sacct --parsable2 --noheader`` lines (the demo imports them like a real log)."""
    lines = []
    for job in trace.jobs:
        start = trace.start + job.start * STEP
        end = None if job.end is None else trace.start + job.end * STEP
        elapsed = (end if end is not None else trace.end) - start
        user = f"{job.team.lower()}-user"
        interactive = trace.plan(job.job_number).wait == INTERACTIVE
        record = SacctJob(
            job_id=str(job.job_number),
            job_id_raw=str(job.job_number),
            cluster=CLUSTER,
            partition=PARTITION,
            account=job.team,
            user=user,
            submit=start,
            start=start,
            end=end,
            elapsed=elapsed,
            state="RUNNING" if end is None else "COMPLETED",
            cancelled_by=None,
            gpus=job.gpu_count,
            gpu_type=None,
            nodes=tuple(job.nodes),
            name=interactive_name(user) if interactive else f"derived-{job.team}-{job.job_number}",
        )
        lines.append(format_sacct_line(record, tz=UTC))
    return lines


Segment = tuple[int, int, dict[str, float]]
"""Minutes [from, to) of a trace and what a GPU reads over them (metric name → value)."""


@dataclass(frozen=True, slots=True)
class Readings:
    """What the demo's GPUs read: the GPU model's busy and idle values (``gpu``) and the idle capture's activity
    (``idle_activity``; empty without the captures)."""

    gpu: GpuProfile
    idle_activity: dict[str, float]

    def free(self) -> dict[str, float]:
        """A GPU no job holds: idle, its activity measured."""
        return {**self.gpu.idle, m.GPU_MEMORY_TOTAL: float(self.gpu.memory_total_bytes), **self.idle_activity}

    def held(self, plan: JobPlan, gpu: tuple[str, int]) -> dict[str, float]:
        """GPU ``gpu`` (hostname, index) held by a job of ``plan``: busy (its profile's activity at the busy
        utilisation) or idle (with its wait's clocks-event reasons or memory), no activity when not measured."""
        values = {**self.gpu.idle, m.GPU_MEMORY_TOTAL: float(self.gpu.memory_total_bytes)}
        if plan.busy and gpu != plan.spare:
            values.update(self.gpu.busy)
            if plan.profile is not None:
                utilization = self.gpu.busy.get(m.GPU_UTILIZATION, 0.0)
                values.update(job_activity(plan.profile, utilization, plan.factors))
            return values
        if plan.profile is not None:
            values.update(self.idle_activity)
        if plan.wait == THROTTLED:
            reasons = int(values.get(m.GPU_CLOCKS_EVENT_REASONS, 0.0))
            values[m.GPU_CLOCKS_EVENT_REASONS] = float(reasons | THROTTLE_REASONS)
        elif plan.wait == STALLED:
            values[m.GPU_MEMORY_USED] = self.gpu.busy.get(m.GPU_MEMORY_USED, 0.0)
        return values

    def segments(self, plan: JobPlan, gpu: tuple[str, int], start: int, end: int) -> list[Segment]:
        """What GPU ``gpu`` of a job of ``plan`` reads over minutes [start, end): (from, to, values) in order; one
        segment (:meth:`held`) but for a throttled job, whose full-clock bursts alternate with its throttled idling
        (:data:`~finops.demo.waits.THROTTLE_PERIOD_MINUTES`)."""
        values = self.held(plan, gpu)
        if plan.wait != THROTTLED:
            return [(start, end, values)]
        burst = self.held(replace(plan, busy=True, wait=None), gpu)
        segments: list[Segment] = []
        for first in range(start, end, THROTTLE_PERIOD_MINUTES):
            cooled = min(end, first + THROTTLE_BURST_MINUTES)
            segments.append((first, cooled, burst))
            if cooled < end:
                segments.append((cooled, min(end, first + THROTTLE_PERIOD_MINUTES), values))
        return segments


STEP_MINUTES = 1200
"""Minutes of a node's readings the demo's collector sends in one batch: 9,600 readings of 8 GPUs, within the
10,000 of a collector's largest batch (a spool drained after an outage, :mod:`finops.ingest.limits`)."""

_Minute = tuple[str | None, dict[str, float], float]
"""What a GPU reads over one minute: the job holding it (None: free), its values and the joules it draws."""


def _gpu_minutes(
    trace: Trace, timeline: list[tuple[int, int, int, dict[str, float]]], free: dict[str, float]
) -> list[_Minute]:
    """Each minute of a GPU: the first entry of its ``timeline`` ((from, to, job number, values), sorted) still
    running at that minute when it has started, else ``free``."""
    seconds = STEP.total_seconds()
    idle: _Minute = (None, free, free[m.GPU_POWER] * seconds)
    minutes: list[_Minute] = []
    cursor = 0
    for minute in range(trace.minutes):
        while cursor < len(timeline) and timeline[cursor][1] <= minute:
            cursor += 1
        if cursor < len(timeline) and timeline[cursor][0] <= minute:
            _, _, holder, values = timeline[cursor]
            minutes.append((str(holder), values, values[m.GPU_POWER] * seconds))
        else:
            minutes.append(idle)
    return minutes


def node_steps(
    trace: Trace, node: str, readings: Readings, minutes_per_step: int = STEP_MINUTES
) -> Iterator[list[Sample]]:
    """One node's GPU readings, ``minutes_per_step`` minutes of its 8 GPUs per step, in time order; each GPU's
    energy counter starts at 0 and adds the joules of each minute."""
    timelines: dict[int, list[tuple[int, int, int, dict[str, float]]]] = defaultdict(list)
    for job in trace.jobs:
        for host, index in job.gpus:
            if host == node:
                end = trace.minutes if job.end is None else job.end
                for first, last, values in readings.segments(trace.plan(job.job_number), (host, index), job.start, end):
                    timelines[index].append((first, last, job.job_number, values))
    for timeline in timelines.values():
        timeline.sort(key=lambda entry: entry[:3])
    free = readings.free()
    gpus = [_gpu_minutes(trace, timelines[index], free) for index in range(GPUS_PER_NODE)]
    labels = [{"gpu": str(i), "uuid": gpu_uuid(node, i), "model": readings.gpu.model} for i in range(GPUS_PER_NODE)]
    stamps = [trace.start + minute * STEP for minute in range(trace.minutes)]
    energy = [0.0] * GPUS_PER_NODE
    indices = range(GPUS_PER_NODE)
    for first in range(0, trace.minutes, minutes_per_step):
        step: list[Sample] = []
        for minute in range(first, min(trace.minutes, first + minutes_per_step)):
            timestamp = stamps[minute]
            for index in indices:
                holder, values, drawn = gpus[index][minute]
                step.append(Sample("gpu", labels[index], {**values, m.GPU_ENERGY: energy[index]}, timestamp, holder))
                energy[index] += drawn
        yield step


def node_sink(shipper: Shipper, traffic: NodeTraffic, node: str) -> Callable[[list[Sample]], int]:
    """The collector agent's sink for ``node``'s steps: each step's readings with the node's derived traffic of the
    step's minutes as the batch's ``node_io`` part, delivered by ``shipper`` (:meth:`Shipper.deliver`); returns the
    readings accepted."""
    base = traffic.start

    def sink(samples: list[Sample]) -> int:
        batch = wire.batch_dict(samples)
        if samples:
            first = int((samples[0].timestamp - base) / STEP)
            last = int((samples[-1].timestamp - base) / STEP) + 1
            entries = traffic.entries(node, first, last)
            if entries:
                batch["node_io"] = entries
        return shipper.deliver(batch)

    return sink
