"""finops/ingest/prometheus.py: a real Prometheus (Debian's package) scraping fixture dcgm-exporter and vLLM endpoints
on 127.0.0.1, pulled into both databases; chunking, errors and malformed series against httpx.MockTransport."""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlencode

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from collector.contract.dcgm_fields import FIELDS
from collector.contract.sample import Sample
from collector.contract.wire import ACTIVITY_COLUMNS, GpuReading, reading_dict
from finops.analysis.tokens import cost_per_million_tokens, generated_tokens
from finops.cli import app
from finops.cli.serve import prometheus_pull
from finops.db.models import Gpu, GpuSample, Node
from finops.ingest.prometheus import (
    MAX_POINTS_PER_SERIES,
    LabelNames,
    PrometheusClient,
    PrometheusError,
    form_body,
    parse_step,
)
from finops.ingest.prometheus_pull import (
    ACTIVITY_METRICS,
    CYCLE_FIELDS,
    PullOptions,
    ScheduledPull,
    import_range,
    pull,
    reading_values,
    step_chunks,
)
from finops.ledger.sql import ACTIVITIES
from finops.service.cost_metrics import CostMetrics
from finops.service.scheduler import start_scheduler
from finops.settings.combined import Settings
from finops.timeutil import from_epoch, to_epoch, utc_now
from tests.support.environment import debian_binary
from tests.support.prometheus_server import prometheus, wait_for
from tests.support.servers import free_port

MIB = 2**20
H100 = "GPU-5f2c3a4e-8b1d-4c6e-9a7f-1e2d3c4b5a60"
A100 = "GPU-a100b7c2-3d4e-4f5a-8b9c-0d1e2f3a4b5c"
L40S = "GPU-4a0c8e1f-2b3d-4e5f-a6b7-c8d9e0f1a2b3"


# --- fixture exporters ----------------------------------------------------------------------------------------------


class MetricsServer:
    """``/metrics`` on 127.0.0.1: ``render(n)`` for the n-th request (n = 1, 2, …), so values change per scrape."""

    def __init__(self, render: Callable[[int], str]) -> None:
        self.requests = 0
        lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with lock:
                    owner.requests += 1
                    body = render(owner.requests).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


@dataclass(frozen=True)
class FixtureGpu:
    """A GPU (or MIG instance) as dcgm-exporter labels it; its values at scrape k are functions of k and ``offset``."""

    labels: str
    offset: int
    total_mib: int
    utilization: str = "DCGM_FI_DEV_GPU_UTIL"


