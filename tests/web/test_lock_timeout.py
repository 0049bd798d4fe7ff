"""A request behind a lock on PostgreSQL, over a real socket: with the sessions ``serve`` gives its app
(:func:`finops.cli.serve.request_sessions`), a REST write and an ingest batch whose tables another connection holds
locked are answered 503 with ``Retry-After`` once ``FINOPS_REQUEST_LOCK_TIMEOUT_SECONDS`` runs out, not left waiting
for as long as the lock is held; once it is released, the same requests succeed."""

from __future__ import annotations

import logging
import time

import httpx
import pytest
from sqlalchemy import text

from finops.cli.serve import request_sessions
from finops.settings.combined import Settings
from finops.web.app import create_app
from finops.web.ingest_route import RETRY_AFTER_SECONDS
from tests.support.servers import API_TOKEN, running

TOKEN = "lock-timeout-ingest-token"
LOCK_TIMEOUT_SECONDS = 1.0
CLIENT_TIMEOUT_SECONDS = 20.0
"""How long the test's client waits for an answer: without the lock timeout a request waits for the lock, which the
test holds until the answers came, so the client gives up first."""
TS = 1795244400
RULE = '{"kind": "account", "value": "acct-a", "team": "alpha"}'
UUID = "GPU-11111111-2222-3333-4444-555555555555"
BATCH = (
    f'{{"node": "gpu-a-01", "gpus": [{{"uuid": "{UUID}", "index": 0, "model": "NVIDIA H100 80GB HBM3"}}], '
    f'"series": [{{"uuid": "{UUID}", "ts": [{TS}], "power_watts": [300.0]}}]}}'
)


def _requests(url: str) -> list[httpx.Response]:
    """A REST write of a team rule and an ingest batch of one reading."""
    api = {"Authorization": f"Bearer {API_TOKEN}", "Content-Type": "application/json"}
    ingest = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    return [
        httpx.put(f"{url}/api/v1/team-rules", content=RULE, headers=api, timeout=CLIENT_TIMEOUT_SECONDS),
        httpx.post(f"{url}/api/v1/ingest", content=BATCH, headers=ingest, timeout=CLIENT_TIMEOUT_SECONDS),
    ]


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_a_request_behind_a_lock_answers_503_once_its_lock_timeout_runs_out(engine, database_url, caplog) -> None:  # type: ignore[no-untyped-def]
    settings = Settings(database_url=database_url, request_lock_timeout_seconds=LOCK_TIMEOUT_SECONDS)
    sessions = request_sessions(settings)
    app = create_app(sessions, TOKEN, clock=lambda: TS + 86400, api_token=API_TOKEN)
    try:
        with running(app) as url, engine.connect() as holder, caplog.at_level(logging.WARNING):
            holder.execute(text("LOCK TABLE team_rules, gpu_samples IN ACCESS EXCLUSIVE MODE"))
            started = time.monotonic()
            refused = _requests(url)
            for response in refused:
                assert response.status_code == 503, response.text
                assert response.headers["Retry-After"] == str(RETRY_AFTER_SECONDS)
                assert "the database is busy" in response.json()["detail"]
            assert time.monotonic() - started < CLIENT_TIMEOUT_SECONDS
            assert "database busy" in caplog.text and "lock timeout" in caplog.text
            holder.rollback()
            answered = _requests(url)
            assert [response.status_code for response in answered] == [200, 200], [r.text for r in answered]
            assert answered[1].json()["accepted"] == 1
    finally:
        sessions.kw["bind"].dispose()


def test_the_lock_timeout_is_a_setting_with_a_default_and_0_for_none(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("FINOPS_REQUEST_LOCK_TIMEOUT_SECONDS", raising=False)
    assert Settings().request_lock_timeout_seconds == 5.0
    monkeypatch.setenv("FINOPS_REQUEST_LOCK_TIMEOUT_SECONDS", "0")
    assert Settings().request_lock_timeout_seconds == 0
