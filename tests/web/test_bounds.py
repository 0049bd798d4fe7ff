"""Every input is bounded, over a real socket on both databases: each attempt that once gave a 500 or was stored
(non-finite readings in every shape of a batch, integers past their columns, over-long strings and bodies, ids no
row can have) gets its 4xx, nothing of it is stored, and a good request right after still works. A write lock held
on the SQLite file answers 503 with ``Retry-After``, and the retry once it is released succeeds."""

from __future__ import annotations

import json
import logging
import math
import sqlite3
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
from sqlalchemy import create_engine, func, select

from alerts.models import AlertSilence
from finops.db.engine import session_factory
from finops.db.models import Budget, Gpu, GpuSample, PriceCatalogVersion, PricingRule, TeamRule
from finops.timeutil import utc_now
from finops.web.app import REST_MAX_BODY_BYTES, create_app
from finops.web.ingest_route import RETRY_AFTER_SECONDS
from tests.support.servers import API_TOKEN, running, service_metrics

TOKEN = "bounds-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
"""Ingest's headers (the shared ingest token)."""
API = {"Authorization": f"Bearer {API_TOKEN}", "Content-Type": "application/json"}
"""The REST API's headers (an admin credential)."""
UUID = "GPU-11111111-2222-3333-4444-555555555555"
GPU = f'{{"uuid": "{UUID}", "index": 0, "model": "NVIDIA H100 80GB HBM3"}}'
TS = 1795244400


def _series(column: str, value: str, gpu: str = GPU) -> str:
    """A batch of one reading in columns, ``column`` holding ``value`` (raw JSON text)."""
    series = f'{{"uuid": "{UUID}", "ts": [{TS}], "{column}": [{value}]}}'
    return f'{{"node": "gpu-a-01", "gpus": [{gpu}], "series": [{series}]}}'


def _row(column: str, value: str) -> str:
    """A batch of one reading as a row, ``column`` holding ``value`` (raw JSON text)."""
    row = f'{{"uuid": "{UUID}", "ts": "2026-11-22T07:00:00Z", "{column}": {value}}}'
    return f'{{"node": "gpu-a-01", "gpus": [{GPU}], "samples": [{row}]}}'


def _silence(**fields: object) -> str:
    """A silence body: one matcher, ending in a day, with ``fields`` replacing any of its fields."""
    return json.dumps({"matchers": ['team="a"'], "ends_at": (utc_now() + timedelta(days=1)).isoformat(), **fields})


def _team_rule(**fields: str) -> str:
    return json.dumps({"kind": "account", "value": "acct", "team": "t", **fields})


INGEST, SILENCES = "/api/v1/ingest", "/api/v1/alerts/silences"
BUDGET = "/api/v1/budgets/{team}/2026-01?allow_unknown_team=true"
PRICING_RULE = json.dumps({"selector": "node", "value": "v" * 256, "pricing_model": "spot"})
SHARE_NAN = f', "job_utilization": [{{"uuid": "{UUID}", "ts": {TS}, "job_id": "1", "utilization_ratio": NaN}}]}}'
GPU_2_64 = GPU.replace('"index": 0', f'"index": {2**64}')

ATTEMPTS: list[tuple[str, str, str, str, int, str]] = [
    # name, method, path, body, status, what the answer names
    ("series Infinity literal", "POST", INGEST, _series("power_watts", "Infinity"), 422, "series[0].power_watts[0]"),
    ("series NaN literal", "POST", INGEST, _series("utilization_ratio", "NaN"), 422, "series[0].utilization_ratio[0]"),
    ("series -Infinity", "POST", INGEST, _series("temperature_celsius", "-Infinity"), 422, "temperature_celsius[0]"),
    ("series 1e400", "POST", INGEST, _series("energy_joules", "1e400"), 422, "series[0].energy_joules[0]"),
    ("series text nan", "POST", INGEST, _series("sm_clock_hertz", '"nan"'), 422, "series[0].sm_clock_hertz[0]"),
    ("series counter 2^64", "POST", INGEST, _series("memory_used_bytes", str(2**64)), 422, "memory_used_bytes[0]"),
    ("samples text Infinity", "POST", INGEST, _row("power_watts", '"Infinity"'), 422, "samples[0].power_watts"),
    ("samples Infinity literal", "POST", INGEST, _row("energy_joules", "Infinity"), 422, "samples[0].energy_joules"),
    ("samples 1e400", "POST", INGEST, _row("temperature_celsius", "1e400"), 422, "samples[0].temperature_celsius"),
    ("samples text -inf", "POST", INGEST, _row("temperature_celsius", '"-inf"'), 422, "temperature_celsius"),
    ("samples counter 2^63", "POST", INGEST, _row("clocks_event_reasons", str(2**63)), 422, "clocks_event_reasons"),
    ("share NaN", "POST", INGEST, _series("power_watts", "1")[:-1] + SHARE_NAN, 422, "job_utilization[0]"),
    ("GPU index 2^64", "POST", INGEST, _series("power_watts", "1", gpu=GPU_2_64), 422, "gpus[0].index"),
    ("budgets of 9999-12", "GET", "/api/v1/budgets?month=9999-12", "", 422, "month"),
    ("budget 1e30", "PUT", BUDGET.format(team="alpha"), '{"amount": 1e30}', 422, "amount"),
    ("budget 1e400", "PUT", BUDGET.format(team="alpha"), '{"amount": 1e400}', 422, "amount"),
    ("budget Infinity", "PUT", BUDGET.format(team="alpha"), '{"amount": Infinity}', 422, "amount"),
    ("budget team 10,000 characters", "PUT", BUDGET.format(team="t" * 10_000), '{"amount": "1"}', 422, "team"),
    ("silence id 23 digits", "DELETE", f"{SILENCES}/{'1' * 23}", "", 422, "silence_id"),
    ("silence id 2^31", "DELETE", f"{SILENCES}/{2**31}", "", 422, "silence_id"),
    ("delivery id 2^63", "POST", f"/api/v1/alerts/deliveries/{2**63}/retry", "", 422, "delivery_id"),
    ("silence comment 5 MB", "POST", SILENCES, _silence(comment="c" * 5_000_000), 413, "body larger"),
    ("silence comment 10,001", "POST", SILENCES, _silence(comment="c" * 10_001), 422, "comment"),
    ("silence created_by 129", "POST", SILENCES, _silence(created_by="b" * 129), 422, "created_by"),
    ("silence matcher 100k", "POST", SILENCES, _silence(matchers=[f'team="{"a" * 100_000}"']), 422, "matchers"),
    ("silence 65 matchers", "POST", SILENCES, _silence(matchers=['team="a"'] * 65), 422, "matchers"),
    ("silence end past 9999", "POST", SILENCES, _silence(ends_at="9999-12-31T23:59:59-01:00"), 422, "ends_at"),
    ("team rule team 10,000", "PUT", "/api/v1/team-rules", _team_rule(team="t" * 10_000), 422, "team"),
    ("team rule value 256", "PUT", "/api/v1/team-rules", _team_rule(value="v" * 256), 422, "value"),
    ("team rule key 254", "PUT", "/api/v1/team-rules", _team_rule(kind="label", key="k" * 254), 422, "key"),
    ("delete team rule value 256", "DELETE", f"/api/v1/team-rules/account?value={'v' * 256}", "", 422, "value"),
    ("pricing rule value 256", "PUT", "/api/v1/pricing-rules", PRICING_RULE, 422, "value"),
    ("price catalogue 100 MB", "PUT", "/api/v1/prices", "#" * 100_000_000, 413, "body larger"),
    ("price catalogue over the limit", "PUT", "/api/v1/prices", "#" * (REST_MAX_BODY_BYTES + 1), 413, "body larger"),
    ("costs start 10,000 characters", "GET", f"/api/v1/costs?start={'1' * 10_000}&end=2026-01-01", "", 422, "start"),
]