HOST_A = 'Hostname="gpu-a-01",DCGM_FI_DRIVER_VERSION="550.54.15"'
HOST_A_GPUS = [
    FixtureGpu(f'gpu="0",UUID="{H100}",pci_bus_id="00000000:18:00.0",device="nvidia0",'
               f'modelName="NVIDIA H100 80GB HBM3",{HOST_A},hpc_job="4242"', 1, 81559),
    FixtureGpu(f'gpu="1",UUID="{A100}",pci_bus_id="00000000:2A:00.0",device="nvidia1",'
               f'modelName="NVIDIA A100-SXM4-40GB",{HOST_A}', 2, 40960),
    # A MIG instance of the A100: read, never billed beside its GPU.
    FixtureGpu(f'gpu="1",UUID="{A100}",pci_bus_id="00000000:2A:00.0",device="nvidia1",'
               f'modelName="NVIDIA A100-SXM4-40GB",{HOST_A},GPU_I_PROFILE="3g.20gb",GPU_I_ID="1",hpc_job="4243"',
               7, 20096),
]  # fmt: skip
# Host B has no Hostname label (the node is instance's host) and DCGM profiling metrics only (GR_ENGINE_ACTIVE).
HOST_B_GPUS = [
    FixtureGpu(f'gpu="0",UUID="{L40S}",pci_bus_id="00000000:3B:00.0",device="nvidia0",modelName="NVIDIA L40S",'
               'DCGM_FI_DRIVER_VERSION="550.54.15",container="vllm",namespace="llm",pod="vllm-0"',
               3, 46068, utilization="DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
]  # fmt: skip
KINDS = {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "counter"}
HELP = {
    "DCGM_FI_DEV_SM_CLOCK": "SM clock frequency (in MHz).",
    "DCGM_FI_DEV_GPU_TEMP": "GPU temperature (in C).",
    "DCGM_FI_DEV_MEMORY_TEMP": "Memory temperature (in C).",
    "DCGM_FI_DEV_POWER_USAGE": "Power draw (in W).",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "Total energy consumption since boot (in mJ).",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "Total number of PCIe retries.",
    "DCGM_FI_DEV_GPU_UTIL": "GPU utilization (in %).",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "Memory utilization (in %).",
    "DCGM_FI_DEV_FB_FREE": "Framebuffer memory free (in MiB).",
    "DCGM_FI_DEV_FB_USED": "Framebuffer memory used (in MiB).",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "Current clock event reasons (bitmask).",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "Ratio of time the graphics engine is active.",
}


def raw_values(gpu: FixtureGpu, k: int) -> dict[str, float]:
    """What dcgm-exporter prints for ``gpu`` at scrape ``k``, in the fields' own units (%, MiB, W, mJ, °C, MHz)."""
    o = gpu.offset
    used = 1000 * o + k
    busy = (7 * k + o) % 100
    return {
        "DCGM_FI_DEV_SM_CLOCK": 1000 + 100 * o + k,
        "DCGM_FI_DEV_GPU_TEMP": 30 + o + k % 20,
        "DCGM_FI_DEV_MEMORY_TEMP": 40 + o,
        "DCGM_FI_DEV_POWER_USAGE": 100 + 10 * o + 0.5 * k,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 1_000_000_000 + 1_000_000 * o + 250_000 * k,
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0,
        gpu.utilization: busy if gpu.utilization == "DCGM_FI_DEV_GPU_UTIL" else busy / 100,
        "DCGM_FI_DEV_MEM_COPY_UTIL": (3 * k + o) % 100,
        "DCGM_FI_DEV_FB_FREE": gpu.total_mib - used,
        "DCGM_FI_DEV_FB_USED": used,
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 4 if k % 2 else 0,
    }


def expected_reading(offset: int, k: int) -> dict[str, float]:
    """The stored values (base units) of the GPU with ``offset`` at scrape ``k``: converted here by hand."""
    return {
        "utilization_ratio": ((7 * k + offset) % 100) / 100,
        "memory_utilization_ratio": ((3 * k + offset) % 100) / 100,
        "memory_used_bytes": (1000 * offset + k) * MIB,
        "power_watts": 100 + 10 * offset + 0.5 * k,
        "energy_joules": (1_000_000_000 + 1_000_000 * offset + 250_000 * k) / 1000,
        "temperature_celsius": 30 + offset + k % 20,
        "sm_clock_hertz": (1000 + 100 * offset + k) * 1e6,
        "clocks_event_reasons": 4 if k % 2 else 0,
    }


def dcgm_exposition(gpus: list[FixtureGpu], k: int, extra: str = "") -> str:
    """dcgm-exporter's text format: one family per field, HELP and TYPE lines, one line per GPU."""
    by_field: dict[str, list[str]] = {}
    for gpu in gpus:
        for name, value in raw_values(gpu, k).items():
            by_field.setdefault(name, []).append(f"{name}{{{gpu.labels}}} {value}")
    families = [
        f"# HELP {name} {HELP[name]}\n# TYPE {name} {KINDS.get(name, 'gauge')}\n" + "\n".join(lines)
        for name, lines in by_field.items()
    ]
    return "\n".join(families) + "\n" + extra


# A series without UUID: skipped with a log line naming it.
NO_UUID = 'DCGM_FI_DEV_GPU_UTIL{gpu="9",device="nvidia9",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-a-01"} 55\n'

VLLM_RATES = {'namespace="llm",pod="vllm-0"': 1000.0, 'namespace="llm",pod="vllm-1"': 250.0, 'hpc_job="4242"': 400.0}


def vllm_exposition(t0: float) -> str:
    """vLLM's ``/metrics`` counter of generated tokens, growing at a constant rate per series from a large base."""
    lines = [
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
        "# TYPE vllm:generation_tokens_total counter",
    ]
    elapsed = time.time() - t0
    for labels, rate in VLLM_RATES.items():
        model = 'model_name="meta-llama/Llama-3.1-8B-Instruct"'
        lines.append(f"vllm:generation_tokens_total{{{model},{labels}}} {1_000_000 + rate * elapsed:.3f}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Telemetry:
    url: str
    host_b_node: str


@pytest.fixture(scope="module")
def telemetry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Telemetry]:
    """One Prometheus scraping two fixture dcgm-exporters and a fixture vLLM every second, with a few scrapes in."""
    binary = debian_binary("prometheus")
    t0 = time.time()
    servers = [
        MetricsServer(lambda k: dcgm_exposition(HOST_A_GPUS, k, NO_UUID)),
        MetricsServer(lambda k: dcgm_exposition(HOST_B_GPUS, k)),
        MetricsServer(lambda k: vllm_exposition(t0)),
    ]
    jobs = {"dcgm-exporter": [servers[0].address, servers[1].address], "vllm": [servers[2].address]}
    try:
        with prometheus(binary, tmp_path_factory.mktemp("prometheus"), jobs) as url:
            wait_for(url, 'count_over_time(DCGM_FI_DEV_FB_USED{Hostname="gpu-a-01"}[1m]) >= 4')
            wait_for(url, 'count_over_time(DCGM_FI_DEV_FB_USED{namespace="llm"}[1m]) >= 4')
            wait_for(url, 'count_over_time(vllm:generation_tokens_total{pod="vllm-0"}[1m]) >= 7')
            yield Telemetry(url, "127.0.0.1")
    finally:
        for server in servers:
            server.close()


def _stored(sessions: sessionmaker[Session]) -> list[tuple[Any, ...]]:
    with sessions() as session:
        rows = session.execute(
            select(Node.hostname, Gpu.uuid, GpuSample).select_from(GpuSample).join(Gpu).join(Node)
        ).all()
        return sorted(
            (host, uuid, s.ts, s.utilization_ratio, s.memory_utilization_ratio, s.memory_used_bytes, s.power_watts,
             s.energy_joules, s.temperature_celsius, s.sm_clock_hertz, s.clocks_event_reasons, s.job_id)
            for host, uuid, s in rows
        )  # fmt: skip


# --- against the real Prometheus ------------------------------------------------------------------------------------


def test_pull_stores_dcgm_series_with_units_jobs_and_no_mig(
    telemetry: Telemetry, sessions: sessionmaker[Session], caplog: pytest.LogCaptureFixture
) -> None:
    for uuid in (H100, A100, L40S):
        wait_for(telemetry.url, f'count_over_time(DCGM_FI_DEV_FB_USED{{UUID="{uuid}"}}[1m]) >= 5')
    end = utc_now().replace(microsecond=0)
    start = end - timedelta(minutes=10)  # mostly before Prometheus started: no data there, which is not an error
    client = PrometheusClient(telemetry.url)
    with caplog.at_level(logging.WARNING, logger="finops.ingest.prometheus"):
        result = import_range(sessions, client, start, end, PullOptions(step_seconds=1))

    assert 'DCGM_FI_DEV_GPU_UTIL{Hostname="gpu-a-01",' in caplog.text and 'gpu="9"' in caplog.text
    assert "skipped: no UUID label" in caplog.text
    with sessions() as session:
        inventory = {
            gpu.uuid: (host, gpu.gpu_index, gpu.model, gpu.memory_total_bytes)
            for gpu, host in session.execute(select(Gpu, Node.hostname).join(Node))
        }
    assert inventory == {
        H100: ("gpu-a-01", 0, "NVIDIA H100 80GB HBM3", 81559 * MIB),  # FB_USED + FB_FREE
        A100: ("gpu-a-01", 1, "NVIDIA A100-SXM4-40GB", 40960 * MIB),
        L40S: (telemetry.host_b_node, 0, "NVIDIA L40S", 46068 * MIB),
    }, "the MIG instance has no GPU row of its own"

    rows = _stored(sessions)
    assert result.readings == len(rows) and result.nodes == {"gpu-a-01", telemetry.host_b_node}
    assert result.gpus == {H100, A100, L40S} and result.mig_readings > 0
    offsets = {H100: 1, A100: 2, L40S: 3}
    jobs = {H100: "4242", A100: None, L40S: "llm/vllm-0"}
    for uuid, offset in offsets.items():
        mine = [row for row in rows if row[1] == uuid]
        stamps = [to_epoch(row[2]) for row in mine]
        assert stamps == list(range(stamps[0], stamps[-1] + 1)), "a reading every 1 s step from the first scrape on"
        assert start <= mine[0][2] and mine[-1][2] < end
        scrapes = []
        for row in mine:
            k = row[5] // MIB - 1000 * offset  # memory_used_bytes names the scrape
            scrapes.append(k)
            stored = dict(zip(expected_reading(offset, k), row[3:11], strict=True))
            assert stored == pytest.approx(expected_reading(offset, k)), (uuid, row[2])
            assert row[11] == jobs[uuid]
        assert scrapes == sorted(scrapes) and len(set(scrapes)) >= 3, "values changed between scrapes"
    assert all(row[5] < 7000 * MIB for row in rows), "no MIG instance reading stored on its parent"

    import_range(sessions, client, start, end, PullOptions(step_seconds=1))
    assert _stored(sessions) == rows, "pulling the same range again stores nothing new"


def test_pulled_readings_match_prometheus_at_each_step(telemetry: Telemetry) -> None:
    """The instants are multiples of the step, and each value is Prometheus' own answer at that instant."""
    # End at the newest scrape already stored, so no later scrape can change the answer at any pulled instant.
    (latest,) = wait_for(telemetry.url, f'timestamp(DCGM_FI_DEV_FB_USED{{UUID="{H100}"}})')
    end = from_epoch(int(float(latest["value"][1])))
    start = end - timedelta(seconds=30)
    client = PrometheusClient(telemetry.url)
    chunks = list(pull(client, start, end, PullOptions(step_seconds=5, max_points_per_query=2)))
    assert all(chunk.last - chunk.first <= 5 for chunk in chunks)
    readings = [r for chunk in chunks for batch in chunk.batches if batch.node == "gpu-a-01" for r in batch.samples]
    h100 = [r for r in readings if r.uuid == H100]
    assert h100 and all(to_epoch(r.ts) % 5 == 0 for r in h100)
    for reading in h100:
        (answer,) = client.query(f'DCGM_FI_DEV_FB_USED{{UUID="{H100}"}}', reading.ts)
        assert reading.memory_used_bytes == answer.value * MIB


def test_a_selector_and_the_cli(
    telemetry: Telemetry, database_url: str, engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FINOPS_DATABASE_URL", database_url)
    end = utc_now().replace(microsecond=0)
    args = ["import", "prometheus", "--url", telemetry.url, "--start", (end - timedelta(minutes=2)).isoformat(),
            "--end", end.isoformat(), "--step", "1s", "--selector", '{Hostname="gpu-a-01"}']  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "of 2 GPUs on 1 nodes" in result.output
    with engine.connect() as connection:
        assert connection.execute(select(Node.hostname)).scalars().all() == ["gpu-a-01"]

    dead = f"http://127.0.0.1:{free_port()}"
    failed = CliRunner().invoke(app, [*args[:3], dead, *args[4:]])
    assert failed.exit_code == 1
    assert 'error: DCGM_FI_DEV_GPU_UTIL{Hostname="gpu-a-01"} over [' in failed.output and dead in failed.output
    bad_step = CliRunner().invoke(app, [*args[:-4], "--step", "500ms"])
    assert bad_step.exit_code == 2 and "whole number of seconds" in bad_step.output


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_scheduler_pulls_when_a_url_is_configured(
    telemetry: Telemetry, sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    from prometheus_client import CollectorRegistry

    from finops.analysis.idle import IdlePolicy
    from finops.pricing.catalog import Pricing, PricingModel, load_catalog

    assert prometheus_pull(Settings()) is None
    monkeypatch.setenv("FINOPS_PROMETHEUS_URL", telemetry.url)
    monkeypatch.setenv("FINOPS_PROMETHEUS_SELECTOR", '{namespace="llm"}')
    monkeypatch.setenv("FINOPS_PROMETHEUS_STEP_SECONDS", "5")
    scheduled = prometheus_pull(Settings(rollup_interval_seconds=3600))
    assert scheduled is not None and scheduled.lookback == timedelta(hours=2)
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    running = start_scheduler(sessions, pricing, IdlePolicy(), CostMetrics(CollectorRegistry()), 3600, scheduled)
    try:
        deadline = time.monotonic() + 30
        while not (rows := _stored(sessions)):
            assert time.monotonic() < deadline, "the scheduled pull stored nothing"
            time.sleep(0.2)
    finally:
        running.shutdown()
    assert {row[1] for row in rows} == {L40S} and all(to_epoch(row[2]) % 5 == 0 for row in rows)


def _newest_vllm_scrape(url: str, samples: int, window: str) -> datetime:
    """The instant of the newest scrape of the fixture vLLM once the ``window`` before it holds ``samples`` scrapes
    (waits, bounded, for the machine to have scraped that often)."""
    deadline = time.monotonic() + 60
    while True:
        (newest,) = wait_for(url, 'timestamp(vllm:generation_tokens_total{pod="vllm-0"})')
        at = float(newest["value"][1])
        counted = httpx.get(
            f"{url}/api/v1/query",
            params={"query": f'count_over_time(vllm:generation_tokens_total{{pod="vllm-0"}}[{window}])', "time": at},
        ).json()["data"]["result"]
        if counted and float(counted[0]["value"][1]) >= samples:
            return from_epoch(0) + timedelta(seconds=at)
        assert time.monotonic() < deadline, f"fewer than {samples} vLLM scrapes in {window} after 60 s"
        time.sleep(0.5)


def test_tokens_of_vllm_jobs_from_a_real_prometheus(telemetry: Telemetry) -> None:
    # The window ends 1 ms after the newest scrape stored: no later scrape can change what it holds.
    end = _newest_vllm_scrape(telemetry.url, 3, "4s") + timedelta(milliseconds=1)
    start = end - timedelta(seconds=4)
    client = PrometheusClient(telemetry.url)
    for job, labels in (("llm/vllm-0", 'namespace="llm",pod="vllm-0"'), ("llm/vllm-1", 'namespace="llm",pod="vllm-1"'),
                        ("4242", 'hpc_job="4242"')):  # fmt: skip
        tokens = generated_tokens(client, job, start, end)
        raw = httpx.get(
            f"{telemetry.url}/api/v1/query",
            params={"query": f"vllm:generation_tokens_total{{{labels}}}[4000ms]", "time": end.timestamp() - 0.001},
        ).json()["data"]["result"][0]["values"]
        assert len(raw) >= 3
        seen, span = float(raw[-1][1]) - float(raw[0][1]), float(raw[-1][0]) - float(raw[0][0])
        # increase() is the growth Prometheus saw, extrapolated from the samples' span to at most the whole window.
        assert seen - 1 <= tokens <= seen * 4 / span + 1, job
        assert 0.5 < seen / span / VLLM_RATES[labels] < 1.5, f"{job}: each series grows at its own rate"
    assert generated_tokens(client, "llm/nobody", start, end) == 0
    tokens = generated_tokens(client, "llm/vllm-0", start, end)
    per_million = cost_per_million_tokens(Decimal("0.50"), tokens)
    assert per_million is not None and abs(per_million * tokens / 1_000_000 - Decimal("0.50")) < Decimal("0.01")


# --- against httpx.MockTransport ------------------------------------------------------------------------------------


def _matrix(*series: dict[str, Any]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "matrix", "result": list(series)}}


def form(request: httpx.Request) -> dict[str, str]:
    """The parameters of a query the client POSTed as a form body."""
    assert request.method == "POST" and request.headers["content-type"] == "application/x-www-form-urlencoded"
    return dict(parse_qsl(request.content.decode(), strict_parsing=True))


def test_form_body_is_what_urlencode_writes() -> None:
    params = {"query": 'sum by (a) (x{UUID=~"GPU-1\\.a|b c", d!="é&+%"}[5m] @ 17.999)', "time": "1.000"}
    assert form_body(params) == urlencode(params).encode()
    assert form_body({"query": "up"}) == b"query=up"


def _client(handler: Callable[[httpx.Request], httpx.Response]) -> PrometheusClient:
    return PrometheusClient("http://prometheus:9090", client=httpx.Client(transport=httpx.MockTransport(handler)))


def _labels(**extra: str) -> dict[str, str]:
    return {"gpu": "0", "UUID": "GPU-1", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "n1", **extra}


def test_step_chunks() -> None:
    t = datetime(2026, 1, 5, tzinfo=UTC)
    base = to_epoch(t)
    assert step_chunks(t + timedelta(seconds=30), t + timedelta(minutes=10), 60, 11_000) == [(base + 60, base + 540)]
    assert step_chunks(t, t + timedelta(minutes=6), 60, 3) == [
        (base, base + 120), (base + 180, base + 300),
    ], "end is exclusive"  # fmt: skip
    assert (
        step_chunks(t, t, 60, 10) == []
        and step_chunks(t + timedelta(seconds=1), t + timedelta(seconds=59), 60, 10) == []
    )
    with pytest.raises(ValueError, match="before start"):
        step_chunks(t, t - timedelta(seconds=1), 60, 10)
    with pytest.raises(ValueError, match="timezone-aware"):
        step_chunks(datetime(2026, 1, 5), t, 60, 10)  # noqa: DTZ001


def test_a_long_range_is_split_within_the_point_limit() -> None:
    requests: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        params = form(request)
        if not params["query"].startswith("DCGM_FI_DEV_GPU_UTIL"):
            return httpx.Response(200, json=_matrix())
        first, last, step = (int(float(params[name])) for name in ("start", "end", "step"))
        points = [[ts, "50"] for ts in range(first, last + 1, step)]
        return httpx.Response(200, json=_matrix({"metric": _labels(), "values": points}))

    start = datetime(2026, 1, 1, tzinfo=UTC)
    end = start + timedelta(minutes=25_000)
    options = PullOptions(step_seconds=60, max_points_per_query=MAX_POINTS_PER_SERIES)
    chunks = list(pull(_client(answer), start, end, options))
    windows = [
        (float(form(r)["start"]), float(form(r)["end"])) for r in requests if form(r)["query"] == "DCGM_FI_DEV_GPU_UTIL"
    ]
    assert len(windows) == 3 and len(requests) == 3 * (len(options.fields) + len(CYCLE_FIELDS))
    assert all((last - first) / 60 + 1 <= MAX_POINTS_PER_SERIES for first, last in windows)
    assert windows[0][0] == start.timestamp() and windows[-1][1] == (end - timedelta(minutes=1)).timestamp()
    assert all(b[0] == a[1] + 60 for a, b in itertools.pairwise(windows)), "contiguous, no overlap"
    stamps = [reading.ts for chunk in chunks for batch in chunk.batches for reading in batch.samples]
    assert len(stamps) == len(set(stamps)) == 25_000
    assert {reading.utilization_ratio for c in chunks for b in c.batches for reading in b.samples} == {0.5}


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (httpx.Response(400, json={"status": "error", "errorType": "bad_data",
                                   "error": 'invalid parameter "query": 1:22: parse error: unexpected "}"'}),
         "HTTP 400 bad_data: invalid parameter"),
        (httpx.Response(422, json={"status": "error", "errorType": "execution", "error": "many-to-many matching"}),
         "HTTP 422 execution: many-to-many"),
        (httpx.Response(503, json={"status": "error", "errorType": "timeout",
                                   "error": "query timed out in expression evaluation"}),
         "HTTP 503 timeout: query timed out"),
        (httpx.Response(502, text="<html>Bad Gateway</html>"), "HTTP 502 from http://prometheus:9090, not a"),
        (httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": []}}),
         "unexpected result"),
    ],
)  # fmt: skip
def test_prometheus_errors_name_the_query(response: httpx.Response, message: str) -> None:
    client = _client(lambda request: response)
    options = PullOptions(selector='{cluster="a"}')
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with pytest.raises(
        PrometheusError, match=re.escape('DCGM_FI_DEV_GPU_UTIL{cluster="a"} over [2026-01-01')
    ) as raised:
        list(pull(client, start, start + timedelta(hours=1), options))
    assert message in str(raised.value)


