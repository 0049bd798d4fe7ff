"""The ingest API over a real socket: authentication, idempotence, partial acceptance, metrics."""

from __future__ import annotations

import gzip

import httpx
import orjson
import pytest
from sqlalchemy import func, select

from finops.api import create_app
from finops.models import Gpu, GpuSample
from tests.servers import running

TOKEN = "s3cret-token"
GPU = {"uuid": "GPU-11111111-2222-3333-4444-555555555555", "index": 0, "model": "NVIDIA H100 80GB HBM3"}


def _batch(n: int = 3) -> dict[str, object]:
    return {
        "node": "gpu-a-01",
        "gpus": [GPU],
        "samples": [
            {"uuid": GPU["uuid"], "ts": f"2026-03-02T10:0{i}:00Z", "utilization_ratio": 0.25 * i, "power_watts": 300.0}
            for i in range(n)
        ],
    }


def _post(url: str, body: object, token: str | None = TOKEN, gzipped: bool = True) -> httpx.Response:
    payload = orjson.dumps(body)
    headers = {"Content-Type": "application/json"}
    if gzipped:
        payload, headers["Content-Encoding"] = gzip.compress(payload), "gzip"
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.post(f"{url}/api/v1/ingest", content=payload, headers=headers)


@pytest.fixture
def service(sessions):  # type: ignore[no-untyped-def]
    with running(create_app(sessions, TOKEN)) as url:
        yield url


def _count(sessions) -> int:  # type: ignore[no-untyped-def]
    with sessions() as session:
        return int(session.scalar(select(func.count()).select_from(GpuSample)))


def test_ingest_requires_the_bearer_token(service: str, sessions) -> None:  # type: ignore[no-untyped-def]
    assert _post(service, _batch(), token=None).status_code == 401
    assert _post(service, _batch(), token="wrong").status_code == 401
    assert _count(sessions) == 0


def test_replayed_batch_adds_no_rows(service: str, sessions) -> None:  # type: ignore[no-untyped-def]
    first = _post(service, _batch())
    assert first.status_code == 200 and first.json() == {"accepted": 3, "rejected": []}
    assert _post(service, _batch(), gzipped=False).status_code == 200
    assert _count(sessions) == 3
    with sessions() as session:
        gpu = session.scalars(select(Gpu)).one()
    assert (gpu.uuid, gpu.gpu_index, gpu.model) == (GPU["uuid"], 0, GPU["model"])
    assert gpu.in_service_from.isoformat() == "2026-03-02T10:00:00+00:00"


def test_malformed_sample_is_named_and_the_rest_stored(service: str, sessions) -> None:  # type: ignore[no-untyped-def]
    batch = _batch(3)
    batch["samples"][1]["utilization_ratio"] = 7.5  # type: ignore[index]
    batch["samples"][2]["ts"] = "2026-03-02T10:02:00"  # type: ignore[index]  # no UTC offset
    response = _post(service, batch)
    assert response.status_code == 422
    body = response.json()
    assert body["accepted"] == 1
    assert {(r["index"], r["field"]) for r in body["rejected"]} == {
        (1, "samples[1].utilization_ratio"),
        (2, "samples[2].ts"),
    }
    assert _count(sessions) == 1


def test_batch_level_error_stores_nothing(service: str, sessions) -> None:  # type: ignore[no-untyped-def]
    batch = _batch()
    del batch["node"]
    response = _post(service, batch)
    assert response.status_code == 422
    assert response.json()["rejected"][0]["field"] == "node"
    assert _count(sessions) == 0


def test_metrics_count_stored_and_rejected_readings(service: str) -> None:
    batch = _batch(2)
    batch["samples"][0]["power_watts"] = -1  # type: ignore[index]
    _post(service, batch)
    text = httpx.get(f"{service}/metrics").text
    assert "gpufinops_ingest_samples_total 1.0" in text
    assert "gpufinops_ingest_rejected_samples_total 1.0" in text
    assert httpx.get(f"{service}/healthz").json() == {"status": "ok"}
