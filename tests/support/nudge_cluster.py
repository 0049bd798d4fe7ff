"""Users whose jobs fit each kind of nudge, and users whose jobs nearly do, written through the real ingest and sacct
import paths (:class:`tests.support.alert_cluster.Cluster`), then rolled up and judged for idle episodes.

All jobs are Slurm jobs of GRES type ``h100`` on H100 80GB GPUs, one node per user, in the hours before ``now``
(a whole minute): finished jobs start at ``t0``, eight whole hours before ``now``'s hour, so that their ledger hours
are whole.

- ``zed`` (team vision): job 7101, 8 GPUs for 5 h, GPUs 0-1 busy and 2-7 at 0 %: 30 GPU-hours at 0 %.
- ``yan`` (team vision): job 7102, 2 GPUs for 5 h, GPU 1 at 0 %: 5 GPU-hours at 0 %, under 24.
- ``lou`` (team nlp): job 7201, 8 GPUs for 7 h at 20 %: 56 GPU-hours at a mean of 20 %.
- ``ned`` (team nlp): job 7202, 8 GPUs for 7 h at 30 %: above 25 %.
- ``mia`` (team nlp): job 7301, 1 GPU for 5 h at 10 %, 4 GiB in use: fits a ``1g.10gb`` slice.
- ``max`` (team nlp): job 7302, 1 GPU for 5 h at 10 %, 30 GiB in use: no.
- ``ida`` (team vision): job 7401 running for 100 min on 2 GPUs, both at 0 %: idle for 90 min after the grace.
- ``ike`` (team vision): job 7402 running for 40 min on 2 GPUs at 0 %: idle for 30 min only.
- ``pia`` (team vision): job 7501, 4 GPUs for 7 h at 95 % utilisation with SM activity 0.2, DRAM active 0.75 and
  tensor active 0 (:data:`MEMORY_BOUND`): 28 GPU-hours busy but inefficient, memory-bound.
- ``quin`` (team vision): job 7502, 2 GPUs for 7 h, the same readings: 14 GPU-hours, under 24.
- ``ros`` (team nlp): job 7503, 8 GPUs for 7 h at 95 % without profiling fields: not measured, never told.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from sqlalchemy.orm import Session, sessionmaker

from collector.contract import metric_names as m
from finops.analysis.idle import IdlePolicy, detect_idle
from finops.ledger.rollup import rollup
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import floor_hour, from_epoch, to_epoch
from tests.support.alert_cluster import MODEL, Cluster, Values

PRICING = Pricing(load_catalog(), PricingModel.ON_DEMAND)
GIB = 2**30
FIVE_MINUTES = timedelta(minutes=5)


def reading(utilization: float, memory_gib: float) -> Values:
    """Readings of an H100 at ``utilization`` with ``memory_gib`` in use."""

    def values(index: int, at: datetime) -> dict[str, float]:
        return {
            m.GPU_UTILIZATION: utilization,
            m.GPU_POWER: 100.0 + 500 * utilization,
            m.GPU_MEMORY_USED: memory_gib * GIB,
            m.GPU_TEMPERATURE: 40.0,
            m.GPU_CLOCKS_EVENT_REASONS: 0.0,
        }

    return values


MEMORY_BOUND = {m.GPU_SM_ACTIVE: 0.2, m.GPU_DRAM_ACTIVE: 0.75, m.GPU_TENSOR_ACTIVE: 0.0}
"""The profiling fields of ``pia``'s and ``quin``'s GPUs."""


def profiled(utilization: float, memory_gib: float, activity: dict[str, float]) -> Values:
    """Readings of :func:`reading` with the profiling fields of ``activity``."""
    plain = reading(utilization, memory_gib)
    return lambda index, at: {**plain(index, at), **activity}


def start_hour(now: datetime) -> datetime:
    """t0: eight whole hours before ``now``'s hour."""
    return from_epoch(floor_hour(to_epoch(now))) - timedelta(hours=8)


