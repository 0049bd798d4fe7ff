"""Nudges found from the ledger, the idle episodes and the readings (both databases): each kind fires on a user whose
jobs fit it and not on one whose jobs nearly do, with the jobs, their cost and the fix."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
from sqlalchemy import select

from finops.analysis.idle import list_episodes
from finops.db.ledger_tables import TsdbGpuMetering
from finops.db.models import Gpu, Node
from finops.ledger.costmodel import round_exact
from finops.pricing.catalog import GIB, load_catalog
from finops.savings.bottlenecks import BOTTLENECKS, MEMORY_BOUND
from finops.savings.nudge_usage import NO_GPU_USED
from finops.savings.nudges import (
    BUSY_INEFFICIENT,
    IDLE_RUNNING,
    LOW_EFFICIENCY,
    MIG_CANDIDATE,
    ZERO_UTILIZATION,
    Nudge,
    NudgePolicy,
    find_nudges,
)
from finops.timeutil import utc_now
from tests.support.alert_cluster import Cluster, minute_floor
from tests.support.nudge_cluster import (
    busy_inefficient_users,
    hour_rate,
    idle_running_users,
    low_efficiency_users,
    mig_users,
    roll_up,
    start_hour,
    zero_util_users,
)

DEFAULTS = NudgePolicy()
CATALOG = load_catalog()


def _found(sessions, now, policy: NudgePolicy = DEFAULTS, user: str | None = None) -> dict[tuple[str, str], Nudge]:  # type: ignore[no-untyped-def]
    with sessions() as session:
        return {(n.user, n.kind): n for n in find_nudges(session, now, policy, catalog=CATALOG, user=user)}


def test_gpu_hours_at_zero_percent_over_24_are_a_nudge_with_the_gpus_the_job_used(sessions) -> None:  # type: ignore[no-untyped-def]
    now = minute_floor(utc_now())
    zero_util_users(Cluster(sessions), now)
    roll_up(sessions, now)
    found = _found(sessions, now)
    assert set(found) == {("zed", ZERO_UTILIZATION)}, "yan's 5 GPU-hours at 0 % are under the threshold"
    nudge = found["zed", ZERO_UTILIZATION]
    (job,) = nudge.jobs
    assert (job.job_id, job.gpus, job.gpus_at_zero) == ("7101", 8, 6)
    assert nudge.gpu_hours == job.gpu_seconds / 3600 == 30.0, "6 GPUs at 0 % for 5 h"
    assert nudge.cost == job.cost == 30 * hour_rate(start_hour(now)), "the ledger's cost of those GPU-hours"
    assert nudge.currency == "USD" and nudge.teams == ("vision",)
    assert job.fix == "#SBATCH --gres=gpu:h100:2", "ask for the 2 GPUs it used"
    # The threshold is a setting: at 5 GPU-hours yan is told too, to ask for the one GPU his job used.
    lower = _found(sessions, now, NudgePolicy(zero_util_gpu_hours=5))
    assert lower["yan", ZERO_UTILIZATION].jobs[0].fix == "#SBATCH --gres=gpu:h100:1"
    assert set(_found(sessions, now, NudgePolicy(zero_util_gpu_hours=31))) == set(), "30 < 31"
    assert set(_found(sessions, now, user="yan")) == set()


def test_low_mean_utilisation_over_more_than_50_gpu_hours_is_a_nudge(sessions) -> None:  # type: ignore[no-untyped-def]
    now = minute_floor(utc_now())
    low_efficiency_users(Cluster(sessions), now)
    roll_up(sessions, now)
    found = _found(sessions, now)
    assert set(found) == {("lou", LOW_EFFICIENCY)}, "ned's 30 % is above 25 %"
    nudge = found["lou", LOW_EFFICIENCY]
    assert nudge.utilization == pytest.approx(0.20)
    assert nudge.allocated_gpu_seconds == 56 * 3600
    rate = hour_rate(start_hour(now))
    assert nudge.allocated_cost == 56 * rate
    assert nudge.cost == round_exact(Fraction(56 * rate) * Fraction(8, 10)), "the idle 80 % of the cost"
    (job,) = nudge.jobs
    assert (job.job_id, job.gpus, job.fix) == ("7201", 8, None), "every GPU was used a little: no request line fixes it"
    assert set(_found(sessions, now, NudgePolicy(low_efficiency_ratio=0.30))) == {
        ("lou", LOW_EFFICIENCY),
        ("ned", LOW_EFFICIENCY),
    }
    assert set(_found(sessions, now, NudgePolicy(low_efficiency_gpu_hours=56))) == set(), "more than, not as many as"


def test_a_one_gpu_job_at_low_utilisation_and_memory_is_a_mig_candidate(sessions) -> None:  # type: ignore[no-untyped-def]
    now = minute_floor(utc_now())
    mig_users(Cluster(sessions), now)
    roll_up(sessions, now)
    found = _found(sessions, now)
    assert set(found) == {("mia", MIG_CANDIDATE)}, "max's 30 GiB peak does not fit 10 GiB"
    nudge = found["mia", MIG_CANDIDATE]
    (job,) = nudge.jobs
    assert (job.job_id, job.profile, job.fix) == ("7301", "1g.10gb", "#SBATCH --gres=gpu:1g.10gb:1")
    assert job.peak_memory_bytes == 4 * GIB and job.utilization == pytest.approx(0.10)
    cost = 5 * hour_rate(start_hour(now))
    assert job.cost == nudge.cost == cost
    assert job.saving == nudge.saving == round_exact(Fraction(cost) * Fraction(6, 7)), "a 1g slice is 1/7 of an H100"
    bigger = _found(sessions, now, NudgePolicy(mig_max_memory_bytes=32 * GIB))
    assert bigger["max", MIG_CANDIDATE].jobs[0].fix == "#SBATCH --gres=gpu:3g.40gb:1", "the smallest holding 30 GiB"
    assert set(_found(sessions, now, NudgePolicy(mig_max_utilization_ratio=0.05))) == set()
    # Right-sizing's rule: the peak × the headroom (1.2) must fit the profile; at 3, mia's 4 GiB needs 12.
    roomy = _found(sessions, now, NudgePolicy(memory_headroom=Decimal(3)))
    assert roomy["mia", MIG_CANDIDATE].jobs[0].profile == "1g.20gb"
    # The profiles are the price catalog's: a catalog without the H100's leaves no slice to propose.
    no_mig = CATALOG.model_copy(
        update={"models": {key: model.model_copy(update={"mig": None}) for key, model in CATALOG.models.items()}}
    )
    with sessions() as session:
        assert find_nudges(session, now, DEFAULTS, catalog=no_mig) == []
    # The TSDB mode's metered segments count too: one of them saw 12 GiB in use.
    with sessions.begin() as session:
        gpu = session.scalar(select(Gpu.id).join(Node, Node.id == Gpu.node_id).where(Node.hostname == "n-mia"))
        segment = start_hour(now) + timedelta(hours=2)
        session.add(TsdbGpuMetering(gpu_id=gpu, start=segment, stop=segment + timedelta(hours=1), samples=60,
                                    utilization_sum=6.0, energy_joules=0.0, memory_max_bytes=12 * GIB))  # fmt: skip
    assert set(_found(sessions, now)) == set()
    assert _found(sessions, now, NudgePolicy(mig_max_memory_bytes=12 * GIB))["mia", MIG_CANDIDATE].jobs[0].profile == (
        "1g.20gb"
    )


def test_a_running_job_idle_for_an_hour_is_a_warning_with_scancel(sessions) -> None:  # type: ignore[no-untyped-def]
    now = minute_floor(utc_now())
    idle_running_users(Cluster(sessions), now)
    roll_up(sessions, now)
    at = now + timedelta(seconds=30)
    found = _found(sessions, at)
    assert set(found) == {("ida", IDLE_RUNNING)}, "ike's GPUs have been idle for 30 min only"
    nudge = found["ida", IDLE_RUNNING]
    (job,) = nudge.jobs
    assert (job.job_id, job.gpus, job.gpus_at_zero, job.fix) == ("7401", 2, 2, "scancel 7401")
    with sessions() as session:
        episodes = [e for e in list_episodes(session, now - timedelta(days=1), at) if e.job_id == "7401"]
    assert len(episodes) == 2 and job.cost == nudge.cost == sum((e.cost for e in episodes), Decimal(0)) > 0
    assert job.since == now - timedelta(minutes=100) + timedelta(minutes=10), "idle from the end of the grace"
    assert set(_found(sessions, at, NudgePolicy(idle_running=timedelta(minutes=25)))) == {
        ("ida", IDLE_RUNNING),
        ("ike", IDLE_RUNNING),
    }
    later = now + timedelta(minutes=20)
    assert set(_found(sessions, later)) == set(), "no reading for 20 min: the episode is no longer open"
    assert set(_found(sessions, at, NudgePolicy(kinds=frozenset({ZERO_UTILIZATION})))) == set()


def test_a_finished_job_that_used_none_of_its_gpus_is_told_so() -> None:
    from finops.db.models import Job
    from finops.savings.nudge_usage import GpuUse, JobUse

    use = JobUse(Job(job_id="9", scheduler="slurm", gpu_type="a100", end=utc_now()), "t")
    use.gpus = {1: GpuUse(3600, 3600, 0.0), 2: GpuUse(3600, 3600, 0.0)}
    assert use.fewer_gpus_fix() == NO_GPU_USED
    use.job.end = None
    assert use.fewer_gpus_fix() == "scancel 9"
    use.gpus[3] = GpuUse(3600, 0, 0.0)
    use.nodes = {1, 2}
    assert use.fewer_gpus_fix() == "#SBATCH --gpus=a100:1", "a GPU without readings counts as used; two nodes"
    use.job.scheduler, use.job.job_id = "kubernetes", "ml/train-0"
    assert use.fewer_gpus_fix() == "resources.limits: nvidia.com/gpu: 1"
    use.vendor = "amd"
    assert use.fewer_gpus_fix() == "resources.limits: amd.com/gpu: 1", "an AMD pod asks for amd.com/gpu"


def test_the_policy_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="low_efficiency_ratio"):
        NudgePolicy(low_efficiency_ratio=25)
    with pytest.raises(ValueError, match="unknown nudge kind 'idle'"):
        NudgePolicy(kinds=frozenset({"idle"}))
    with pytest.raises(ValueError, match="memory_headroom must be at least 1"):
        NudgePolicy(memory_headroom=Decimal("0.5"))
    with pytest.raises(ValueError, match="inefficient_gpu_hours must not be negative"):
        NudgePolicy(inefficient_gpu_hours=-1)


def test_busy_but_inefficient_jobs_over_24_gpu_hours_are_a_nudge_with_their_bottleneck(sessions) -> None:  # type: ignore[no-untyped-def]
    """pia's job kept 4 GPUs at 95 % utilisation and SM activity 0.2 for 7 h: told, with the bottleneck, its evidence
    and its usual fix; quin's 14 GPU-hours are under 24; ros's GPUs carried no profiling field: never told."""
    now = minute_floor(utc_now())
    busy_inefficient_users(Cluster(sessions), now)
    roll_up(sessions, now)
    found = _found(sessions, now)
    assert set(found) == {("pia", BUSY_INEFFICIENT)}
    nudge = found["pia", BUSY_INEFFICIENT]
    (job,) = nudge.jobs
    assert (job.job_id, job.gpus, job.gpu_model, job.scheduler) == ("7501", 4, "NVIDIA H100 80GB HBM3", "slurm")
    assert (job.utilization, job.sm_active) == (pytest.approx(0.95), pytest.approx(0.2))
    assert job.bottleneck == "memory-bound" and job.evidence == "DRAM active 0.75, SM active 0.20, tensor active 0.00"
    assert job.fix == BOTTLENECKS[MEMORY_BOUND].fix
    cost = 28 * hour_rate(start_hour(now))
    assert nudge.gpu_hours == 28.0 and nudge.cost == job.cost == cost
    assert nudge.inactive_cost == job.inactive_cost == pytest.approx(cost * Decimal("0.8"), abs=Decimal("0.00001"))
    assert nudge.teams == ("vision",)

    lower = _found(sessions, now, NudgePolicy(inefficient_gpu_hours=10))
    assert set(lower) == {("pia", BUSY_INEFFICIENT), ("quin", BUSY_INEFFICIENT)}
    assert _found(sessions, now, user="quin", policy=NudgePolicy(inefficient_gpu_hours=10)).keys() == {
        ("quin", BUSY_INEFFICIENT)
    }
    assert _found(sessions, now, NudgePolicy(kinds=frozenset({ZERO_UTILIZATION}))) == {}
