"""What ingest refuses of an authenticated node beyond the format, over a real socket: readings stamped outside the
time window (:class:`finops.ingest.limits.TimeWindow`)."""

from __future__ import annotations

import gzip

import httpx
import orjson
import pytest
from sqlalchemy import func, select

from finops.db.models import Gpu, GpuJobUtilization, GpuSample
from finops.ingest.limits import FUTURE_GRACE_SECONDS, IngestLimits
from finops.web.app import create_app
from tests.support.servers import running

TOKEN = "s3cret-token"
NOW = 1795244400  # the service's clock in these tests: 2026-11-21T07:00Z
DAY = 86400
GPU = {"uuid": "GPU-11111111-2222-3333-4444-555555555555", "index": 0, "model": "NVIDIA H100 80GB HBM3"}


def _post(url: str, body: object) -> httpx.Response:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Encoding": "gzip"}
    return httpx.post(f"{url}/api/v1/ingest", content=gzip.compress(orjson.dumps(body)), headers=headers)


@pytest.fixture
def service(sessions):  # type: ignore[no-untyped-def]
    with running(create_app(sessions, TOKEN, limits=IngestLimits(retention_days=35), clock=lambda: NOW)) as url:
        yield url


def _stored(sessions) -> list[int]:  # type: ignore[no-untyped-def]
    with sessions() as session:
        return sorted(int(ts.timestamp()) for ts in session.scalars(select(GpuSample.ts)))


def test_readings_outside_the_window_are_refused_one_by_one_and_the_rest_stored(service, sessions) -> None:  # type: ignore[no-untyped-def]
    earliest = (NOW // DAY - 35) * DAY  # the retention cutoff: the UTC midnight 35 whole days before today's
    first = NOW - 600
    series_ts = [0, first, earliest - 1, earliest, NOW + FUTURE_GRACE_SECONDS, NOW + FUTURE_GRACE_SECONDS + 1]
    batch = {
        "node": "gpu-a-01",
        "gpus": [GPU],
        "series": [{"uuid": GPU["uuid"], "ts": series_ts, "utilization_ratio": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]}],
        "samples": [
            {"uuid": GPU["uuid"], "ts": "1970-01-01T00:00:00Z", "utilization_ratio": 0.5},
            {"uuid": GPU["uuid"], "ts": "2026-11-21T07:05:00Z", "utilization_ratio": 0.5},
            {"uuid": GPU["uuid"], "ts": "2036-11-21T07:05:00Z", "utilization_ratio": 0.5},
        ],
        "job_utilization": [
            {"uuid": GPU["uuid"], "ts": first, "job_id": "1", "utilization_ratio": 0.5},
            {"uuid": GPU["uuid"], "ts": 0, "job_id": "1", "utilization_ratio": 0.5},
        ],
    }
    response = _post(service, batch)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["accepted"] == 4
    assert [(r.get("series"), r.get("index"), r.get("job_utilization"), r["field"]) for r in body["rejected"]] == [
        (0, 0, None, "series[0].ts[0]"),
        (0, 2, None, "series[0].ts[2]"),
        (0, 5, None, "series[0].ts[5]"),
        (None, 0, None, "samples[0].ts"),
        (None, 2, None, "samples[2].ts"),
        (None, None, 1, "job_utilization[1].ts"),
    ]
    reasons = [r["error"] for r in body["rejected"]]
    assert "older than the sample retention" in reasons[0] and "in the future" in reasons[2]
    assert _stored(sessions) == sorted([first, earliest, NOW + FUTURE_GRACE_SECONDS, NOW + 300])
    with sessions() as session:
        gpu = session.scalars(select(Gpu)).one()
        shares = session.scalar(select(func.count()).select_from(GpuJobUtilization))
    # The ts=0 readings touched nothing: the GPU entered service at its earliest accepted reading.
    assert int(gpu.in_service_from.timestamp()) == earliest
    assert shares == 1


def test_a_reading_at_ts_0_leaves_a_known_gpu_alone(service, sessions) -> None:  # type: ignore[no-untyped-def]
    ok = {"node": "gpu-a-01", "gpus": [GPU], "series": [{"uuid": GPU["uuid"], "ts": [NOW], "power_watts": [300.0]}]}
    assert _post(service, ok).status_code == 200
    forged = {**ok, "series": [{"uuid": GPU["uuid"], "ts": [0], "power_watts": [300.0]}]}
    response = _post(service, forged)
    assert response.status_code == 422
    assert response.json()["accepted"] == 0
    assert [r["field"] for r in response.json()["rejected"]] == ["series[0].ts[0]"]
    with sessions() as session:
        assert int(session.scalars(select(Gpu)).one().in_service_from.timestamp()) == NOW
    assert _stored(sessions) == [NOW]


def test_places_are_those_sent_when_malformed_entries_were_left_out_first(service, sessions) -> None:  # type: ignore[no-untyped-def]
    batch = {
        "node": "gpu-a-01",
        "gpus": [GPU],
        "series": [
            {"uuid": "", "ts": [NOW]},  # refused whole: a bad uuid
            {"uuid": GPU["uuid"], "ts": [NOW, NOW + 1, 0], "utilization_ratio": [7.0, 0.5, 0.5]},
        ],
        "samples": [
            {"uuid": GPU["uuid"], "ts": "2026-11-21T07:00:00", "utilization_ratio": 0.5},  # no UTC offset
            {"uuid": GPU["uuid"], "ts": "1970-01-01T00:00:00Z", "utilization_ratio": 0.5},
        ],
    }
    response = _post(service, batch)
    assert response.status_code == 422
    fields = sorted(r["field"] for r in response.json()["rejected"])
    assert fields == [
        "samples[0].ts",
        "samples[1].ts",
        "series[0].uuid",
        "series[1].ts[2]",
        "series[1].utilization_ratio[0]",
    ]
    assert _stored(sessions) == [NOW + 1]
