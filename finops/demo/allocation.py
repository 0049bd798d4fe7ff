"""Deriving a Slurm job log from a per-minute count of allocated GPUs (DERIVED data, not a real job log).

Input: for each team (a Helios "virtual cluster"), its quota of GPUs (whole 8-GPU nodes) and, for every
minute, how many of them running jobs held (``running_gpu_num``). Output: jobs whose allocations add up
to exactly that count at every minute.

Derivation (a stack of GPU slots): the team's GPUs are slots 0..quota-1, slot k being GPU k mod 8 of the
team's node k div 8. At each minute the slots [0, running) are held. When the count rises from r to r',
new jobs take [r, r'), one job per partial node and one multi-node job for the whole nodes in between.
When it falls to r'', the jobs above r'' end; a job cut in the middle ends there and its lower part
continues as a new job (split the same way). Each job's GPUs are therefore the lowest free indices of its
nodes at its start, which is what Slurm's first-fit placement picks, so the sacct log alone places every
job on the GPUs the derivation gave it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

GPUS_PER_NODE = 8
HOSTNAME = "earth-gpu-{:02d}"


@dataclass(frozen=True, slots=True)
class TeamSeries:
    """One team's allocation per minute: ``running[t]`` GPUs of ``quota`` held during minute t."""

    team: str
    quota: int
    running: Sequence[int]


@dataclass(slots=True)
class DerivedJob:
    """A job of the derived log: slots [lo, hi) of ``team`` over minutes [start, end); ``end`` None = running
    at the end of the trace. ``nodes`` are hostnames; ``gpus`` index pairs are (hostname, NVML index)."""

    job_number: int
    team: str
    lo: int
    hi: int
    start: int
    end: int | None = None
    nodes: list[str] = field(default_factory=list)
    gpus: list[tuple[str, int]] = field(default_factory=list)

    @property
    def gpu_count(self) -> int:
        """GPUs held (``hi - lo``)."""
        return self.hi - self.lo


def node_segments(lo: int, hi: int) -> list[tuple[int, int]]:
    """Split slots [lo, hi) at node boundaries: a partial head node, whole nodes as one run, a partial tail."""
    segments = []
    head_end = min(hi, -(-lo // GPUS_PER_NODE) * GPUS_PER_NODE)
    if lo % GPUS_PER_NODE and lo < head_end:
        segments.append((lo, head_end))
        lo = head_end
    whole_end = max(lo, hi // GPUS_PER_NODE * GPUS_PER_NODE)
    if whole_end > lo:
        segments.append((lo, whole_end))
        lo = whole_end
    if hi > lo:
        segments.append((lo, hi))
    return segments


class _JobNumbers:
    def __init__(self, first: int) -> None:
        self.next = first

    def take(self) -> int:
        self.next += 1
        return self.next - 1


def _push(
    stack: list[DerivedJob], numbers: _JobNumbers, team: str, hosts: list[str], lo: int, hi: int, minute: int
) -> list[DerivedJob]:
    """Start jobs holding slots [lo, hi) at ``minute``; returns them (also pushed on ``stack``)."""
    started = []
    for a, b in node_segments(lo, hi):
        gpus = [(hosts[slot // GPUS_PER_NODE], slot % GPUS_PER_NODE) for slot in range(a, b)]
        started.append(DerivedJob(numbers.take(), team, a, b, minute, None, sorted({h for h, _ in gpus}), gpus))
    stack.extend(started)
    return started


def derive_jobs(series: Sequence[TeamSeries], hostname: str = HOSTNAME, first_job: int = 1000001) -> list[DerivedJob]:
    """Derive every team's jobs (see module docstring); nodes numbered from 1 in team order.

    Raises ValueError when a quota is not whole nodes or a count is outside [0, quota].
    """
    jobs: list[DerivedJob] = []
    numbers = _JobNumbers(first_job)
    first_node = 1
    for team in series:
        if team.quota % GPUS_PER_NODE:
            raise ValueError(f"team {team.team}: quota {team.quota} is not a whole number of {GPUS_PER_NODE}-GPU nodes")
        hosts = [hostname.format(first_node + i) for i in range(team.quota // GPUS_PER_NODE)]
        first_node += len(hosts)
        stack: list[DerivedJob] = []
        level = 0
        for minute, running in enumerate(team.running):
            if not 0 <= running <= team.quota:
                raise ValueError(f"team {team.team} minute {minute}: {running} GPUs outside [0, {team.quota}]")
            if running < level:
                while stack and stack[-1].hi > running:
                    top = stack.pop()
                    top.end = minute
                    if top.lo < running:
                        jobs.extend(_push(stack, numbers, team.team, hosts, top.lo, running, minute))
                        break
            elif running > level:
                jobs.extend(_push(stack, numbers, team.team, hosts, level, running, minute))
            level = running
    jobs.sort(key=lambda job: (job.start, job.job_number))
    return jobs


def node_names(series: Sequence[TeamSeries], hostname: str = HOSTNAME) -> list[str]:
    """Every node of every team's quota, named as :func:`derive_jobs` names them."""
    return [hostname.format(i) for i in range(1, sum(t.quota for t in series) // GPUS_PER_NODE + 1)]
