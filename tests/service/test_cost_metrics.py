"""The service's cost series: values equal the ledger report, budgets and freshness; promtool-clean names."""

from __future__ import annotations

import subprocess
from datetime import timedelta
from decimal import Decimal

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from finops.analysis.budgets import set_budget
from finops.analysis.report import cost_report
from finops.service.cost_metrics import CostMetrics
from finops.timeutil import to_epoch, utc_now
from tests.support.environment import debian_binary


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_cost_series_match_the_ledger(loaded) -> None:  # type: ignore[no-untyped-def]
    sessions, t0, rate, _ = loaded
    with sessions.begin() as session:
        set_budget(session, "alpha", rate * 3, utc_now(), "USD", actor="system:test")
        report = {row.key: row for row in cost_report(session, t0 - timedelta(days=1), utc_now(), "team")}
    registry = CollectorRegistry()
    metrics = CostMetrics(registry)
    metrics.refresh(sessions)
    text = generate_latest(registry).decode()
    samples = _samples(text)
    for team, row in report.items():
        key = ("gpufinops_team_allocated_cost_total", (("currency", "USD"), ("team", team)))
        assert samples[key] == pytest.approx(float(row.allocated_cost))
        assert samples["gpufinops_team_gpu_seconds_total", (("team", team),)] == row.allocated_gpu_seconds
    alpha_ratio = samples["gpufinops_budget_used_ratio", (("project", ""), ("team", "alpha"))]
    in_month = report["alpha"].allocated_cost if t0.month == utc_now().month else Decimal(0)
    assert alpha_ratio == pytest.approx(float(in_month / (rate * 3)))
    newest = samples["gpufinops_newest_sample_timestamp_seconds", ()]
    assert newest == to_epoch(t0 + timedelta(minutes=119))
    assert "job" not in text  # low cardinality: no job ids


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