def test_a_timeout_or_no_connection_names_the_query() -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    at = datetime(2026, 1, 1, tzinfo=UTC)
    with pytest.raises(PrometheusError, match=r"^up at 2026-01-01T00:00:00\+00:00: .* did not answer in time"):
        _client(slow).query("up", at)
    with pytest.raises(PrometheusError, match=r"up over .*: ConnectError: connection refused"):
        _client(refused).query_range("up", at, at, 60)


def test_malformed_series_are_skipped_and_named(caplog: pytest.LogCaptureFixture) -> None:
    at = to_epoch(datetime(2026, 1, 1, tzinfo=UTC))

    def answer(request: httpx.Request) -> httpx.Response:
        query = form(request)["query"]
        if query == "DCGM_FI_DEV_GPU_UTIL":
            return httpx.Response(200, json=_matrix(
                {"metric": _labels(__name__="DCGM_FI_DEV_GPU_UTIL"), "values": [[at, "40"]]},
                {"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "1", "modelName": "T", "Hostname": "n1"},
                 "values": [[at, "10"]]},
                {"metric": _labels(__name__="DCGM_FI_DEV_GPU_UTIL", gpu="2", UUID="GPU-2"), "values": [[at, "lots"]]},
                {"metric": "not labels", "values": [[at, "1"]]},
                {"metric": _labels(__name__="DCGM_FI_DEV_GPU_UTIL", gpu="x", UUID="GPU-3"), "values": [[at, "1"]]},
            ))  # fmt: skip
        if query == "DCGM_FI_DEV_POWER_USAGE":
            return httpx.Response(200, json=_matrix({"metric": _labels(), "values": [[at, "123.5"]]}))
        return httpx.Response(200, json=_matrix())

    with caplog.at_level(logging.WARNING, logger="finops.ingest.prometheus"):
        (chunk,) = pull(_client(answer), from_epoch(at), from_epoch(at + 1), PullOptions())
    (batch,) = chunk.batches
    assert batch.node == "n1" and [(r.uuid, r.utilization_ratio, r.power_watts) for r in batch.samples] == [
        ("GPU-1", 0.4, 123.5)
    ]
    assert 'DCGM_FI_DEV_GPU_UTIL{Hostname="n1",gpu="1",modelName="T"} skipped: no UUID label' in caplog.text
    assert 'UUID="GPU-2"' in caplog.text and "value 'lots' is not a number" in caplog.text
    assert "malformed series {'metric': 'not labels'" in caplog.text
    assert "GPU index gpu='x' is not a number" in caplog.text


