"""The Savings page with Streamlit's AppTest, on the right-sizing slice (tests/support/rightsizing_scenario.py: teams
alpha and beta, jobs with right-sizing findings worked out by hand): the idle cost by reason is
``idle_cost_by_reason``'s, the right-sizing rows are ``rightsizing``'s, the commitment curve's marked optimum is
``commitment_report``'s; someone who sees one team sees only theirs and no fleet-wide commitment; an empty database
says why each part is empty; unpriced GPU-hours are shown with their fix, and a model the commitments cannot analyse
is listed with its fix."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pandas as pd
import pytest
import streamlit as st
from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df
from streamlit.testing.v1 import AppTest

from dashboards import login
from dashboards.access import Access
from dashboards.filters import period_bounds
from finops.analysis.waste import NO_READING
from finops.db.engine import make_engine, session_factory
from finops.ledger.costmodel import CENT
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.savings.commitments import commitment_report
from finops.savings.efficiency import efficiency_report
from finops.savings.rightsizing import rightsizing
from finops.savings.rightsizing_report import rightsizing_dicts
from finops.savings.waste_costs import idle_cost_by_reason
from finops.settings.dashboard import DashboardSettings
from tests.dashboards.apptest import run_page
from tests.support import efficiency_scenario, rightsizing_scenario, scenario, unpriced
from tests.support.two_clusters import seed_two_clusters

PAGE = "views/savings.py"


@pytest.fixture
def seeded(database: str) -> str:
    with session_factory(make_engine(database)).begin() as session:
        rightsizing_scenario.load(session, Pricing(load_catalog(), PricingModel.ON_DEMAND))
    return database


def _run(**params: str) -> AppTest:
    return run_page(PAGE, timeout=120, **params)


def _frame_with(app: AppTest, *columns: str) -> pd.DataFrame:
    """The one table with all of ``columns``."""
    (frame,) = [f.value for f in app.dataframe if set(columns) <= set(f.value.columns)]
    return frame


def _has_table_with(app: AppTest, column: str) -> bool:
    return any(column in f.value.columns for f in app.dataframe)


def _exact(app: AppTest) -> dict[str, str]:
    """The exact value of each headline figure, from its tooltip (``Exact: 1,234.57 USD``)."""
    return {m.label: m.proto.help.removeprefix("Exact: ") for m in app.metric if m.proto.help}


def _optimum(app: AppTest) -> dict[str, Any]:
    """The marked point of the page's commitment curve: the one row of the chart's dataset of its optimum layer,
    which the spec's layers name."""
    (chart,) = [c.proto for c in app.get("vega_lite_chart") if "optimum-" in c.proto.spec]
    layers = json.loads(chart.spec)["layer"]
    assert any(layer["mark"]["type"] == "point" and layer["data"]["name"].startswith("optimum-") for layer in layers)
    (marked,) = [d for d in chart.datasets if d.name.startswith("optimum-")]
    (point,) = convert_arrow_bytes_to_pandas_df(marked.data.data).to_dict("records")
    return point


def _session(url: str) -> Any:
    return session_factory(make_engine(url))()


def test_idle_cost_by_reason_is_idle_cost_by_reasons(seeded: str, now: datetime) -> None:
    app = _run(period="7d")
    start, end = period_bounds("7d", now)
    with _session(seeded) as session:
        rows = idle_cost_by_reason(session, start, end)
    frame = _frame_with(app, "reason", "reason_cost")
    assert {"no reading", "over-requested", "unexplained"} <= set(frame["reason"])
    shown = list(zip(frame["team"], frame["reason"], frame["reason_cost"], frame["reason_gpu_hours"], strict=True))
    expected = [(r.team, r.title, r.cost.quantize(CENT), round(r.gpu_seconds / 3600, 6)) for r in rows]
    assert shown == expected
    total = sum((r.cost for r in rows if r.reason != NO_READING), Decimal(0))
    assert _exact(app)["Idle cost, all reasons"] == f"{total.quantize(CENT):,} USD", "no reading is not idle"
    unread = sum((r.cost for r in rows if r.reason == NO_READING), Decimal(0))
    assert _exact(app)["Held without readings (not idle)"] == f"{unread.quantize(CENT):,} USD"
    assert frame["unpriced_gpu_hours"].sum() == 0 and not [w for w in app.warning if "no price" in w.value]


