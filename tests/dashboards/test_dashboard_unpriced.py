"""The dashboard's Overview and Data quality pages show the GPU-hours whose model has no price, by model and with
the fix, instead of silently leaving them out of the costs (tests/support/unpriced.py: one priced and one unpriced
GPU)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from finops.analysis.idle import IdlePolicy, detect_idle
from finops.db.engine import make_engine, session_factory
from tests.dashboards.apptest import page_database, run_page
from tests.support import scenario, unpriced

MODEL = unpriced.UNPRICED_MODEL


@pytest.fixture
def database(database: str) -> str:
    """The pages' database holding the slice, rolled up."""
    with session_factory(make_engine(database)).begin() as session:
        unpriced.load_rolled_up(session, scenario.start_hour())
    return database


def test_overview_warns_of_the_unpriced_gpu_hours(database: str) -> None:
    overview = run_page("views/overview.py", period="7d")
    (warning,) = [w.value for w in overview.warning if "no price" in w.value]
    assert "2.00 GPU-hours" in warning and MODEL in warning and "gpu-finops prices import" in warning


def test_quality_page_lists_the_unpriced_gpu_hours_by_model(database: str) -> None:
    quality = run_page("views/quality.py", period="7d")
    assert {m.label: m.value for m in quality.metric}["GPU-hours counted but not costed"] == "2.00 GPU-h"
    (frame,) = [f.value for f in quality.dataframe if "fix" in f.value.columns]
    assert frame["model"].tolist() == [MODEL] and frame["GPU-hours"].tolist() == [2.0]
    assert "set the node's model" in frame["fix"][0]


def test_idle_page_shows_the_unpriced_episode_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = page_database(tmp_path / "idle.sqlite", monkeypatch)
    t0 = scenario.start_hour()
    with session_factory(make_engine(url)).begin() as session:
        # the slice's idle episode lies on the unpriced GPU
        pricing = unpriced.load_rolled_up(session, t0, unpriced_gpu="0")
        assert detect_idle(session, t0, t0 + timedelta(hours=2), IdlePolicy(), pricing) == 1
    page = run_page("views/idle.py", period="7d")
    assert {m.label: m.value for m in page.metric}["Idle-episode cost"] == "unpriced"
    (warning,) = [w.value for w in page.warning if "no price" in w.value]
    assert "0.50 GPU-hours" in warning and MODEL in warning and "gpu-finops prices import" in warning
    (frame,) = [f.value for f in page.dataframe if "unpriced_model" in f.value.columns]
    assert frame["unpriced_model"].tolist() == [MODEL] and frame["episode_cost"].isna().all()


def test_teams_page_shows_a_team_whose_gpu_hours_are_all_unpriced_without_a_cost(database: str) -> None:
    teams = run_page("views/teams.py", period="7d")
    (frame,) = [f.value for f in teams.dataframe if "energy_kwh" in f.value.columns]
    unknown = frame[frame["allocated_cost"].isna()]
    assert unknown["team"].tolist() == ["__unmapped__"], "unknown, not 0 (and no error making the table)"
    assert unknown["unpriced_gpu_hours"].tolist() == unknown["allocated_gpu_hours"].tolist() == [1.5]
