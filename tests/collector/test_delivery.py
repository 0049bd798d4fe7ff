"""Delivery from the spool: retries with backoff and Retry-After, refusals dropped and counted, backlogs merged."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson

from collector.contract.retry_after import parse_retry_after
from collector.contract.sample import Sample
from collector.delivery import Delivery
from collector.shipper import Backoff, Shipper
from collector.spool import Spool

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def _cycle(second: int, gpus: int = 8) -> list[Sample]:
    return [
        Sample(
            "gpu",
            {"gpu": str(i), "uuid": f"GPU-{i}", "model": "NVIDIA H100 80GB HBM3", "mig_profile": "", "parent_uuid": ""},
            {"gpufinops_gpu_utilization_ratio": 0.5, "gpufinops_gpu_up": 1.0},
            T0.replace(second=second),
        )
        for i in range(gpus)
    ]


def _readings(batch: dict[str, Any]) -> int:
    """Readings in a request body: the length of each series plus any rows."""
    return sum(len(series["ts"]) for series in batch.get("series", [])) + len(batch.get("samples", []))


class Service:
    """A MockTransport handler answering with the queued status codes (then 200), recording every batch."""

    def __init__(self, *codes: int, headers: dict[str, str] | None = None) -> None:
        self.codes = list(codes)
        self.headers = headers or {}
        self.batches: list[dict[str, object]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        batch = orjson.loads(gzip.decompress(request.content))
        self.batches.append(batch)
        code = self.codes.pop(0) if self.codes else 200
        if code == 200:
            return httpx.Response(200, json={"accepted": _readings(batch), "rejected": []})
        return httpx.Response(code, json={"detail": "no"}, headers=self.headers if code == 429 else {})


def _delivery(tmp_path: Path, service: Service, batch_samples: int = 10_000) -> Delivery:
    client = httpx.Client(transport=httpx.MockTransport(service))
    shipper = Shipper("http://finops.test", "tok", "gpu-a-01", client=client)
    return Delivery(Spool(tmp_path), shipper, batch_samples, Backoff(base_seconds=0.5, cap_seconds=4.0))


def test_failures_are_retried_with_backoff_then_retry_after_and_delivered_once(tmp_path: Path) -> None:
    service = Service(500, 408, 429, headers={"Retry-After": "2"})
    delivery = _delivery(tmp_path, service)
    assert delivery.enqueue(_cycle(0)) == 8
    delays = [delivery.send_next() for _ in range(4)]
    assert delays[0] is not None and 0 <= delays[0] <= 0.5
    assert delays[1] is not None and 0 <= delays[1] <= 1.0, "a 408 (body read too slowly) is tried again"
    assert delays[2] == 2.0, "Retry-After is honoured"
    assert delays[3] is not None and 1.9 < delays[3] <= 2.0, "then the POSTs are spaced by it (decaying)"
    assert delivery.send_next() is None
    assert len(service.batches) == 4
    assert all(batch == service.batches[0] for batch in service.batches), "the same readings each try"
    assert (delivery.shipped_samples, delivery.failed_sends, delivery.rejected_samples) == (8, 3, 0)
    assert delivery.spool.pending_samples == 0


def test_a_refusal_is_not_retried_and_is_counted(tmp_path: Path) -> None:
    service = Service(400)
    delivery = _delivery(tmp_path, service)
    delivery.enqueue(_cycle(0))
    assert delivery.send_next() == 0.0
    assert delivery.send_next() is None
    assert len(service.batches) == 1
    assert (delivery.shipped_samples, delivery.rejected_samples) == (0, 8)


def test_a_backlog_is_sent_in_merged_batches_in_order(tmp_path: Path) -> None:
    service = Service()
    delivery = _delivery(tmp_path, service, batch_samples=16)
    for second in range(3):
        delivery.enqueue(_cycle(second))
    while delivery.send_next() is not None:
        pass
    assert [_readings(batch) for batch in service.batches] == [16, 8]
    first = service.batches[0]
    assert first["node"] == "gpu-a-01"
    assert len(first["gpus"]) == 8, "the inventory is merged by UUID"  # type: ignore[arg-type]
    assert "samples" not in first, "every reading travels in a series"
    second = int(T0.timestamp())
    assert [(s["uuid"], s["ts"]) for s in first["series"]] == [  # type: ignore[attr-defined]
        (f"GPU-{i}", [second, second + 1]) for i in range(8)
    ]
    assert [s["ts"] for s in service.batches[1]["series"]] == [[second + 2]] * 8  # type: ignore[attr-defined]


def test_mig_instances_and_lost_gpus_are_not_shipped(tmp_path: Path) -> None:
    service = Service()
    delivery = _delivery(tmp_path, service)
    whole, lost = _cycle(0, gpus=2)
    mig = Sample("gpu", {**whole.labels, "uuid": "MIG-1", "mig_profile": "1g.10gb", "parent_uuid": "GPU-0"},
                 {"gpufinops_gpu_up": 1.0}, T0)  # fmt: skip
    lost = Sample("gpu", lost.labels, {"gpufinops_gpu_up": 0.0}, T0)
    assert delivery.enqueue([whole, mig, lost]) == 1
    delivery.send_next()
    assert [s["uuid"] for s in service.batches[0]["series"]] == ["GPU-0"]  # type: ignore[index]


def test_retry_after_as_an_http_date() -> None:
    now = datetime(2015, 10, 21, 7, 27, 58, tzinfo=UTC)
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now) == 2.0
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None