def test_rightsizing_rows_are_the_findings_with_their_fix(seeded: str, now: datetime) -> None:
    start, end = period_bounds("7d", now)
    with _session(seeded) as session:
        report = rightsizing(
            session, start, end, catalog=load_catalog(), priced_at=now.replace(second=0, microsecond=0)
        )
    app = _run(period="7d")
    frame = _frame_with(app, "job", "fixes")
    assert frame["job"].tolist() == [f.job_id for f in report.findings] == ["701", "706", "702", "704"]
    expected_savings = [None if d["saving"] is None else Decimal(d["saving"]) for d in rightsizing_dicts(report, "job")]
    assert frame["saving"].tolist() == expected_savings
    assert expected_savings[0] > 0 and expected_savings[3] is None, "memory unknown: no saving, not 0"
    fixes = dict(zip(frame["job"], frame["fixes"], strict=True))
    assert fixes["701"] == "#SBATCH --gres=gpu:h100:1"
    assert fixes["706"] == "#SBATCH --gpus=h100:2"
    assert "#SBATCH --gres=gpu:1g.10gb:1" in fixes["702"]
    assert "no memory reading" in frame.set_index("job")["notes"]["704"]
    saving = sum((f.saving or Decimal(0) for f in report.findings), Decimal(0))
    assert _exact(app)["Right-sizing saving"] == f"{saving.quantize(CENT):,} USD"

    by_user = _frame_with(_run(period="7d", by="user"), "user", "jobs")
    expected = rightsizing_dicts(report, "user")
    assert by_user["user"].tolist() == [d["user"] for d in expected] == ["alice", "frank", "bob", "dave"]
    assert by_user["saving"].tolist() == [Decimal(d["saving"]) for d in expected]


def test_commitment_curve_marks_the_commitment_reports_optimum(database: str, now: datetime) -> None:
    seed_two_clusters(database)  # three H100s held 1, 2 and 3 at a time: the least cost is inside the curve
    app = _run(period="7d")
    hour = now.replace(minute=0, second=0, microsecond=0)
    with _session(database) as session:
        report = commitment_report(session, load_catalog(), hour, 7)
    (model,) = report.commitments
    best = model.best
    assert 0 < best.quantity < model.demand.peak_gpus
    assert _optimum(app) == {
        "gpus": best.quantity,
        "cost": float(best.cost),
        "label": f"least cost: {best.quantity} GPUs",
    }
    assert min(model.curve(), key=lambda point: (point[1], point[0])) == (best.quantity, best.cost)
    frame = _frame_with(app, "commit", "saving_per_month")
    assert frame["model"].tolist() == [model.model]
    assert frame["commit"].tolist() == [best.quantity]
    assert frame["saving_per_month"].tolist() == [best.saving_per_month.quantize(CENT)]
    assert _exact(app)["Commitment saving per month"] == f"{best.saving_per_month.quantize(CENT):,} USD"
    (caption,) = [c.value for c in app.caption if c.value.startswith(f"{model.model}: the cost is least")]
    assert f"**{best.quantity} committed GPUs**" in caption
    assert f"{best.saving_per_month.quantize(CENT):,} USD per month" in caption
    window = f"from {report.start:%Y-%m-%d %H:%M} to {report.end:%Y-%m-%d %H:%M} UTC"
    assert any(window in c.value for c in app.caption), "the window the figures are of"