def test_label_names_and_node_from_instance(caplog: pytest.LogCaptureFixture) -> None:
    at = to_epoch(datetime(2026, 1, 1, tzinfo=UTC))
    long_pod = "p" * 320

    def answer(request: httpx.Request) -> httpx.Response:
        if form(request)["query"] != "DCGM_FI_DEV_FB_USED":
            return httpx.Response(200, json=_matrix())
        return httpx.Response(200, json=_matrix(
            {"metric": {"device_index": "0", "gpu_uuid": "GPU-a", "model": "M", "node": "n7", "slurm_job": "77"},
             "values": [[at, "10"]]},
            {"metric": {"device_index": "0", "gpu_uuid": "GPU-b", "model": "M", "instance": "10.0.0.5:9400",
                        "namespace": "ns", "pod": long_pod}, "values": [[at, "20"]]},
            {"metric": {"device_index": "1", "gpu_uuid": "GPU-c", "model": "M", "instance": "[fd00::1]:9400"},
             "values": [[at, "30"]]},
        ))  # fmt: skip

    names = LabelNames.parse(["hostname=node", "gpu=device_index", "uuid=gpu_uuid", "model=model", "hpc_job=slurm_job"])
    with caplog.at_level(logging.WARNING, logger="finops.ingest.prometheus"):
        (chunk,) = pull(_client(answer), from_epoch(at), from_epoch(at + 1), PullOptions(labels=names))
    found = {(b.node, r.uuid, r.memory_used_bytes, r.job_id) for b in chunk.batches for r in b.samples}
    assert found == {("n7", "GPU-a", 10 * MIB, "77"), ("10.0.0.5", "GPU-b", 20 * MIB, None),
                     ("fd00::1", "GPU-c", 30 * MIB, None)}  # fmt: skip
    assert f"job id 'ns/{long_pod}' not stored" in caplog.text, "a job id too long for the wire format is dropped"
    with pytest.raises(ValueError, match="KEY one of hostname, instance"):
        LabelNames.parse(["host=node"])


