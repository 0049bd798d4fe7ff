"""The dashboard names the prices that rest on an estimate (a catalog source marked ``estimate: true``), as the cost
report and ``GET /api/v1/costs`` do: the Overview warns of those behind the period's costs (the scenario slice with
GPU 1 an MI250X, whose on-demand price cites an undated listing: tests/support/unpriced.py), and the Prices page
marks each row resting on one and names the models without a price row."""

from __future__ import annotations

import pytest

from finops.db.engine import make_engine, session_factory
from tests.dashboards.apptest import run_page
from tests.support import scenario, unpriced


@pytest.fixture
def database(database: str) -> str:
    """The pages' database holding the slice with GPU 1 an MI250X, rolled up."""
    with session_factory(make_engine(database)).begin() as session:
        unpriced.load_rolled_up(session, scenario.start_hour(), model="AMD Instinct MI250X")
    return database


def test_overview_warns_of_the_estimated_price_behind_its_costs(database: str) -> None:
    overview = run_page("views/overview.py", period="7d")
    (warning,) = [w.value for w in overview.warning if "estimate" in w.value]
    assert "on-demand price of MI250X rests on an estimate" in warning
    assert "https://gpu.blog/gpus/instinct-mi250x-mi250x" in warning and "H100" not in warning


def test_prices_page_marks_the_estimates_and_names_the_unpriced_models(database: str) -> None:
    page = run_page("views/prices.py")
    frame = page.dataframe[0].value
    marked = dict(zip(zip(frame["model"], frame["pricing model"], strict=True), frame["estimate"], strict=False))
    assert marked["MI250X", "on-demand"] and marked["MI250X", "on-prem"] and marked["MI250", "on-demand"]
    assert not any(flag for (model, _), flag in marked.items() if model in ("H100-SXM-80GB", "MI300X"))
    (warning,) = [w.value for w in page.warning if "estimate" in w.value]
    assert "MI250X (on-demand)" in warning and "gpu-finops prices import" in warning
    (info,) = [i.value for i in page.info if "No price row" in i.value]
    assert "MI210" in info and "MI210" not in set(frame["model"])
