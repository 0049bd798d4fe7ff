"""Efficiency bands, busy-but-inefficient jobs and their bottleneck on the slice of tests/support/efficiency_scenario.py
(real ingest, sacct import and rollup, on SQLite and PostgreSQL): each rule holds for the job built for it, with its
evidence; bands per job and team; a job without profiling data is ``not measured`` and never inefficient; the inactive
cost is the measured allocated cost less the SM-active cost; the rule table is the doc's."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import func, select

from finops.db.ledger_tables import LedgerEntry
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.savings.bottlenecks import RULES, JobFacts, judge, rule_table
from finops.savings.efficiency import efficiency_report
from finops.savings.efficiency_policy import EfficiencyPolicy
from tests.support import efficiency_scenario

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def loaded(sessions):  # type: ignore[no-untyped-def]
    with sessions.begin() as session:
        t0 = efficiency_scenario.load(session, Pricing(load_catalog(), PricingModel.ON_DEMAND))
    return sessions, t0


def _report(loaded, **kwargs):  # type: ignore[no-untyped-def]
    sessions, t0 = loaded
    with sessions() as session:
        return efficiency_report(session, t0, t0 + timedelta(hours=efficiency_scenario.HOURS), **kwargs)


def test_each_rule_holds_for_its_job_with_evidence(loaded) -> None:  # type: ignore[no-untyped-def]
    report = _report(loaded)
    found = {job.job_id: job.bottleneck for job in report.inefficient}
    assert {job: b.key for job, b in found.items() if b} == {
        "801": "memory_bound",
        "802": "communication_bound",
        "803": "input_bound",
        "804": "no_tensor_cores",
        "805": "low_occupancy",
        "806": "unexplained",
    }
    evidence = {job: b.evidence for job, b in found.items() if b}
    assert evidence["801"] == "DRAM active 0.75, SM active 0.20, tensor active 0.00"
    assert evidence["802"].startswith("2.0 GB/s InfiniBand traffic received on the job's nodes")
    assert "NVLink not measured" in evidence["802"]
    assert evidence["803"].startswith("500 MB/s Lustre reads on the job's nodes")
    assert "varied by 0.50 (coefficient of variation over 4 hours, 0.12 to 0.38)" in evidence["803"]
    assert evidence["804"] == "FP32 pipe active 0.50, tensor active 0.00"
    assert evidence["805"] == "SM occupancy 0.12, SM active 0.38"
    assert "not measured: FP32 pipe active, SM occupancy, storage reads rates, InfiniBand rates" in evidence["806"]
    assert "NVLink" in evidence["806"]


def test_inefficient_jobs_costliest_first_with_inactive_cost(loaded) -> None:  # type: ignore[no-untyped-def]
    report = _report(loaded)
    order = [job.job_id for job in report.inefficient]
    assert order[0] == "802"  # two GPUs: twice the others' cost
    assert sorted(order[1:]) == order[1:]  # equal cost and GPU-seconds: by job id
    sessions, _ = loaded
    for job in report.inefficient:
        assert job.allocated_cost is not None and job.sm_active_cost is not None
        with sessions() as session:
            rows = session.execute(
                select(func.sum(LedgerEntry.allocated_cost), func.sum(LedgerEntry.sm_active_cost)).where(
                    LedgerEntry.job_pk == job.job_pk
                )
            ).one()
        assert (job.allocated_cost, job.sm_active_cost) == (Decimal(rows[0]), Decimal(rows[1]))
        assert job.inactive_cost == job.allocated_cost - job.sm_active_cost
        sm = job.sm_active
        assert sm is not None and abs(job.inactive_cost - job.allocated_cost * Decimal(1 - sm)) < Decimal("0.0001")


def test_bands_per_job_and_team(loaded) -> None:  # type: ignore[no-untyped-def]
    report = _report(loaded)
    bands = {job.job_id: job.band for job in report.jobs}
    assert bands["807"] == "effective"
    assert bands["809"] == "moderate"
    assert bands["810"] == "ineffective"
    assert bands["808"] == "not measured"
    unmeasured = next(job for job in report.jobs if job.job_id == "808")
    assert unmeasured.sm_active is None and unmeasured.sm_active_cost is None and unmeasured.inactive_cost is None
    assert unmeasured.utilization == pytest.approx(0.95)
    assert "808" not in {job.job_id for job in report.inefficient}
    assert "810" not in {job.job_id for job in report.inefficient}  # ineffective but not busy
    teams = {team.team: team for team in report.teams}
    # gamma: 805 (0.375), 806 (0.25), 809 (0.625), 810 (0.125), one GPU each, equal profiled seconds
    assert teams["gamma"].mean("sm_active") == pytest.approx((0.375 + 0.25 + 0.625 + 0.125) / 4)
    assert teams["gamma"].band == "ineffective"
    assert teams["gamma"].band_jobs == {"effective": 0, "moderate": 1, "ineffective": 3, "not measured": 0}
    assert teams["gamma"].inefficient_jobs == 2
    assert teams["beta"].band_jobs["not measured"] == 1
    # beta's profiled share: 803 and 804 profiled, 808 not (same seconds each)
    assert teams["beta"].profiled_share == pytest.approx(2 / 3)
    assert sum(t.band_costs["effective"] for t in report.teams) == next(
        job.allocated_cost for job in report.jobs if job.job_id == "807"
    )


def test_team_filter_and_thresholds(loaded) -> None:  # type: ignore[no-untyped-def]
    report = _report(loaded, team="beta")
    assert {job.job_id for job in report.jobs} == {"803", "804", "808"}
    strict = _report(loaded, policy=EfficiencyPolicy(busy_utilization_ratio=0.92))
    assert {job.job_id for job in strict.inefficient} == {"801"}


def test_unmeasured_fields_never_hold() -> None:
    policy = EfficiencyPolicy()
    assert judge(JobFacts({"sm_active": 0.2}), policy).key == "unexplained"
    # DRAM busy but tensor not measured: memory-bound cannot be judged
    assert judge(JobFacts({"sm_active": 0.2, "dram_active": 0.9}), policy).key == "unexplained"
    # a saw-tooth over two hours only is not enough
    facts = JobFacts({"sm_active": 0.2}, (0.1, 0.4))
    assert facts.sawtooth() == pytest.approx(0.6) and judge(facts, policy).key == "unexplained"


def test_policy_refuses_bad_thresholds() -> None:
    with pytest.raises(ValueError, match="effective_ratio"):
        EfficiencyPolicy(effective_ratio=0.4, ineffective_ratio=0.5)
    with pytest.raises(ValueError, match="dram_high_ratio"):
        EfficiencyPolicy(dram_high_ratio=1.5)


def test_rule_table_is_the_docs() -> None:
    table = rule_table()
    assert table in (ROOT / "docs" / "efficiency.md").read_text()
    assert len(table.splitlines()) == len(RULES) + 2
