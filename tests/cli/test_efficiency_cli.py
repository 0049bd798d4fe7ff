"""``gpu-finops report --by efficiency`` and ``GET /api/v1/efficiency`` on the efficiency slice (both databases,
tests/support/efficiency_scenario.py): the same JSON from both; the table names each band and bottleneck; CSV has the
busy-but-inefficient jobs; a viewer reads every team, a team token only its own (403 for another), without a token
401; the thresholds are the FINOPS_EFFICIENCY_* settings."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import httpx
import orjson
from typer.testing import CliRunner, Result

from finops.access.api_tokens import create_token
from finops.cli import app
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.savings.efficiency_policy import EfficiencyPolicy
from finops.timeutil import utc_now
from finops.web.app import create_app
from tests.support import efficiency_scenario as es
from tests.support.servers import running

TOKEN = "efficiency-token"
INEFFICIENT = ["802", "801", "803", "804", "805", "806"]


def test_report_by_efficiency_and_api(sessions) -> None:  # type: ignore[no-untyped-def]
    with sessions.begin() as session:
        t0 = es.load(session, Pricing(load_catalog(), PricingModel.ON_DEMAND))
        tokens = {
            name: create_token(session, role, utc_now(), team=team, name=name, actor="system:test")[1]
            for name, role, team in (("viewer", "viewer", None), ("beta", "team", "beta"))
        }
    url = sessions.kw["bind"].url.render_as_string(hide_password=False)
    period = {"start": t0.isoformat(), "end": (t0 + timedelta(hours=es.HOURS)).isoformat()}

    def command(*args: str, **env: str) -> Result:
        options = ["--start", period["start"], "--end", period["end"], "--by", "efficiency"]
        return CliRunner().invoke(app, ["report", *options, *args], env={"FINOPS_DATABASE_URL": url, **env})

    listed = command("--format", "json")
    assert listed.exit_code == 0, listed.output
    body = orjson.loads(listed.stdout)
    assert [job["job_id"] for job in body["inefficient"]] == INEFFICIENT
    assert body["inefficient"][1]["bottleneck"] == "memory_bound"
    assert body["inefficient"][1]["evidence"] == "DRAM active 0.75, SM active 0.20, tensor active 0.00"
    assert body["thresholds"] == {"effective": 0.8, "ineffective": 0.5, "busy_utilization": 0.8}
    teams = {team["team"]: team for team in body["teams"]}
    assert teams["beta"]["not_measured_jobs"] == 1 and teams["alpha"]["effective_jobs"] == 1
    assert teams["gamma"]["band"] == "ineffective" and teams["gamma"]["sm_active_ratio"] == 0.3438

    table = command()
    assert table.exit_code == 0, table.output
    assert "memory-bound: DRAM active 0.75, SM active 0.20" in table.stdout
    assert "communication-bound: 2.0 GB/s InfiniBand traffic received" in table.stdout
    assert "not measured" in table.stdout  # beta's unprofiled job 808 in the bands

    rows = list(csv.DictReader(io.StringIO(command("--format", "csv").stdout)))
    assert [row["job_id"] for row in rows] == INEFFICIENT and rows[0]["bottleneck"] == "communication_bound"

    strict = command("--format", "json", FINOPS_EFFICIENCY_BUSY_UTILIZATION_RATIO="0.92")
    assert [job["job_id"] for job in orjson.loads(strict.stdout)["inefficient"]] == ["801"]
    refused = command("--format", "json", FINOPS_EFFICIENCY_EFFECTIVE_RATIO="0.3")
    assert refused.exit_code != 0

    with running(create_app(sessions, "ingest-only", api_token=TOKEN, efficiency=EfficiencyPolicy())) as base:

        def get(who: str | None, **params: str) -> httpx.Response:
            headers = {} if who is None else {"Authorization": f"Bearer {TOKEN if who == 'admin' else tokens[who]}"}
            return httpx.get(f"{base}/api/v1/efficiency", params={**period, **params}, headers=headers)

        viewer = get("viewer")
        assert viewer.status_code == 200, viewer.text
        assert viewer.json()["teams"] == body["teams"] and viewer.json()["inefficient"] == body["inefficient"]
        assert get("admin", team="alpha").json()["inefficient"][0]["job_id"] == "802"
        beta = get("beta")
        assert beta.status_code == 200
        assert [t["team"] for t in beta.json()["teams"]] == ["beta"]
        assert [j["job_id"] for j in beta.json()["inefficient"]] == ["803", "804"]
        assert get("beta", team="alpha").status_code == 403
        assert get(None).status_code == 401
        answered = get("viewer", format="csv")
        assert answered.headers["content-type"].startswith("text/csv")
        assert [row["job_id"] for row in csv.DictReader(io.StringIO(answered.text))] == INEFFICIENT
        assert get("viewer", start="not-a-time").status_code in (400, 422)
