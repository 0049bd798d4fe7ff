"""Per-node ingest limits over a real socket: each node's token bucket of readings (429 with ``Retry-After``), the
GPUs a batch may name and the burst a batch may not exceed (422), counted on ``/metrics``. The clock is injected:
no test sleeps."""

from __future__ import annotations

import gzip

import httpx
import orjson
import pytest
from sqlalchemy import func, select

from finops.cli.serve import ingest_limits
from finops.db.models import GpuSample
from finops.ingest.limits import MAX_GPUS_PER_BATCH, READINGS_BURST, READINGS_PER_SECOND, IngestLimits, ReadingBuckets
from finops.settings.combined import Settings
from finops.web.app import create_app
from tests.support.servers import API_TOKEN, running, service_metrics

TOKEN = "s3cret-token"
NOW = 1795244400  # the service's clock at the start of each test: 2026-11-21T07:00Z
LIMITS = IngestLimits(readings_per_second=10, readings_burst=100, max_gpus_per_batch=4)


class Clock:
    def __init__(self) -> None:
        self.now = float(NOW)

    def __call__(self) -> float:
        return self.now


def _gpu(node: int, index: int) -> dict[str, object]:
    return {"uuid": f"GPU-{node:08d}-0000-0000-0000-{index:012d}", "index": index, "model": "NVIDIA H100 80GB HBM3"}


def _batch(node: int, readings: int, gpus: int = 1, start: int = NOW - 3000) -> dict[str, object]:
    """Node ``node``'s batch: ``readings`` per GPU, one every second from ``start``."""
    inventory = [_gpu(node, i) for i in range(gpus)]
    ts = list(range(start, start + readings))
    series = [{"uuid": g["uuid"], "ts": ts, "utilization_ratio": [0.5] * readings} for g in inventory]
    return {"node": f"gpu-{node:02d}", "gpus": inventory, "series": series}


def _post(url: str, body: object) -> httpx.Response:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Encoding": "gzip"}
    return httpx.post(f"{url}/api/v1/ingest", content=gzip.compress(orjson.dumps(body)), headers=headers)


def _stored(sessions) -> int:  # type: ignore[no-untyped-def]
    with sessions() as session:
        return int(session.scalar(select(func.count()).select_from(GpuSample)) or 0)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def service(sessions, clock):  # type: ignore[no-untyped-def]
    with running(create_app(sessions, TOKEN, limits=LIMITS, clock=clock, api_token=API_TOKEN)) as url:
        yield url


def test_a_node_over_its_rate_gets_429_with_retry_after_and_nothing_stored(service, sessions, clock) -> None:  # type: ignore[no-untyped-def]
    assert _post(service, _batch(1, 60)).status_code == 200
    refused = _post(service, _batch(1, 60, start=NOW - 2000))
    assert refused.status_code == 429, refused.text
    # The bucket holds 40 of the 60 readings; 20 more come in at 10/s: 2 s.
    assert refused.headers["Retry-After"] == "2"
    assert "FINOPS_INGEST_READINGS_PER_SECOND" in refused.json()["detail"]
    assert _stored(sessions) == 60
    # Another node has a bucket of its own.
    assert _post(service, _batch(2, 100)).status_code == 200
    clock.now += 1
    again = _post(service, _batch(1, 60, start=NOW - 2000))
    assert (again.status_code, again.headers["Retry-After"]) == (429, "1")
    clock.now += 1
    assert _post(service, _batch(1, 60, start=NOW - 2000)).status_code == 200
    assert _stored(sessions) == 220
    metrics = service_metrics(service)
    assert 'gpufinops_ingest_refused_total{reason="rate"} 2.0' in metrics
    assert 'gpufinops_ingest_requests_total{code="429"} 2.0' in metrics
    assert 'gpufinops_ingest_refused_total{reason="gpus"} 0.0' in metrics


def test_retry_after_rounds_up_to_whole_seconds_and_is_at_least_one(service, clock) -> None:  # type: ignore[no-untyped-def]
    assert _post(service, _batch(1, 100)).status_code == 200
    clock.now += 0.05  # half a reading back in the bucket
    refused = _post(service, _batch(1, 1, start=NOW - 10))
    assert (refused.status_code, refused.headers["Retry-After"]) == (429, "1")
    clock.now += 2.5  # 25.5 readings: 26 are wanted, 0.05 s short
    refused = _post(service, _batch(1, 26, start=NOW - 100))
    assert (refused.status_code, refused.headers["Retry-After"]) == (429, "1")
    clock.now += 0.1
    assert _post(service, _batch(1, 26, start=NOW - 100)).status_code == 200


