"""Every dashboard page renders with Streamlit's AppTest, on seeded data and on an empty database."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from finops.costmodel import CENT
from finops.db import make_engine, session_factory, upgrade
from finops.report import cost_report, fleet_summary
from finops.timeutil import utc_now
from tests import scenario

APP = str(Path(__file__).resolve().parents[1] / "dashboards" / "app.py")
PAGES = ("views/overview.py", "views/teams.py", "views/idle.py")


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'dash.sqlite'}"
    monkeypatch.setenv("FINOPS_DATABASE_URL", url)
    upgrade(make_engine(url))
    return url


def _run(page: str) -> AppTest:
    app = AppTest.from_file(APP, default_timeout=60)
    app.switch_page(page)
    return app.run()


@pytest.mark.parametrize("page", PAGES)
def test_pages_render_on_an_empty_database(database: str, page: str) -> None:
    app = _run(page)
    assert not app.exception


def test_overview_shows_the_report_numbers(database: str) -> None:
    scenario.seed_dashboard_database(database)
    app = _run("views/overview.py")
    assert not app.exception
    now = utc_now().replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    with session_factory(make_engine(database))() as session:
        summary = fleet_summary(cost_report(session, now - timedelta(days=7), now, "team"))
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["GPU capacity cost"] == f"{summary.capacity_cost.quantize(CENT):,} USD"
    assert metrics["Idle cost (waste)"] == f"{summary.idle_cost.quantize(CENT):,} USD"
    assert "alpha" in app.dataframe[0].value["team"].tolist()


def test_teams_and_idle_pages_list_the_seeded_rows(database: str) -> None:
    scenario.seed_dashboard_database(database)
    teams = _run("views/teams.py")
    assert not teams.exception
    assert set(teams.dataframe[0].value["team"]) == {"alpha", "__unmapped__", "__unallocated__"}
    idle = _run("views/idle.py")
    assert not idle.exception
    assert idle.dataframe[0].value["job"].tolist() == ["501"]