@pytest.fixture
def service(sessions) -> Iterator[str]:  # type: ignore[no-untyped-def]
    with running(create_app(sessions, TOKEN, clock=lambda: TS + 86400, api_token=API_TOKEN)) as url:
        yield url


def _good_ingest(url: str, ts: int) -> httpx.Response:
    body = _series("power_watts", "300.0").replace(f'"ts": [{TS}]', f'"ts": [{ts}]')
    return httpx.post(f"{url}{INGEST}", content=body, headers=HEADERS)


def test_every_bad_input_is_refused_with_its_status_and_nothing_of_it_is_stored(service, sessions) -> None:  # type: ignore[no-untyped-def]
    for n, (name, method, path, body, status, named) in enumerate(ATTEMPTS):
        response = httpx.request(
            method, f"{service}{path}", content=body or None, headers=HEADERS if path == INGEST else API, timeout=120
        )
        assert response.status_code == status, (name, response.status_code, response.text[:300])
        assert named in response.text, (name, response.text[:300])
        good = _good_ingest(service, TS + 10 * (n + 1))
        assert (good.status_code, good.json()["accepted"]) == (200, 1), (name, good.text)
        assert httpx.get(f"{service}{SILENCES}", headers=API).status_code == 200, name
    chunked = iter([b"#" * REST_MAX_BODY_BYTES, b"#"])  # no Content-Length: refused as read
    assert httpx.put(f"{service}/api/v1/prices", content=chunked, headers=API).status_code == 413
    with sessions() as session:
        stored = session.execute(
            select(GpuSample.utilization_ratio, GpuSample.power_watts, GpuSample.energy_joules,
                   GpuSample.temperature_celsius, GpuSample.sm_clock_hertz)
        ).all()  # fmt: skip
        assert all(math.isfinite(value) for row in stored for value in row if value is not None)
        assert len(stored) == len(ATTEMPTS) + 1  # every good reading, and the valid one beside the NaN share
        assert [gpu.gpu_index for gpu in session.scalars(select(Gpu))] == [0]
        for table in (AlertSilence, TeamRule, PricingRule, Budget, PriceCatalogVersion):
            assert session.scalar(select(func.count()).select_from(table)) == 0, table.__name__


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_write_lock_held_on_sqlite_answers_503_with_retry_after(engine, database_url, caplog) -> None:  # type: ignore[no-untyped-def]
    # The service's engine waits 60 s for a lock; this one 0.2 s, so that the test does not.
    impatient = create_engine(database_url, connect_args={"timeout": 0.2})
    rule = '{"kind": "account", "value": "acct-a", "team": "alpha"}'
    holder = sqlite3.connect(database_url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        app = create_app(session_factory(impatient), TOKEN, clock=lambda: TS + 86400, api_token=API_TOKEN)
        with running(app) as url, caplog.at_level(logging.WARNING):
            holder.execute("BEGIN IMMEDIATE")
            refused = [_good_ingest(url, TS), httpx.put(f"{url}/api/v1/team-rules", content=rule, headers=API)]
            for response in refused:
                assert response.status_code == 503, response.text
                assert response.headers["Retry-After"] == str(RETRY_AFTER_SECONDS)
            assert "database busy" in caplog.text
            holder.execute("ROLLBACK")
            assert _good_ingest(url, TS).json()["accepted"] == 1
            assert httpx.put(f"{url}/api/v1/team-rules", content=rule, headers=API).status_code == 200
            assert 'gpufinops_ingest_requests_total{code="503"} 1.0' in service_metrics(url)
    finally:
        holder.close()
        impatient.dispose()
