"""``gpu-finops prices``: import a catalog (only the changed dates re-priced), list it, assign pricing models;
a broken catalog is refused with the file and field named and nothing changes."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from finops.analysis.idle import IdlePolicy
from finops.analysis.report import cost_report
from finops.cli import app
from finops.db.ledger_tables import DirtyHour
from finops.db.models import PricingRule
from finops.pricing.catalog import DEFAULT_CATALOG, Pricing, PricingModel, load_catalog, parse_catalog
from finops.pricing.store import catalog_in_force, earliest_change
from finops.service.scheduler import run_rollup
from finops.timeutil import utc_now
from tests.support import scenario

H100_ON_DEMAND_NOW = "        rate: 6.88"


def _cheaper_catalog(tmp_path: Path) -> tuple[Path, str]:
    """The packaged catalog with an extra H100 on-demand row at 5.00 from yesterday (a list-price cut)."""
    text = DEFAULT_CATALOG.read_text()
    yesterday = (utc_now() - timedelta(days=1)).date()
    marker = "    prices:\n      - pricing_model: on-demand\n        effective_from: 2023-07-26\n"
    assert marker in text
    row = (
        f"      - pricing_model: on-demand\n        effective_from: {yesterday}\n        rate: 5.00\n"
        "        sources:\n          - url: https://example.org/price-cut\n            note: a test's price cut\n"
    )
    path = tmp_path / "catalog.yaml"
    path.write_text(text.replace(marker, "    prices:\n" + row + marker[len("    prices:\n") :], 1))
    return path, str(yesterday)


@pytest.fixture
def cli_env(engine, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FINOPS_DATABASE_URL", engine.url.render_as_string(hide_password=False))
    return CliRunner()


def test_import_reprices_from_the_changed_date(loaded, cli_env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    sessions, t0, _, pricing = loaded
    path, changed_from = _cheaper_catalog(tmp_path)
    assert earliest_change(load_catalog(), parse_catalog(path.read_text(), "x")).isoformat() == changed_from
    result = cli_env.invoke(app, ["prices", "import", str(path), "--no-rollup"])
    assert result.exit_code == 0, result.output
    assert f"re-priced from {changed_from}" in result.output and "rollup: skipped (--no-rollup)" in result.output
    with sessions() as session:
        assert catalog_in_force(session, load_catalog()).rate(scenario.MODEL, PricingModel.ON_DEMAND, t0) == 5
        assert session.scalars(select(DirtyHour.hour).order_by(DirtyHour.hour)).first() <= t0
    run_rollup(sessions, pricing, IdlePolicy())
    with sessions() as session:
        total = sum(row.allocated_cost for row in cost_report(session, t0, t0 + timedelta(hours=2)))
    assert total == Decimal("20.000000")  # 2 GPUs × 2 h × 5.00
    listed = cli_env.invoke(app, ["prices", "list"])
    assert "5.0000" in listed.output and "https://example.org/price-cut" in listed.output


def test_broken_catalog_is_refused_naming_the_field(cli_env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "broken.yaml"
    path.write_text(DEFAULT_CATALOG.read_text().replace(H100_ON_DEMAND_NOW, "        rate: -1", 1))
    result = cli_env.invoke(app, ["prices", "import", str(path)])
    assert result.exit_code == 2
    assert str(path) in result.output and "rate" in result.output


def test_assign_and_unassign_pricing_models(cli_env, sessions) -> None:  # type: ignore[no-untyped-def]
    assert cli_env.invoke(app, ["prices", "assign", "spot", "--node-label", "capacity=spot"]).exit_code == 0
    assert cli_env.invoke(app, ["prices", "assign", "on-prem", "--partition", "dgx"]).exit_code == 0
    bad = cli_env.invoke(app, ["prices", "assign", "spot", "--node", "a", "--partition", "b"])
    assert bad.exit_code == 2
    assert cli_env.invoke(app, ["prices", "assign", "free", "--node", "a"]).exit_code == 2
    listed = cli_env.invoke(app, ["prices", "rules"]).output
    assert listed.index("node_label") < listed.index("partition")
    assert cli_env.invoke(app, ["prices", "unassign", "--partition", "dgx"]).exit_code == 0
    with sessions() as session:
        rules = session.execute(select(PricingRule.selector, PricingRule.key, PricingRule.value)).all()
    assert rules == [("node_label", "capacity", "spot")]


def test_catalog_prices_list_matches_pricing(cli_env) -> None:  # type: ignore[no-untyped-def]
    output = cli_env.invoke(app, ["prices", "list"]).output
    rate = Pricing(load_catalog(), PricingModel.ON_DEMAND).catalog.rate(
        scenario.MODEL, PricingModel.ON_DEMAND, utc_now()
    )
    assert f"{rate:.4f}" in output


def test_rows_resting_on_an_estimate_say_so(cli_env) -> None:  # type: ignore[no-untyped-def]
    lines = cli_env.invoke(app, ["prices", "list"]).output.splitlines()
    mi250x = {line.split()[1]: line for line in lines if line.startswith("MI250X ")}
    assert mi250x["on-demand"].endswith("(estimate)") and mi250x["on-prem"].endswith("(estimate)")
    mi300x = [line for line in lines if line.startswith("MI300X ")]
    assert mi300x and not any(line.endswith("(estimate)") for line in mi300x)
    assert [line.split()[3:] for line in lines if line.startswith("MI210 ")] == [
        ["unpriced", "no", "price", "row", "in", "the", "catalog"]
    ]
