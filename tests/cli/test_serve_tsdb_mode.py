"""``serve`` with ``FINOPS_TELEMETRY_SOURCE=tsdb``: it starts with an API token alone (readings go to the TSDB, so
ingest needs no credential of its own); ingest answers 401 to a batch without an ingest credential, 409 to one
with, in one process or several (``--workers``), and stores nothing."""

from __future__ import annotations

import gzip
import logging

import httpx
import pytest
from sqlalchemy import Engine, func, select
from typer.testing import CliRunner

from finops.cli import app
from finops.cli.serve import SHARED_TOKEN_WARNING, worker_app
from finops.db.models import GpuSample
from finops.web.ingest_route import INGEST_PATH, READINGS_IN_TSDB
from tests.support import scenario
from tests.support.servers import API_TOKEN, running

INGEST_TOKEN = "tsdb-mode-shared-ingest-token"


@pytest.fixture
def tsdb_env(cli_env: CliRunner, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """The CLI on the test database with the TSDB as telemetry source (at an address nothing answers: ``serve
    --no-scheduler`` does not query it)."""
    monkeypatch.setenv("FINOPS_TELEMETRY_SOURCE", "tsdb")
    monkeypatch.setenv("FINOPS_TSDB_URL", "http://127.0.0.1:9")
    return cli_env


def _post(url: str, token: str | None) -> httpx.Response:
    """A gzip batch of the scenario's readings posted to ingest, with ``token`` as bearer (None: no header)."""
    body = gzip.compress(scenario.batch(scenario.start_hour()).model_dump_json().encode())
    headers = {"Content-Encoding": "gzip"} | ({"Authorization": f"Bearer {token}"} if token else {})
    return httpx.post(f"{url}{INGEST_PATH}", content=body, headers=headers, timeout=30)


def test_serve_starts_with_an_api_token_alone(  # type: ignore[no-untyped-def]
    tsdb_env: CliRunner, started, monkeypatch: pytest.MonkeyPatch, engine: Engine
) -> None:
    monkeypatch.setenv("FINOPS_API_TOKEN", API_TOKEN)
    result = tsdb_env.invoke(app, ["serve", "--no-scheduler"])
    assert result.exit_code == 0, result.output
    assert len(started) == 1
    with running(started[0]["app"]) as url:
        without = _post(url, None)
        with_api_token = _post(url, API_TOKEN)
        rest = httpx.get(f"{url}/api/v1/team-rules", headers={"Authorization": f"Bearer {API_TOKEN}"}, timeout=30)
    assert without.status_code == 401 and with_api_token.status_code == 401
    assert rest.status_code == 200, rest.text
    with engine.connect() as connection:
        assert connection.scalar(select(func.count()).select_from(GpuSample)) == 0

    monkeypatch.setenv("FINOPS_TELEMETRY_SOURCE", "database")
    refused = tsdb_env.invoke(app, ["serve", "--no-scheduler"])
    assert refused.exit_code == 2 and "no ingest token" in refused.stderr, refused.output
    assert len(started) == 1


def test_an_ingest_credential_is_answered_409_without_the_shared_token_warning(  # type: ignore[no-untyped-def]
    tsdb_env: CliRunner, started, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, engine: Engine
) -> None:
    monkeypatch.setenv("FINOPS_INGEST_TOKEN", INGEST_TOKEN)
    with caplog.at_level(logging.WARNING, logger="finops.cli.serve"):
        assert tsdb_env.invoke(app, ["serve", "--no-scheduler"]).exit_code == 0
    assert SHARED_TOKEN_WARNING not in caplog.messages
    # One process of `serve --workers N` builds its application from the settings alone.
    for served in (started[0]["app"], worker_app()):
        with running(served) as url:
            refused, without = _post(url, INGEST_TOKEN), _post(url, None)
        assert (refused.status_code, refused.json()) == (409, {"detail": READINGS_IN_TSDB})
        assert without.status_code == 401
    with engine.connect() as connection:
        assert connection.scalar(select(func.count()).select_from(GpuSample)) == 0