def test_options_are_validated() -> None:
    with pytest.raises(ValueError, match="selector 'cluster=\"a\"': expected label matchers in braces"):
        PullOptions(selector='cluster="a"')
    with pytest.raises(ValueError, match="utilization_fields"):
        PullOptions(utilization_fields=("DCGM_FI_DEV_SM_CLOCK",))
    with pytest.raises(ValueError, match="max_points_per_query: 11001"):
        PullOptions(max_points_per_query=11_001)
    with pytest.raises(ValueError, match="step_seconds"):
        PullOptions(step_seconds=0)
    assert PullOptions(selector=' { cluster="a", } ').query("DCGM_FI_DEV_FB_USED") == 'DCGM_FI_DEV_FB_USED{cluster="a"}'
    assert [parse_step(text) for text in ("60s", "1m", "1h30m", "90", "2d")] == [60, 60, 5400, 90, 172800]
    for bad in ("500ms", "1.5", "abc", "", "0s"):
        with pytest.raises(ValueError, match="step"):
            parse_step(bad)


def test_the_pulled_fields_fill_every_reading_field_of_the_wire_format() -> None:
    raw = {name: 1.0 for name in PullOptions().dcgm_fields}
    values = reading_values(raw, ("DCGM_FI_PROF_GR_ENGINE_ACTIVE",))
    reading = reading_dict(Sample("gpu", {"uuid": "GPU-1"}, values, utc_now()))
    assert set(GpuReading.model_fields) - {"uuid", "ts", "job_id"} <= set(reading)
    assert reading["utilization_ratio"] == 1.0, "GR_ENGINE_ACTIVE is a ratio"
    assert reading_values(raw, ("DCGM_FI_DEV_GPU_UTIL",))["gpufinops_gpu_utilization_ratio"] == 0.01, "GPU_UTIL is %"