def test_someone_who_sees_one_team_sees_only_theirs(seeded: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def team_gate(settings: DashboardSettings) -> Access:
        access = Access("team", "beta")
        st.session_state["finops_access"] = access
        return access

    monkeypatch.setattr(login, "gate", team_gate)
    app = _run(period="7d", team="alpha")
    assert any("team='alpha' in the URL is ignored" in w.value for w in app.sidebar.warning)
    assert set(_frame_with(app, "reason", "reason_cost")["team"]) == {"beta"}
    assert set(_frame_with(app, "job", "fixes")["team"]) == {"beta"}
    assert not _has_table_with(app, "commit"), "the commitments are the fleet's"
    assert "Commitment saving per month" not in _exact(app)
    assert any("shown to viewers and admins only" in i.value for i in app.info)
    by_team = _frame_with(_run(period="7d", by="team"), "team", "jobs")
    assert by_team["team"].tolist() == ["beta"]


def test_an_empty_database_says_why_each_part_is_empty(database: str) -> None:
    app = _run(period="7d")
    assert not app.dataframe and not app.metric
    infos = [i.value for i in app.info]
    assert any(text.startswith("No job held a GPU in this period") and "gpu-finops rollup" in text for text in infos)
    assert any(text.startswith("No right-sizing findings in this period: 0 jobs") for text in infos)
    assert any(text.startswith("No busy-but-inefficient job in this period (0 jobs examined") for text in infos)
    assert any(text.startswith("No GPU was held by a job in this window") for text in infos)


def test_unpriced_gpu_hours_are_shown_with_their_fix(database: str) -> None:
    t0 = scenario.start_hour()
    with session_factory(make_engine(database)).begin() as session:
        unpriced.load_rolled_up(session, t0)
    app = _run(period="7d")
    frame = _frame_with(app, "reason", "reason_cost")
    unpriced_rows = frame[frame["unpriced_gpu_hours"] > 0]
    assert unpriced_rows["team"].tolist() == ["__unmapped__"], "job 502 on the unpriced GPU"
    assert unpriced_rows["reason_cost"].tolist() == [None], "unknown, not 0"
    (warning,) = [w.value for w in app.warning if "no price" in w.value]
    assert unpriced.UNPRICED_MODEL in warning and "gpu-finops prices import" in warning
    left_out = _frame_with(app, "why", "what_fixes_it")
    assert left_out["model"].tolist() == [unpriced.UNPRICED_MODEL]
    assert left_out["why"].tolist() == ["no price catalogue model covers this GPU name"]
    assert "gpu-finops prices import" in left_out["what_fixes_it"].iloc[0]
    assert any("could not be analysed" in w.value for w in app.warning)


def test_busy_but_inefficient_jobs_with_bottleneck_and_cost(database: str, now: datetime) -> None:
    with session_factory(make_engine(database)).begin() as session:
        t0 = efficiency_scenario.load(session, Pricing(load_catalog(), PricingModel.ON_DEMAND))
    with _session(database) as session:
        report = efficiency_report(session, t0, t0 + timedelta(hours=efficiency_scenario.HOURS))
    app = _run(period="7d")
    frame = _frame_with(app, "bottleneck", "inactive_cost")
    assert frame["job"].tolist() == [job.job_id for job in report.inefficient] == [
        "802", "801", "803", "804", "805", "806"
    ]  # fmt: skip
    shown = frame.set_index("job")
    assert shown["bottleneck"]["801"] == "memory-bound"
    assert shown["evidence"]["801"] == "DRAM active 0.75, SM active 0.20, tensor active 0.00"
    assert shown["band"]["801"] == "ineffective"
    assert set(shown.index).isdisjoint({"807", "808", "809", "810"}), "not busy but inefficient, or not measured"
    expected = [job.inactive_cost.quantize(CENT) for job in report.inefficient if job.inactive_cost is not None]
    assert frame["inactive_cost"].tolist() == expected
    total = sum(expected, Decimal(0))
    assert abs(Decimal(_exact(app)["Inactive cost of busy jobs"].removesuffix(" USD").replace(",", "")) - total) < (
        Decimal("0.02")
    )
