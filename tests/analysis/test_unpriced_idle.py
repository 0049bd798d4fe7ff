"""An idle episode on a GPU whose model has no price is stored unpriced (cost NULL, not 0) and shown so, with the
model and the fix, by :func:`list_episodes`, the REST API and ``gpu-finops idle list``; a catalog import that prices
the model gives the episode its cost at the next rollup (both databases; tests/support/unpriced.py with GPU 0, the
one with the idle episode, unpriced)."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal

import httpx
import orjson
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from finops.analysis.idle import IdlePolicy, episode_totals, list_episodes
from finops.cli import app
from finops.ledger.costmodel import capacity_cost
from finops.ledger.rollup_result import unpriced_fix
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.pricing.store import import_catalog
from finops.service.scheduler import run_rollup
from finops.web.app import create_app
from tests.support import scenario, unpriced
from tests.support.servers import running

TOKEN = "unpriced-idle-token"
MODEL = unpriced.UNPRICED_MODEL


def test_an_idle_episode_on_an_unpriced_gpu_is_unpriced_until_a_price_is_imported(
    sessions: sessionmaker[Session],
) -> None:
    t0 = scenario.start_hour()
    period = (t0, t0 + timedelta(hours=2))
    configured = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    with sessions.begin() as session:
        unpriced.load(session, t0, unpriced_gpu="0")
    _, stored = run_rollup(sessions, configured, IdlePolicy())
    assert stored == 1

    with sessions() as session:
        assert session.execute(text("SELECT cost FROM idle_episodes")).scalars().all() == [None], "NULL, not 0"
        (episode,) = list_episodes(session, *period)
    assert (episode.job_id, episode.team, episode.gpu_index, episode.hours) == ("501", "alpha", 0, 0.5)
    assert episode.cost is None and episode.model == MODEL and episode.unpriced_model == MODEL
    shown = episode.as_dict()
    assert shown["cost"] is None and shown["unpriced_model"] == MODEL and shown["unpriced_fix"] == unpriced_fix(MODEL)
    (totals,) = episode_totals([episode])
    assert totals.all_unpriced and totals.cost == 0 and totals.unpriced_gpu_hours == {MODEL: 0.5}

    params = {"start": period[0].isoformat(), "end": period[1].isoformat()}
    with running(create_app(sessions, "ingest-only", api_token=TOKEN)) as base:
        response = httpx.get(
            f"{base}/api/v1/idle-episodes", params=params, headers={"Authorization": f"Bearer {TOKEN}"}
        )
    assert response.status_code == 200, response.text
    assert response.json() == [shown] and response.json()[0]["cost"] is None

    url = sessions.kw["bind"].url.render_as_string(hide_password=False)

    def idle_list(*args: str) -> str:
        result = CliRunner().invoke(
            app, ["idle", "list", "--start", params["start"], "--end", params["end"], *args],
            env={"FINOPS_DATABASE_URL": url},
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        return result.stdout

    assert orjson.loads(idle_list("--format", "json")) == [shown]
    (row,) = csv.DictReader(io.StringIO(idle_list("--format", "csv")))
    assert (row["cost"], row["unpriced_model"], row["unpriced_fix"]) == ("", MODEL, unpriced_fix(MODEL))
    table = idle_list().splitlines()
    assert table[1].split()[:5] == ["gpu-a-01", "0", "501", "alice", "alpha"]
    assert table[1].endswith(f"unpriced ({MODEL})  unexplained") and "0.00" not in table[1], "the reason comes last"
    assert table[-2] == "1 episode: 0.50 GPU-hours, unpriced"
    assert table[-1] == f"unpriced: 0.50 GPU-hours of {MODEL!r}, which has no price: {unpriced_fix(MODEL)}"

    with sessions.begin() as session:
        assert import_catalog(
            session, unpriced.catalog_with_model(), "with-acme.yaml", configured.catalog, actor="system:test"
        )
    run_rollup(sessions, configured, IdlePolicy())
    with sessions() as session:
        (priced,) = list_episodes(session, *period)
    assert priced.cost == capacity_cost(Decimal(unpriced.ADDED_RATE), 1800) == Decimal("1.25")
    assert priced.unpriced_model is None and priced.as_dict()["unpriced_fix"] is None
    assert idle_list().splitlines()[-1] == "1 episode: 0.50 GPU-hours, 1.25 USD"