def test_activity_fields_are_pulled_once_and_stay_null_when_not_exported() -> None:
    """Every DCGM field of an activity metric is pulled, each once (GR_ENGINE_ACTIVE is also the utilisation
    fallback); a field the exporter does not export leaves its activity absent (stored null), never 0."""
    fields = PullOptions().dcgm_fields
    assert len(fields) == len(set(fields))
    assert {name for name, spec in FIELDS.items() if spec.metric in ACTIVITY_METRICS} <= set(fields)
    assert tuple(ACTIVITY_METRICS.values()) == ACTIVITIES
    # The busy Tesla T4 capture's profiling fields (shared_data dcgm-profiling-captures): no SM, FP pipe field.
    raw = {"DCGM_FI_DEV_GPU_UTIL": 91.0, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.156205,
           "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.005822, "DCGM_FI_PROF_DRAM_ACTIVE": 0.092781}  # fmt: skip
    reading = reading_dict(
        Sample("gpu", {"uuid": "GPU-1"}, reading_values(raw, PullOptions().utilization_fields), utc_now())
    )
    assert {column: reading.get(column) for column in ACTIVITY_COLUMNS} == {
        "sm_active_ratio": None, "sm_occupancy_ratio": None, "tensor_active_ratio": 0.005822,
        "dram_active_ratio": 0.092781, "fp64_active_ratio": None, "fp32_active_ratio": None,
        "fp16_active_ratio": None, "graphics_engine_active_ratio": 0.156205,
    }  # fmt: skip
    assert reading["utilization_ratio"] == 0.91
    without_util = reading_values(
        {k: v for k, v in raw.items() if k != "DCGM_FI_DEV_GPU_UTIL"}, PullOptions().utilization_fields
    )
    assert without_util["gpufinops_gpu_utilization_ratio"] == without_util["gpufinops_gpu_graphics_engine_active_ratio"]


def test_generated_tokens_query() -> None:
    seen: list[dict[str, str]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(form(request))
        result = [{"metric": {"pod": "a"}, "value": [0, "1999.5"]}, {"metric": {"pod": "b"}, "value": [0, "0.25"]}]
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": result}})

    start = datetime(2026, 1, 1, tzinfo=UTC)
    end = start + timedelta(hours=1)
    client = _client(answer)
    assert generated_tokens(client, "llm/vllm-0", start, end, selector='{cluster="a"}') == 2000  # 1999.75, rounded
    assert seen[0]["query"] == (
        'sum by (namespace, pod) (increase(vllm:generation_tokens_total{cluster="a", namespace="llm", pod="vllm-0"}'
        "[3600000ms]))"
    )
    assert float(seen[0]["time"]) == end.timestamp() - 0.001, "the window is [start, end)"
    generated_tokens(client, '42"1', start, end)
    assert seen[1]["query"] == 'sum by (hpc_job) (increase(vllm:generation_tokens_total{hpc_job="42\\"1"}[3600000ms]))'
    for job in ("", "llm/", "/pod", "a/b/c"):
        with pytest.raises(ValueError, match="job"):
            generated_tokens(client, job, start, end)
    with pytest.raises(ValueError, match="is not after start"):
        generated_tokens(client, "1", end, start)


def test_cost_per_million_tokens() -> None:
    assert cost_per_million_tokens(Decimal("12.50"), 3_000_000) == Decimal("4.166667")
    assert cost_per_million_tokens(Decimal("2"), 1_000_000) == Decimal("2.000000")
    assert cost_per_million_tokens(Decimal("0.0000025"), 1_000_000) == Decimal("0.000002"), "half-even"
    assert cost_per_million_tokens(Decimal("0.0000035"), 1_000_000) == Decimal("0.000004"), "half-even"
    assert cost_per_million_tokens(Decimal("5"), 0) is None
    with pytest.raises(ValueError, match="tokens: -1 is negative"):
        cost_per_million_tokens(Decimal("5"), -1)
    with pytest.raises(ValueError, match="cost"):
        cost_per_million_tokens(Decimal("NaN"), 10)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_scheduled_pull_covers_twice_its_interval(sessions: sessionmaker[Session]) -> None:
    windows: dict[str, set[tuple[float, float]]] = {"gauges": set(), "counters": set()}

    def answer(request: httpx.Request) -> httpx.Response:
        kind = "counters" if form(request)["query"] in CYCLE_FIELDS else "gauges"
        windows[kind].add((float(form(request)["start"]), float(form(request)["end"])))
        return httpx.Response(200, json=_matrix())

    now = datetime(2026, 1, 1, 12, 0, 30, 500_000, tzinfo=UTC)
    scheduled = ScheduledPull(_client(answer), PullOptions(step_seconds=60), 300, clock=lambda: now)
    result = scheduled.run(sessions)
    assert result.readings == 0 and result.chunks == 1
    first, last = to_epoch(datetime(2026, 1, 1, 11, 51, tzinfo=UTC)), to_epoch(now.replace(second=0))
    assert windows == {"gauges": {(first, last)}, "counters": {(first - 60, last)}}, "counters: a base a step before"


def test_no_data_is_not_an_error() -> None:
    client = _client(lambda request: httpx.Response(200, json=_matrix()))
    start = datetime(2026, 1, 1, tzinfo=UTC)
    assert all(chunk.batches == [] for chunk in pull(client, start, start + timedelta(hours=1), PullOptions()))
