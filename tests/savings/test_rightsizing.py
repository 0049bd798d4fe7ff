"""Right-sizing on the hand-worked slice (tests/support/rightsizing_scenario.py), on SQLite and PostgreSQL: GPU-count
findings priced from the ledger, MIG profiles and smaller models from memory peaks at current prices, memory unknown
said, thresholds, filters, totals and memory from the TSDB mode's segments."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
from sqlalchemy import func, select

from finops.db.ledger_tables import LedgerEntry, TsdbGpuMetering
from finops.db.models import Gpu, Job
from finops.ledger.costmodel import round_exact
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.savings.rightsizing import rightsizing
from finops.savings.rightsizing_policy import NO_MEMORY_READING, RightsizingPolicy
from finops.savings.rightsizing_report import (
    finding_dicts,
    measure_line,
    rightsizing_table,
    rightsizing_totals,
    total_dicts,
)
from tests.support import rightsizing_scenario as rs

ON_DEMAND = PricingModel.ON_DEMAND


@pytest.fixture
def slice_(sessions):  # type: ignore[no-untyped-def]
    """(sessions, T, catalog) with the slice loaded and its ledger built."""
    pricing = Pricing(load_catalog(), ON_DEMAND)
    with sessions.begin() as session:
        t0 = rs.load(session, pricing)
    return sessions, t0, pricing.catalog


def _run(slice_, **kwargs):  # type: ignore[no-untyped-def]
    sessions, t0, catalog = slice_
    with sessions() as session:
        return rightsizing(
            session, t0, t0 + timedelta(hours=2), catalog=catalog, priced_at=t0 + timedelta(hours=2), **kwargs
        )


def _ledger_cost(sessions, job_id: str, gpu_indexes: set[int]) -> Decimal:  # type: ignore[no-untyped-def]
    with sessions() as session:
        total = session.scalar(
            select(func.sum(LedgerEntry.allocated_cost))
            .join(Job, Job.id == LedgerEntry.job_pk)
            .join(Gpu, Gpu.id == LedgerEntry.gpu_id)
            .where(Job.job_id == job_id, Gpu.gpu_index.in_(gpu_indexes))
        )
    assert total is not None
    return Decimal(total)


def test_findings_of_the_slice(slice_) -> None:  # type: ignore[no-untyped-def]
    sessions, t0, catalog = slice_
    report = _run(slice_)
    by_job = {f.job_id: f for f in report.findings}
    assert set(by_job) == {"701", "702", "704", "706"}, "703 keeps its GPU busy; 705 has no reading"
    assert (report.jobs_examined, report.jobs_unmetered) == (6, 1)

    over = by_job["701"]
    assert (over.gpus_requested, over.gpus_held, over.gpus_busy, over.gpus_suggested) == (4, 4, 1, 1)
    assert over.saved_gpu_seconds == 3 * 7200 and over.gpu_seconds == 4 * 7200
    assert over.count_saving == _ledger_cost(sessions, "701", {1, 2, 3}), "what the ledger allocated to GPUs 1-3"
    rate_then = catalog.rate(rs.MODEL, ON_DEMAND, t0)
    assert over.count_saving == 6 * rate_then
    assert over.allocated_cost == _ledger_cost(sessions, "701", {0, 1, 2, 3})
    assert over.count_fix == "#SBATCH --gres=gpu:h100:1"
    assert over.memory_peak_bytes is None and over.mig_profile is None, "its kept GPU is busy: memory not read"
    assert over.saving == over.count_saving

    spread = by_job["706"]
    assert (spread.gpus_requested, spread.gpus_busy, spread.gpus_suggested) == (4, 2, 2)
    assert spread.count_fix == "#SBATCH --gpus=h100:2", "the two kept GPUs are on two nodes: the job's total"
    assert spread.count_saving == 4 * rate_then

    small = by_job["702"]
    assert small.memory_peak_bytes == 6 * rs.GIB, "the reading before the job started is not the job's"
    rate_now = catalog.rate(rs.MODEL, ON_DEMAND, t0 + timedelta(hours=2))
    assert small.mig_profile == "1g.10gb"
    assert small.mig_saving == round_exact(Fraction(2) * Fraction(rate_now) * Fraction(6, 7))
    l40s = catalog.rate("L40S", ON_DEMAND, t0 + timedelta(hours=2))
    assert small.smaller_model == "L40S" and not small.smaller_model_in_fleet
    assert small.smaller_model_saving == round_exact(Fraction(2) * (Fraction(rate_now) - Fraction(l40s)))
    assert small.count_saving is None and small.saving == max(small.mig_saving, small.smaller_model_saving)
    assert small.fixes == ("#SBATCH --gres=gpu:1g.10gb:1", "#SBATCH --gres=gpu:l40s:1")

    unknown = by_job["704"]
    assert unknown.memory_unknown and unknown.memory_peak_bytes is None
    assert unknown.notes[0].startswith(NO_MEMORY_READING) and unknown.fixes == () and unknown.saving is None
    assert (unknown.gpus_busy, unknown.gpus_suggested) == (2, 2)

    assert [f.job_id for f in report.findings] == ["701", "706", "702", "704"], "largest saving first"


def test_memory_is_read_within_the_jobs_holding(slice_) -> None:  # type: ignore[no-untyped-def]
    """GPU 4 holds 70 GiB ten minutes before and after job 702; over a period reaching past the job both are left
    out, as the holding bounds the lookup."""
    sessions, t0, catalog = slice_
    with sessions() as session:
        report = rightsizing(session, t0 - timedelta(hours=1), t0 + timedelta(hours=3), catalog=catalog, priced_at=t0)
    assert next(f for f in report.findings if f.job_id == "702").memory_peak_bytes == 6 * rs.GIB


def test_thresholds_change_the_findings(slice_) -> None:  # type: ignore[no-untyped-def]
    strict = _run(slice_, policy=RightsizingPolicy(idle_ratio=0.02))
    over = next(f for f in strict.findings if f.job_id == "701")
    assert (over.gpus_busy, over.gpus_suggested, over.saved_gpu_seconds) == (2, 2, 2 * 7200), "GPU 3 at 3 % is busy"
    assert over.count_fix == "#SBATCH --gres=gpu:h100:2"

    roomy = _run(slice_, policy=RightsizingPolicy(memory_headroom=Decimal(2)))
    assert next(f for f in roomy.findings if f.job_id == "702").mig_profile == "1g.20gb", "6 GiB × 2 > 10 GiB"

    busy = _run(slice_, policy=RightsizingPolicy(low_utilization_ratio=0.05))
    assert [f.job_id for f in busy.findings] == ["701", "706"], "10 % and 12 % are not low at 5 %"


def test_an_idle_job_keeps_one_gpu(slice_) -> None:  # type: ignore[no-untyped-def]
    report = _run(slice_, policy=RightsizingPolicy(idle_ratio=0.95))
    over = next(f for f in report.findings if f.job_id == "701")
    assert (over.gpus_busy, over.gpus_suggested, over.saved_gpu_seconds) == (0, 1, 3 * 7200)
    sessions = slice_[0]
    assert over.count_saving == _ledger_cost(sessions, "701", {1, 2, 3}), "the busiest GPU (0, at 80 %) is kept"


def test_filters_and_totals(slice_) -> None:  # type: ignore[no-untyped-def]
    assert {f.job_id for f in _run(slice_, team="beta").findings} == {"702", "704"}
    assert {f.job_id for f in _run(slice_, user="alice").findings} == {"701"}
    assert _run(slice_, team="nobody").findings == []
    report = _run(slice_)
    teams = {t.key: t for t in rightsizing_totals(report.findings, "team")}
    assert set(teams) == {"alpha", "beta"} and teams["alpha"].saved_gpu_seconds == 10 * 3600
    assert teams["beta"].jobs == 2 and teams["beta"].memory_unknown_jobs == 1
    assert sum(t.saving for t in teams.values()) == sum(f.saving or Decimal(0) for f in report.findings)
    users = rightsizing_totals(report.findings, "user")
    assert [u.key for u in users] == ["alice", "frank", "bob", "dave"] and users[0].team == "alpha"
    rows = total_dicts(users, "user")
    assert sum(Decimal(r["saving"]) for r in rows) == sum(
        Decimal(r["saving"] or 0) for r in finding_dicts(report.findings)
    )


def test_memory_from_tsdb_segments(slice_) -> None:  # type: ignore[no-untyped-def]
    """In the TSDB mode the memory peak comes from ``tsdb_gpu_metering``; segments outside the job's holding or
    the period are not the job's."""
    sessions, t0, _ = slice_
    with sessions.begin() as session:
        gpus = {i: pk for i, pk in session.execute(select(Gpu.gpu_index, Gpu.id).where(Gpu.uuid.like("%-0001-%")))}
        for index, start, minutes, gib in ((6, 0, 60, 20), (7, 60, 60, 30), (7, 120, 60, 79)):
            session.add(
                TsdbGpuMetering(
                    gpu_id=gpus[index], start=t0 + timedelta(minutes=start),
                    stop=t0 + timedelta(minutes=start + minutes), samples=60, utilization_sum=7.2,
                    energy_joules=0.0, memory_max_bytes=gib * rs.GIB,
                )
            )  # fmt: skip
    found = next(f for f in _run(slice_).findings if f.job_id == "704")
    assert found.memory_peak_bytes == 30 * rs.GIB and not found.memory_unknown
    assert found.mig_profile is None, "two GPUs kept: no single MIG slice"
    assert found.smaller_model == "L40S" and found.model_fix == "#SBATCH --gres=gpu:l40s:2"