def finished_job(
    cluster: Cluster, user: str, team: str, job: str, gpus: dict[int, Values], start: datetime, hours: int
) -> None:
    """Job ``job`` of ``user`` on node ``n-<user>``, the GPUs of ``gpus`` each read by its values every 5 minutes
    over [start, start + hours)."""
    node, end = f"n-{user}", start + timedelta(hours=hours)
    for index, values in gpus.items():
        cluster.readings(node, [index], start, end, step=FIVE_MINUTES, values=values, job=job)
    cluster.job(job, f"acct-{team}", user, node, len(gpus), start, end, team=team, gpu_type="h100")


def running_job(cluster: Cluster, user: str, team: str, job: str, gpus: int, now: datetime, minutes: int) -> None:
    """Job ``job`` of ``user`` on node ``n-<user>``, running for ``minutes`` up to ``now`` with every GPU at 0 %,
    read every minute."""
    node, start = f"n-{user}", now - timedelta(minutes=minutes)
    cluster.readings(node, list(range(gpus)), start, now + timedelta(seconds=1), values=reading(0.0, 0.0), job=job)
    cluster.job(job, f"acct-{team}", user, node, gpus, start, team=team, gpu_type="h100")


def zero_util_users(cluster: Cluster, now: datetime) -> None:
    """``zed`` and ``yan``."""
    t0 = start_hour(now)
    busy, zero = reading(0.95, 40.0), reading(0.0, 0.0)
    finished_job(cluster, "zed", "vision", "7101", {i: busy if i < 2 else zero for i in range(8)}, t0, 5)
    finished_job(cluster, "yan", "vision", "7102", {0: busy, 1: zero}, t0, 5)


def low_efficiency_users(cluster: Cluster, now: datetime) -> None:
    """``lou`` and ``ned``."""
    t0 = start_hour(now)
    finished_job(cluster, "lou", "nlp", "7201", dict.fromkeys(range(8), reading(0.20, 20.0)), t0, 7)
    finished_job(cluster, "ned", "nlp", "7202", dict.fromkeys(range(8), reading(0.30, 20.0)), t0, 7)


def mig_users(cluster: Cluster, now: datetime) -> None:
    """``mia`` and ``max``."""
    t0 = start_hour(now)
    finished_job(cluster, "mia", "nlp", "7301", {0: reading(0.10, 4.0)}, t0, 5)
    finished_job(cluster, "max", "nlp", "7302", {0: reading(0.10, 30.0)}, t0, 5)


def idle_running_users(cluster: Cluster, now: datetime) -> None:
    """``ida`` and ``ike``."""
    running_job(cluster, "ida", "vision", "7401", 2, now, 100)
    running_job(cluster, "ike", "vision", "7402", 2, now, 40)


def busy_inefficient_users(cluster: Cluster, now: datetime) -> None:
    """``pia``, ``quin`` and ``ros``."""
    t0 = start_hour(now)
    inefficient = profiled(0.95, 40.0, MEMORY_BOUND)
    finished_job(cluster, "pia", "vision", "7501", dict.fromkeys(range(4), inefficient), t0, 7)
    finished_job(cluster, "quin", "vision", "7502", dict.fromkeys(range(2), inefficient), t0, 7)
    finished_job(cluster, "ros", "nlp", "7503", dict.fromkeys(range(8), reading(0.95, 40.0)), t0, 7)


def roll_up(sessions: sessionmaker[Session], now: datetime) -> None:
    """The ledger up to ``now`` and the idle episodes of the last day, as the scheduler's rollup makes them."""
    with sessions.begin() as session:
        rollup(session, PRICING, to_epoch(now))
        detect_idle(session, now - timedelta(days=1), now + timedelta(seconds=1), IdlePolicy(), PRICING)


def hour_rate(at: datetime) -> Decimal:
    """The on-demand price of an H100 GPU-hour at ``at``."""
    return PRICING.catalog.rate(MODEL, PricingModel.ON_DEMAND, at)
