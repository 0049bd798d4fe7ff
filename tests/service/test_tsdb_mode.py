"""``FINOPS_TELEMETRY_SOURCE=tsdb``: the settings it needs, the ingest API refusing readings, no Prometheus pull into
``gpu_samples``."""

from __future__ import annotations

import gzip

import httpx
import pytest
from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker

from finops.cli.context import tsdb_telemetry
from finops.cli.serve import prometheus_pull
from finops.errors import FinopsError
from finops.settings.combined import Settings
from finops.web.app import create_app
from finops.web.ingest_route import INGEST_PATH, READINGS_IN_TSDB
from tests.support import scenario
from tests.support.servers import running

TOKEN = "tsdb-mode-ingest-token"


def test_tsdb_source_needs_a_url_and_turns_the_pull_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().telemetry_source == "database" and tsdb_telemetry(Settings()) is None
    monkeypatch.setenv("FINOPS_TELEMETRY_SOURCE", "tsdb")
    with pytest.raises(ValidationError, match="FINOPS_TELEMETRY_SOURCE=tsdb needs FINOPS_TSDB_URL"):
        Settings()
    monkeypatch.setenv("FINOPS_TSDB_URL", "http://127.0.0.1:8428")
    monkeypatch.setenv("FINOPS_PROMETHEUS_URL", "http://127.0.0.1:9090")
    monkeypatch.setenv("FINOPS_PROMETHEUS_SELECTOR", '{cluster="a"}')
    settings = Settings()
    assert prometheus_pull(settings) is None
    tsdb = tsdb_telemetry(settings)
    assert tsdb is not None and tsdb.client.url == "http://127.0.0.1:8428" and tsdb.options.selector == '{cluster="a"}'
    monkeypatch.setenv("FINOPS_PROMETHEUS_SELECTOR", "cluster=a")
    with pytest.raises(FinopsError, match="FINOPS_PROMETHEUS_SELECTOR"):
        tsdb_telemetry(Settings())


def test_ingest_refuses_readings_when_they_live_in_the_tsdb(sessions: sessionmaker[Session]) -> None:
    body = gzip.compress(scenario.batch(scenario.start_hour()).model_dump_json().encode())
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Encoding": "gzip"}
    with running(create_app(sessions, TOKEN, readings_in_tsdb=True)) as url:
        refused = httpx.post(f"{url}{INGEST_PATH}", content=body, headers=headers)
        unauthenticated = httpx.post(f"{url}{INGEST_PATH}", content=body)
    assert refused.status_code == 409 and refused.json() == {"detail": READINGS_IN_TSDB}
    assert unauthenticated.status_code == 401