@pytest.mark.parametrize(
    "kwargs",
    [{"idle_ratio": -0.1}, {"low_utilization_ratio": 1.5}, {"memory_headroom": Decimal("0.9")},
     {"memory_headroom": Decimal("NaN")}],
)  # fmt: skip
def test_policy_refuses_bad_thresholds(kwargs) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        RightsizingPolicy(**kwargs)


@pytest.fixture(params=[True, False], ids=["profiled", "unprofiled"])
def busy_looking(sessions, request):  # type: ignore[no-untyped-def]
    """(sessions, T, catalog, profiled) with jobs 707 and 708 loaded, with SM activity or without."""
    pricing = Pricing(load_catalog(), ON_DEMAND)
    with sessions.begin() as session:
        t0 = rs.load_busy_looking(session, pricing, profiled=request.param)
    return sessions, t0, pricing.catalog, request.param


def test_sm_activity_judges_gpus_that_utilisation_calls_busy(busy_looking) -> None:  # type: ignore[no-untyped-def]
    """8 GPUs at 100 % utilisation: by SM activity (0.66 on one, 0.02 on seven; mean 0.1) job 707 needed one GPU and
    job 708 (0.1 on each) fits smaller GPUs; without SM activity neither is found."""
    sessions, t0, catalog, profiled = busy_looking
    with sessions() as session:
        report = rightsizing(session, t0, t0 + timedelta(hours=2), catalog=catalog, priced_at=t0 + timedelta(hours=2))
    assert report.jobs_examined == 2
    if not profiled:
        assert report.findings == [], "at 100 % utilisation every GPU is busy"
        return
    by_job = {f.job_id: f for f in report.findings}
    assert set(by_job) == {"707", "708"}
    spinning = by_job["707"]
    assert (spinning.gpus_requested, spinning.gpus_busy, spinning.gpus_suggested) == (8, 1, 1)
    assert spinning.count_fix == "#SBATCH --gres=gpu:h100:1"
    assert spinning.saved_gpu_seconds == 7 * 7200
    assert spinning.count_saving == _ledger_cost(sessions, "707", set(range(1, 8)))
    assert spinning.mean_utilization == pytest.approx(1.0) and spinning.sm_active == pytest.approx(0.1)
    assert spinning.measure == "SM activity" and spinning.sm_active_share == pytest.approx(1.0)
    assert spinning.memory_peak_bytes is None, "its kept GPU is busy by SM activity (0.66): memory not read"

    thin = by_job["708"]
    assert (thin.gpus_busy, thin.gpus_suggested, thin.count_fix) == (8, 8, None), "0.1 is above the idle 5 %"
    assert thin.memory_peak_bytes == 20 * rs.GIB and thin.smaller_model == "L40S"
    assert thin.model_fix == "#SBATCH --gres=gpu:l40s:8" and thin.measure == "SM activity"

    rows = {row["job"]: row for row in finding_dicts(report.findings)}
    assert (rows["707"]["measure"], rows["707"]["mean_utilization"], rows["707"]["sm_active"]) == (
        "SM activity", 1.0, 0.1,
    )  # fmt: skip
    table = rightsizing_table(report, "job").splitlines()
    assert "707: judged by SM activity: 10.0% (utilisation 100.0%)" in table
    partly = replace(spinning, sm_active_share=0.4)
    assert partly.measure == "SM activity and utilisation"
    assert measure_line(partly) == (
        "judged by SM activity: 10.0% (utilisation 100.0%) over 40.0% of its metered GPU-seconds, utilisation over "
        "the rest"
    )
    assert "707: #SBATCH --gres=gpu:h100:1" in table


def test_unprofiled_findings_say_utilisation_judged_them(slice_) -> None:  # type: ignore[no-untyped-def]
    report = _run(slice_)
    assert {f.measure for f in report.findings} == {"utilisation"}
    assert all(f.sm_active is None and f.sm_active_share == 0 for f in report.findings)
    assert not any("judged by" in line for line in rightsizing_table(report, "job").splitlines())
