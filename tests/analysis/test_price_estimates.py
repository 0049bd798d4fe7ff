"""The cost report names the prices that rest on an estimate (a catalog source marked ``estimate: true``): the
scenario slice (:mod:`tests.support.scenario`) with GPU 1 an MI250X, whose on-demand price cites an undated listing
dated by assumption, and GPU 0 an H100, whose price cites its source."""

from __future__ import annotations

import json
from datetime import timedelta

from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from finops.analysis.price_estimates import estimated_prices
from finops.cli import app
from finops.pricing.catalog import load_catalog
from tests.support import scenario, unpriced

MI250X = "AMD Instinct MI250X"


def test_report_names_the_prices_that_rest_on_an_estimate(database_url: str, sessions: sessionmaker[Session]) -> None:
    t0 = scenario.start_hour()
    with sessions.begin() as session:
        unpriced.load(session, t0, model=MI250X)
    runner = CliRunner()
    env = {"FINOPS_DATABASE_URL": database_url}
    assert runner.invoke(app, ["rollup"], env=env).exit_code == 0
    end = t0 + timedelta(hours=2)
    with sessions() as session:
        found = estimated_prices(session, load_catalog(), t0, end)
        none_before = estimated_prices(session, load_catalog(), t0 - timedelta(hours=5), t0)
    assert [(e.model, e.pricing_model) for e in found] == [("MI250X", "on-demand")]
    assert found[0].sources == ("https://gpu.blog/gpus/instinct-mi250x-mi250x",)
    assert none_before == []  # no ledger hours there: nothing to name

    period = ["report", "--start", t0.isoformat(), "--end", end.isoformat()]
    table = runner.invoke(app, period, env=env)
    assert table.exit_code == 0, table.output
    notes = [line for line in table.stdout.splitlines() if line.startswith("estimate:")]
    assert len(notes) == 1 and "on-demand price of MI250X" in notes[0] and "H100" not in notes[0]
    as_json = runner.invoke(app, [*period, "--by", "gpu_model", "--format", "json"], env=env)
    assert as_json.exit_code == 0, as_json.output
    rows = json.loads(as_json.stdout)
    assert rows and all("price_estimates" not in row for row in rows)  # JSON stays the rows; the note is on stderr
    assert "on-demand price of MI250X rests on an estimate" in as_json.stderr
