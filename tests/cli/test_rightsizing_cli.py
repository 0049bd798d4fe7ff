"""``gpu-finops rightsizing`` and ``GET /api/v1/rightsizing`` on the hand-worked slice (both databases): the same
rows as JSON, CSV and a table, by job, user and team; thresholds as options; a team token sees its team only."""

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
from finops.timeutil import utc_now
from finops.web.app import create_app
from tests.support import rightsizing_scenario as rs
from tests.support.servers import running

TOKEN = "rightsizing-token"


def test_rightsizing_command_and_api(sessions) -> None:  # type: ignore[no-untyped-def]
    with sessions.begin() as session:
        t0 = rs.load(session, Pricing(load_catalog(), PricingModel.ON_DEMAND))
        tokens = {
            name: create_token(session, role, utc_now(), team=team, name=name, actor="system:test")[1]
            for name, role, team in (("viewer", "viewer", None), ("alpha", "team", "alpha"))
        }
    url = sessions.kw["bind"].url.render_as_string(hide_password=False)
    period = {"start": t0.isoformat(), "end": (t0 + timedelta(hours=2)).isoformat()}

    def command(*args: str) -> Result:
        options = ["--start", period["start"], "--end", period["end"]]
        return CliRunner().invoke(app, ["rightsizing", *options, *args], env={"FINOPS_DATABASE_URL": url})

    with running(create_app(sessions, "ingest-only", api_token=TOKEN)) as base:

        def get(who: str, **params: str) -> httpx.Response:
            token = TOKEN if who == "admin" else tokens[who]
            headers = {"Authorization": f"Bearer {token}"}
            return httpx.get(f"{base}/api/v1/rightsizing", params={**period, **params}, headers=headers)

        for by in ("job", "user", "team"):
            listed = command("--by", by, "--format", "json")
            assert listed.exit_code == 0, listed.output
            answered = get("viewer", by=by)
            assert answered.status_code == 200, answered.text
            assert orjson.loads(listed.stdout) == answered.json()["rows"], by
        body = get("viewer").json()
        assert (body["jobs_examined"], body["jobs_unmetered"]) == (6, 1)
        rows = body["rows"]
        assert [row["job"] for row in rows] == ["701", "706", "702", "704"]
        assert rows[0]["fixes"] == ["#SBATCH --gres=gpu:h100:1"] and rows[0]["gpus_suggested"] == 1
        assert rows[2]["mig_profile"] == "1g.10gb" and rows[3]["notes"][0].startswith("no memory reading")
        assert {row["measure"] for row in rows} == {"utilisation"} and rows[0]["sm_active"] is None

        alpha = get("alpha")
        assert alpha.status_code == 200 and [row["job"] for row in alpha.json()["rows"]] == ["701", "706"]
        assert "bob" not in alpha.text and "beta" not in alpha.text
        assert get("alpha", team="beta").status_code == 403
        assert get("alpha", team="alpha").json()["rows"] == alpha.json()["rows"]
        assert [row["job"] for row in get("viewer", team="beta").json()["rows"]] == ["702", "704"]
        assert [row["job"] for row in get("viewer", user="alice").json()["rows"]] == ["701"]
        strict = get("viewer", idle_ratio="0.02").json()["rows"][0]
        assert strict["job"] == "701" and strict["gpus_suggested"] == 2
        for params in ({"memory_headroom": "0.5"}, {"by": "node"}, {"idle_ratio": "2"}, {"start": "yesterday"}):
            refused = get("viewer", **params)
            assert refused.status_code == 422, (params, refused.text)
        as_csv = get("viewer", format="csv")
        assert as_csv.headers["content-type"].startswith("text/csv")
        assert [row["job"] for row in csv.DictReader(io.StringIO(as_csv.text))] == ["701", "706", "702", "704"]

    assert list(csv.DictReader(io.StringIO(command("--format", "csv").stdout)))[2]["fixes"] == (
        "#SBATCH --gres=gpu:1g.10gb:1 | #SBATCH --gres=gpu:l40s:1"
    )
    table = command().stdout.splitlines()
    assert table[0] == "Savings in USD" and table[1].split()[:4] == ["job", "user", "team", "model"]
    assert table[2].split()[:3] == ["701", "alice", "alpha"]
    assert "701: #SBATCH --gres=gpu:h100:1" in table
    assert table[-1].startswith("6 jobs on whole GPUs examined (1 without readings")
    by_team = command("--by", "team").stdout.splitlines()
    assert [line.split()[0] for line in by_team[2:5]] == ["alpha", "beta", "TOTAL"]
    assert orjson.loads(command("--user", "bob", "--format", "json").stdout)[0]["job"] == "702"
    assert orjson.loads(command("--low-utilization-ratio", "0.05", "--format", "json").stdout)[0]["job"] == "701"
    assert len(orjson.loads(command("--low-utilization-ratio", "0.05", "--format", "json").stdout)) == 2
    for bad in (["--by", "node"], ["--format", "xml"], ["--memory-headroom", "0.5"], ["--memory-headroom", "x"]):
        refused = command(*bad)
        assert refused.exit_code == 2, (bad, refused.output)