def test_a_batch_over_the_gpu_limit_is_refused_whole_naming_the_limit(service, sessions) -> None:  # type: ignore[no-untyped-def]
    response = _post(service, _batch(1, 2, gpus=5))
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["accepted"] == 0
    [rejection] = body["rejected"]
    assert rejection["field"] == "gpus" and rejection["readings"] == 10
    assert "5 GPUs" in rejection["error"] and "FINOPS_INGEST_MAX_GPUS_PER_BATCH" in rejection["error"]
    assert _stored(sessions) == 0
    # GPUs named only by their readings count too.
    batch = _batch(1, 2, gpus=4)
    batch["series"].append({"uuid": _gpu(1, 9)["uuid"], "ts": [NOW - 5], "utilization_ratio": [0.1]})  # type: ignore[attr-defined]
    assert _post(service, batch).status_code == 422
    assert _post(service, _batch(1, 2, gpus=4)).status_code == 200
    assert 'gpufinops_ingest_refused_total{reason="gpus"} 2.0' in service_metrics(service)


def test_a_batch_larger_than_the_burst_gets_422_not_429_forever(service, sessions, clock) -> None:  # type: ignore[no-untyped-def]
    response = _post(service, _batch(1, 101))
    assert response.status_code == 422, response.text
    [rejection] = response.json()["rejected"]
    assert "can never pass" in rejection["error"] and "FINOPS_INGEST_READINGS_BURST" in rejection["error"]
    assert rejection["readings"] == 101
    assert _stored(sessions) == 0
    # It took nothing from the bucket: a full burst passes at once.
    assert _post(service, _batch(1, 100)).status_code == 200
    metrics = service_metrics(service)
    assert 'gpufinops_ingest_refused_total{reason="burst"} 1.0' in metrics
    assert 'gpufinops_ingest_requests_total{code="422"} 1.0' in metrics


def test_the_bucket_refills_at_the_rate_up_to_the_burst_only() -> None:
    clock = Clock()
    buckets = ReadingBuckets(rate=10, burst=100, clock=clock)
    assert buckets.take("a", 100) == 0
    clock.now += 1000  # refills to the burst, no further
    assert buckets.take("a", 100) == 0
    assert buckets.take("a", 1) == 1
    clock.now -= 50  # a clock stepping back refills nothing
    assert buckets.take("a", 1) == 1
    clock.now += 50.5
    assert buckets.take("a", 1) == 0
    buckets.give_back("a", 50)
    assert buckets.take("a", 50) == 0
    assert not buckets.fits(101) and buckets.fits(100)


def test_full_buckets_are_forgotten_past_max_nodes() -> None:
    clock = Clock()
    buckets = ReadingBuckets(rate=10, burst=100, clock=clock, max_nodes=2)
    buckets.take("a", 100)
    buckets.take("b", 10)
    clock.now += 1.5  # b is full again, a is not
    buckets.take("c", 1)
    assert set(buckets._buckets) == {"a", "c"}
    assert buckets.take("a", 16) == 1  # a's debt is remembered: 15 readings back in 1.5 s


def test_defaults_and_settings(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    assert (READINGS_PER_SECOND, READINGS_BURST, MAX_GPUS_PER_BATCH) == (10_000, 200_000, 256)
    assert IngestLimits().readings_burst == READINGS_BURST
    monkeypatch.setenv("FINOPS_INGEST_READINGS_PER_SECOND", "50")
    monkeypatch.setenv("FINOPS_INGEST_READINGS_BURST", "500")
    monkeypatch.setenv("FINOPS_INGEST_MAX_GPUS_PER_BATCH", "16")
    monkeypatch.setenv("FINOPS_INGEST_BODY_TIMEOUT_SECONDS", "2.5")
    monkeypatch.setenv("FINOPS_INGEST_MAX_GPUS_PER_NODE", "24")
    monkeypatch.setenv("FINOPS_BODY_MEMORY_BUDGET_BYTES", "1048576")
    limits = ingest_limits(Settings())
    assert (limits.readings_per_second, limits.readings_burst, limits.max_gpus_per_batch) == (50, 500, 16)
    assert (limits.body_timeout_seconds, limits.max_gpus_per_node, limits.body_memory_budget_bytes) == (2.5, 24, 2**20)
