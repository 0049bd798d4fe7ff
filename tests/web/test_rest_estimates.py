"""``GET /api/v1/costs`` names the prices behind its costs that rest on an estimate, as the cost report does: the
scenario slice with GPU 1 an MI250X (tests/support/unpriced.py), whose on-demand price cites an undated listing
(``estimate: true`` in the packaged catalog), and GPU 0 an H100, whose price cites its source."""

from __future__ import annotations

from datetime import timedelta

import httpx
from sqlalchemy.orm import Session, sessionmaker

from finops.web.app import create_app
from finops.web.cost_schema import CostsOut
from tests.support import scenario, unpriced
from tests.support.servers import running

TOKEN = "estimate-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LISTING = "https://gpu.blog/gpus/instinct-mi250x-mi250x"


def test_costs_name_the_prices_resting_on_an_estimate(sessions: sessionmaker[Session]) -> None:
    t0 = scenario.start_hour()
    with sessions.begin() as session:
        unpriced.load_rolled_up(session, t0, model="AMD Instinct MI250X")
    period = {"start": t0.isoformat(), "end": (t0 + timedelta(hours=2)).isoformat(), "group_by": "gpu_model"}
    before = {"start": (t0 - timedelta(hours=4)).isoformat(), "end": t0.isoformat()}
    with running(create_app(sessions, "ingest-only", api_token=TOKEN)) as url:
        body = httpx.get(f"{url}/api/v1/costs", params=period, headers=AUTH).json()
        as_csv = httpx.get(f"{url}/api/v1/costs", params={**period, "format": "csv"}, headers=AUTH)
        empty = httpx.get(f"{url}/api/v1/costs", params=before, headers=AUTH).json()
    CostsOut.model_validate(body)
    (estimate,) = body["price_estimates"]
    assert (estimate["model"], estimate["pricing_model"], estimate["sources"]) == ("MI250X", "on-demand", [LISTING])
    assert "on-demand price of MI250X rests on an estimate" in estimate["note"] and "prices import" in estimate["note"]
    assert {row["gpu_model"] for row in body["rows"]} >= {"MI250X", "H100-SXM-80GB"}, "the H100 is named nowhere"
    assert as_csv.headers["X-Price-Estimates"] == f"MI250X on-demand {LISTING}"
    assert "X-Unpriced-GPU-Hours" not in as_csv.headers
    assert empty["price_estimates"] == [], "no ledger hours there: nothing rests on an estimate"
