"""The collector agent: /metrics exposition, fault isolation between sources, shipping with retries."""

from __future__ import annotations

import contextlib
import gzip
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import orjson
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from collector.agent import Agent
from collector.contract.sample import Sample
from collector.exposition import LatestSamples
from collector.shipper import ShipError, Shipper
from collector.sources.diskstats import DiskstatsSource
from collector.sources.nvml import NvmlSource
from tests.support.fake_pynvml import CAPTURES, FakeNvml, ManualClock, query_gpu_rows
from tests.support.servers import free_port

H100 = "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
FIXTURES = Path(__file__).parents[1] / "fixtures"


class BrokenSource:
    name = "broken"

    def collect(self) -> list[Sample]:
        raise OSError("device went away")


def _scrape(latest: LatestSamples) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    registry = CollectorRegistry()
    registry.register(latest)
    series: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            series.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return series


def test_one_failing_source_never_stops_the_others(shared_data: Path) -> None:
    clock = ManualClock()
    [row] = query_gpu_rows(shared_data / CAPTURES / H100, "load")
    row_idle = dict(row, **{"clocks_event_reasons.active": "0x0000000000000024"})  # sw_power_cap | sw_thermal
    latest = LatestSamples()
    nvml = NvmlSource(nvml=FakeNvml([row, row_idle], clock), clock=clock)
    disks = DiskstatsSource(FIXTURES / "diskstats" / "first", sys_root=FIXTURES / "no-sysfs")
    agent = Agent([BrokenSource(), nvml, disks], latest, sink=None)
    assert agent.cycle() == 0
    series = _scrape(latest)
    success = series["gpufinops_collector_source_success"]
    assert success == {(("source", "broken"),): 0.0, (("source", "nvml"),): 1.0, (("source", "diskstats"),): 1.0}
    power = series["gpufinops_gpu_power_watts"]
    assert sorted(power.values()) == [631.95, 631.95]
    assert {dict(labels)["gpu"] for labels in power} == {"0", "1"}
    reasons = {
        (dict(labels)["gpu"], dict(labels)["reason"]): value
        for labels, value in series["gpufinops_gpu_clocks_event_reason_active"].items()
        if value
    }
    assert reasons == {("1", "sw_power_cap"): 1.0, ("1", "sw_thermal"): 1.0}
    assert series["gpufinops_disk_read_bytes_total"]


def _gpu_sample() -> Sample:
    labels = {"gpu": "0", "uuid": "GPU-1", "model": "NVIDIA H100 80GB HBM3"}
    values = {"gpufinops_gpu_utilization_ratio": 0.5, "gpufinops_gpu_memory_total_bytes": 8.0}
    return Sample("gpu", labels, values, datetime(2026, 3, 1, tzinfo=UTC), job_id="77")


def test_shipper_retries_5xx_and_sends_gzip_json_with_the_token() -> None:
    seen: list[httpx.Request] = []
    codes = iter([503, 502, 200])

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        code = next(codes)
        return httpx.Response(code, json={"accepted": 1, "rejected": []} if code == 200 else {"detail": "busy"})

    sleeps: list[float] = []
    shipper = Shipper(
        "http://finops.test", "tok", "gpu-a-01", client=httpx.Client(transport=httpx.MockTransport(handler))
    )
    assert shipper.ship([_gpu_sample()], sleep=sleeps.append) == 1
    assert len(seen) == 3 and len(sleeps) == 2
    assert seen[0].headers["authorization"] == "Bearer tok"
    body = orjson.loads(gzip.decompress(seen[0].content))
    assert body["node"] == "gpu-a-01"
    assert body["gpus"] == [{"uuid": "GPU-1", "index": 0, "model": "NVIDIA H100 80GB HBM3", "memory_total_bytes": 8}]
    assert body["series"] == [
        {"uuid": "GPU-1", "ts": [1772323200], "utilization_ratio": [0.5], "job_id": ["77"]}  # 2026-03-01T00:00Z
    ]
    assert "samples" not in body


def test_shipper_does_not_retry_a_refused_batch() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(401, json={"detail": "missing or invalid bearer token"})

    client = httpx.Client(transport=httpx.MockTransport(handler))
    with pytest.raises(ShipError, match="401"):
        Shipper("http://finops.test", "bad", "n", client=client).ship([_gpu_sample()], sleep=lambda _: None)
    assert len(calls) == 1


def test_collector_command_serves_metrics_on_this_machine(tmp_path: Path) -> None:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "finops.cli", "collector", "--service-url", "http://127.0.0.1:9", "--source",
         "diskstats", "--metrics-port", str(port), "--interval", "1", "--spool-dir", str(tmp_path / "spool")],
        env={**os.environ, "FINOPS_INGEST_TOKEN": "unused"},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        text = ""
        while "gpufinops_collector_source_success{" not in text:
            assert time.monotonic() < deadline, "collector /metrics never reported its sources"
            with contextlib.suppress(httpx.TransportError):
                text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
            time.sleep(0.2)
        assert 'gpufinops_collector_source_success{source="diskstats"} 1.0' in text
        assert "gpufinops_disk_read_bytes_total{" in text
    finally:
        process.terminate()
        process.wait(timeout=30)
