"""The service's cost series: values equal the ledger report, budgets and freshness; promtool-clean names."""

from __future__ import annotations

import subprocess
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from finops.analysis.budgets import set_budget
from finops.analysis.report import cost_report
from finops.ingest.readings import Ingestor
from finops.jobs.slurm_import import import_sacct
from finops.jobs.teams import map_account
from finops.ledger.rollup import rollup
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.service import cost_metrics
from finops.service.cost_metrics import CostMetrics
from finops.timeutil import month_start, to_epoch
from tests.support import activity_scenario, scenario
from tests.support.environment import debian_binary


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _stop_clock(monkeypatch: pytest.MonkeyPatch, t0: datetime) -> datetime:
    """The series' clock stopped at the end of the slice starting at ``t0``, in its month; that instant."""
    now = scenario.slice_end(t0)
    monkeypatch.setattr(cost_metrics, "utc_now", lambda: now)
    return now


def test_cost_series_match_the_ledger(loaded, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    sessions, t0, rate, _ = loaded
    now = _stop_clock(monkeypatch, t0)
    with sessions.begin() as session:
        set_budget(session, "alpha", rate * 3, now, "USD", actor="system:test")
        report = {row.key: row for row in cost_report(session, t0 - timedelta(days=1), now, "team")}
    registry = CollectorRegistry()
    metrics = CostMetrics(registry)
    metrics.refresh(sessions)
    text = generate_latest(registry).decode()
    samples = _samples(text)
    for team, row in report.items():
        key = ("gpufinops_team_allocated_cost", (("currency", "USD"), ("team", team)))
        assert samples[key] == pytest.approx(float(row.allocated_cost))
        assert samples["gpufinops_team_gpu_seconds", (("team", team),)] == row.allocated_gpu_seconds
    alpha_ratio = samples["gpufinops_budget_used_ratio", (("project", ""), ("team", "alpha"))]
    assert alpha_ratio == pytest.approx(float(report["alpha"].allocated_cost / (rate * 3)))
    newest = samples["gpufinops_newest_sample_timestamp_seconds", ()]
    assert newest == to_epoch(t0 + timedelta(minutes=119))
    assert "job" not in text  # low cardinality: no job ids


def test_restated_hours_move_the_cost_series_down_as_gauges(sessions, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Hours built before their jobs were imported are all ``__unallocated__``; the import restates them, and that
    team's cost and GPU-seconds fall (4 r to r, 4 to 1 GPU-hours: the scenario's hand-computed split) while alpha's
    appear. A Prometheus counter that falls reads as a reset to ``increase()``, which would add the whole sum again:
    the series are typed gauges."""
    t0 = scenario.start_hour()
    _stop_clock(monkeypatch, t0)
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    rate = pricing.catalog.rate(scenario.MODEL, PricingModel.ON_DEMAND, t0)
    until = to_epoch(scenario.slice_end(t0))
    with sessions.begin() as session:
        map_account(session, "acct-a", "alpha", actor="system:test")
        Ingestor().store(session, scenario.batch(t0))
        rollup(session, pricing, until)
    registry = CollectorRegistry()
    metrics = CostMetrics(registry)
    metrics.refresh(sessions)
    before = _samples(generate_latest(registry).decode())
    with sessions.begin() as session:
        assert import_sacct(session, scenario.sacct_lines(t0), source="scenario").errors == []
        rollup(session, pricing, until)
    metrics.refresh(sessions)
    text = generate_latest(registry).decode()
    after = _samples(text)
    unallocated = ("gpufinops_team_allocated_cost", (("currency", "USD"), ("team", "__unallocated__")))
    assert before[unallocated] == pytest.approx(float(4 * rate))
    assert after[unallocated] == pytest.approx(float(rate))
    seconds = ("gpufinops_team_gpu_seconds", (("team", "__unallocated__"),))
    assert (before[seconds], after[seconds]) == (4 * 3600, 3600)
    alpha = ("gpufinops_team_allocated_cost", (("currency", "USD"), ("team", "alpha")))
    assert alpha not in before and after[alpha] == pytest.approx(float(rate * Decimal("1.5")))
    types = {family.name: family.type for family in text_string_to_metric_families(text)}
    for name in ("allocated_cost", "used_cost", "idle_cost", "energy_cost", "gpu_seconds", "used_gpu_seconds"):
        assert types[f"gpufinops_team_{name}"] == "gauge", name
    assert "_total" not in "".join(name for name in types if name.startswith("gpufinops_team_"))


def test_promtool_accepts_the_cost_series(loaded, tmp_path) -> None:  # type: ignore[no-untyped-def]
    sessions, _, _, _ = loaded
    registry = CollectorRegistry()
    CostMetrics(registry).refresh(sessions)
    result = subprocess.run(
        [debian_binary("promtool"), "check", "metrics"],
        input=generate_latest(registry).decode(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_activity_series_only_for_teams_that_measured_it(sessions, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """tests/support/activity_scenario.py: team vision is profiled (SM-active cost, profiled seconds, this month's
    mean activity equal to the cost report's), team nlp and the unallocated capacity have no activity series at
    all (absent, not 0); promtool accepts the series."""
    t0 = scenario.start_hour()
    now = _stop_clock(monkeypatch, t0)
    catalog = load_catalog()
    with sessions.begin() as session:
        activity_scenario.build(session, t0, Pricing(catalog, PricingModel.ON_DEMAND))
    registry = CollectorRegistry()
    CostMetrics(registry).refresh(sessions)
    text = generate_latest(registry).decode()
    samples = _samples(text)
    costs = activity_scenario.sm_active_costs(catalog.rate(activity_scenario.MODEL, PricingModel.ON_DEMAND, t0))
    vision = (("team", "vision"),)
    cost = samples["gpufinops_team_sm_active_cost", (("currency", "USD"), *vision)]
    assert Decimal(repr(cost)) == costs["601"] + costs["603"]  # type: ignore[operator]
    assert samples["gpufinops_team_profiled_gpu_seconds", vision] == 9000
    with sessions() as session:
        month = {row.key: row for row in cost_report(session, month_start(now), now + timedelta(hours=1), "team")}
    for name in ("sm_active", "tensor_active", "dram_active"):
        expected = month["vision"].activity_ratio(f"{name}_ratio")
        assert samples[f"gpufinops_team_{name}_ratio", vision] == pytest.approx(expected)
    assert samples["gpufinops_team_sm_active_ratio", vision] == pytest.approx(0.525), "the hand-computed means"
    assert samples["gpufinops_team_dram_active_ratio", vision] == pytest.approx(0.25)
    activity = [key for key in samples if "active" in key[0] or "profiled" in key[0]]
    assert len(activity) == 5 and all(key[1][-1] == ("team", "vision") for key in activity)
    for team in ("nlp", "__unallocated__"):  # held or not, but not profiled: no series, rather than a 0
        assert f'team="{team}"' in text and not any(dict(labels).get("team") == team for _, labels in activity)
    result = subprocess.run(
        [debian_binary("promtool"), "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
