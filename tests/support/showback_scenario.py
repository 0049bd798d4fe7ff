"""A hand-written month for the showback tests, built through the real ingest, sacct import, rollup and idle
detection, and its figures computed by hand from the scenario alone.

October 2026, node ``gpu-v-01`` with four H100s, one reading a minute per GPU while a job holds it:

- team vision (account ``acct-v``): job 7001 (mei) on GPUs 0-1 over 2026-10-05 10:00-12:00 at 95 %; job 7002 (lars)
  on GPUs 2-3 over 10:00-13:00 at 0 %; job 7004 (mei) on GPU 0 over 2026-10-31 23:00 to 2026-11-01 01:00 at 95 %,
  of which one hour is October's. A 100 USD budget for October.
- team nlp (account ``acct-n``): job 7003 (ana) on GPUs 0-1 over 2026-10-20 08:00-09:00 at 95 %. No budget.

By hand, with r the catalogue's on-demand rate per H100-hour (:func:`expected`): vision held 2×2 + 2×3 + 1 = 11
GPU-hours, 11 r; used 95 % of the 5 busy GPU-hours, 4.75 r; idle 6.25 r. Job 7002's two GPUs are idle episodes
from 10:10 (the 10 min grace) to 12:59 (the last reading): 2 h 49 min each. Idle cost by reason: job 7002's 6
GPU-hours are "unexplained" (no memory held, no throttling, no storage or network rate, an ordinary partition and
name), and the busy jobs' unused 5 % of 5 GPU-hours is the "idle share of busy jobs".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from sqlalchemy.orm import Session, sessionmaker

from collector.contract import metric_names as m
from finops.analysis.budgets import set_budget
from finops.analysis.idle import IdlePolicy, detect_idle
from finops.ledger.costmodel import CENT, quantize
from finops.ledger.rollup import rollup
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import to_epoch
from tests.support.alert_cluster import MODEL, Cluster, Values, busy, idle

MONTH = datetime(2026, 10, 1, tzinfo=UTC)
NEXT_MONTH = datetime(2026, 11, 1, tzinfo=UTC)
NOW = datetime(2026, 11, 1, 0, 10, tzinfo=UTC)
"""When the scheduled job first runs for October."""
NODE = "gpu-v-01"
BUDGET = Decimal(100)
_DAY5 = datetime(2026, 10, 5, 10, tzinfo=UTC)
_DAY20 = datetime(2026, 10, 20, 8, tzinfo=UTC)
_LAST = datetime(2026, 10, 31, 23, tzinfo=UTC)


def pricing() -> Pricing:
    """The packaged catalogue, on-demand."""
    return Pricing(load_catalog(), PricingModel.ON_DEMAND)


def rate() -> Decimal:
    """r: the on-demand price of an H100-hour in October 2026."""
    return pricing().catalog.rate(MODEL, PricingModel.ON_DEMAND, _DAY5)


PROFILED = {
    "7001": {m.GPU_SM_ACTIVE: 0.25, m.GPU_DRAM_ACTIVE: 0.75, m.GPU_TENSOR_ACTIVE: 0.0},
    "7002": {m.GPU_SM_ACTIVE: 0.0, m.GPU_DRAM_ACTIVE: 0.0, m.GPU_TENSOR_ACTIVE: 0.0},
    "7004": {m.GPU_SM_ACTIVE: 0.875, m.GPU_DRAM_ACTIVE: 0.25, m.GPU_TENSOR_ACTIVE: 0.5},
}
"""With ``seed(profiled=True)``, the profiling fields of vision's jobs' readings (nlp's job ran while the node's
DCGM profiling module was not loaded: none). By hand: job 7001 at 95 % utilisation and SM activity 0.25 with DRAM
active 0.75 and no tensor activity is busy but inefficient and memory-bound, allocated 4 r, SM-active r, inactive
3 r; vision's SM activity is (4 × 0.25 + 6 × 0 + 1 × 0.875) ÷ 11 = 1.875 ÷ 11 (17.0 %, ineffective), every GPU-hour
profiled, SM-active cost 1.875 r, inactive cost 9.125 r."""


def _with(values: Values, activity: dict[str, float]) -> Values:
    return lambda index, at: {**values(index, at), **activity}


def seed(sessions: sessionmaker[Session], *, profiled: bool = False) -> None:
    """Store the scenario's readings and jobs (with :data:`PROFILED`'s fields when ``profiled``), roll the ledger up
    to 2026-11-02, judge October's idle episodes and set vision's October budget."""
    cluster = Cluster(sessions)
    hour = timedelta(hours=1)

    def values(job: str, plain: Values) -> Values:
        return _with(plain, PROFILED[job]) if profiled and job in PROFILED else plain

    cluster.readings(NODE, [0, 1], _DAY5, _DAY5 + 2 * hour, values=values("7001", busy), job="7001")
    cluster.readings(NODE, [2, 3], _DAY5, _DAY5 + 3 * hour, values=values("7002", idle), job="7002")
    cluster.readings(NODE, [0, 1], _DAY20, _DAY20 + hour, values=busy, job="7003")
    cluster.readings(NODE, [0], _LAST, _LAST + 2 * hour, values=values("7004", busy), job="7004")
    cluster.job("7001", "acct-v", "mei", NODE, 2, _DAY5, _DAY5 + 2 * hour, team="vision")
    cluster.job("7002", "acct-v", "lars", NODE, 2, _DAY5, _DAY5 + 3 * hour, team="vision")
    cluster.job("7003", "acct-n", "ana", NODE, 2, _DAY20, _DAY20 + hour, team="nlp")
    cluster.job("7004", "acct-v", "mei", NODE, 1, _LAST, _LAST + 2 * hour, team="vision")
    with sessions.begin() as session:
        rollup(session, pricing(), to_epoch(NEXT_MONTH + timedelta(days=1)))
        detect_idle(session, MONTH, NEXT_MONTH, IdlePolicy(), pricing())
        set_budget(session, "vision", BUDGET, MONTH, actor="system:test")


@dataclass(frozen=True, slots=True)
class Figures:
    """vision's October by hand: money in cents, hours in GPU-hours; jobs and users costliest first as
    (key, GPU-hours, cost, idle cost); idle cost by reason in the reasons' precedence as (title, GPU-hours, cost)."""

    gpu_hours: float
    spend: Decimal
    used: Decimal
    idle: Decimal
    utilization_percent: Decimal
    budget_used_percent: Decimal
    jobs: list[tuple[str, float, Decimal, Decimal]]
    users: list[tuple[str, float, Decimal, Decimal]]
    idle_gpu_hours: float
    reasons: list[tuple[str, float, Decimal]]
    episodes: int
    episode_gpu_hours: float


