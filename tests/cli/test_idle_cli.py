"""``gpu-finops idle list``: the episodes the REST API lists, as JSON (the same), CSV and a table, by team (both
databases)."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import httpx
import orjson
from typer.testing import CliRunner, Result

from finops.analysis.idle import IdlePolicy, detect_idle
from finops.cli import app
from finops.web.app import create_app
from tests.support.servers import running

TOKEN = "idle-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_idle_list_formats_and_team(loaded) -> None:  # type: ignore[no-untyped-def]
    sessions, t0, _, pricing = loaded
    with sessions.begin() as session:
        detect_idle(session, t0, t0 + timedelta(hours=2), IdlePolicy(), pricing)
    url = sessions.kw["bind"].url.render_as_string(hide_password=False)
    period = ["--start", t0.isoformat(), "--end", (t0 + timedelta(hours=2)).isoformat()]

    def idle_list(*args: str) -> Result:
        return CliRunner().invoke(app, ["idle", "list", *period, *args], env={"FINOPS_DATABASE_URL": url})

    with running(create_app(sessions, "ingest-only", api_token=TOKEN)) as base:
        params = {"start": t0.isoformat(), "end": (t0 + timedelta(hours=2)).isoformat()}
        response = httpx.get(f"{base}/api/v1/idle-episodes", params=params, headers=AUTH)
    listed = idle_list("--format", "json")
    assert listed.exit_code == 0, listed.output
    episodes = orjson.loads(listed.stdout)
    assert episodes == response.json() and len(episodes) == 1, "as the REST API lists them"
    (episode,) = episodes
    assert (episode["node"], episode["job_id"], episode["team"]) == ("gpu-a-01", "501", "alpha")

    rows = list(csv.DictReader(io.StringIO(idle_list("--format", "csv").stdout)))
    assert rows == [{key: "" if value is None else str(value) for key, value in episode.items()}]
    assert (episode["unpriced_model"], episode["unpriced_fix"]) == (None, None)

    table = idle_list().stdout.splitlines()
    assert table[0].split()[:5] == ["node", "gpu", "job", "user", "team"]
    assert table[1].split()[:5] == ["gpu-a-01", "0", "501", "alice", "alpha"]
    assert table[-1] == f"1 episode: {episode['hours']:.2f} GPU-hours, {float(episode['cost']):.2f} USD"

    assert orjson.loads(idle_list("--team", "alpha", "--format", "json").stdout) == episodes
    assert orjson.loads(idle_list("--team", "__unmapped__", "--format", "json").stdout) == []
    assert idle_list("--team", "nobody").stdout.splitlines()[-1] == "0 episodes"
    assert idle_list("--format", "xml").exit_code == 2