def expected() -> Figures:
    """vision's October figures from the scenario's definition (module docstring), at :func:`rate`."""
    r = rate()

    def cents(gpu_hours: Decimal) -> Decimal:
        return quantize(gpu_hours * r, CENT)

    busy_share = Decimal("0.95")
    jobs = [
        ("7002", 6.0, cents(Decimal(6)), cents(Decimal(6))),
        ("7001", 4.0, cents(Decimal(4)), cents(4 * (1 - busy_share))),
        ("7004", 1.0, cents(Decimal(1)), cents(1 - busy_share)),
    ]
    users = [
        ("lars", 6.0, cents(Decimal(6)), cents(Decimal(6))),
        ("mei", 5.0, cents(Decimal(5)), cents(5 * (1 - busy_share))),
    ]
    episode_hours = 2 * (2 + 49 / 60)
    return Figures(
        gpu_hours=11.0,
        spend=cents(Decimal(11)),
        used=cents(5 * busy_share),
        idle=cents(Decimal(11) - 5 * busy_share),
        utilization_percent=quantize(5 * busy_share * 100 / 11, Decimal("0.1")),
        budget_used_percent=quantize(cents(Decimal(11)) * 100 / BUDGET, Decimal("0.1")),
        jobs=jobs,
        users=users,
        idle_gpu_hours=6 + 5 * 0.05,
        reasons=[
            ("unexplained", 6.0, cents(Decimal(6))),
            ("idle share of busy jobs", 0.25, cents(5 * (1 - busy_share))),
        ],
        episodes=2,
        episode_gpu_hours=episode_hours,
    )
