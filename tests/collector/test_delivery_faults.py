"""Faults with real processes and sockets: a 2-hour outage and kill -9 lose and double nothing; a broken source
file fails only its source."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.orm import Session, sessionmaker

from collector.agent import Agent
from collector.delivery import Delivery
from collector.exposition import LatestSamples
from collector.shipper import Backoff, Shipper
from collector.sources.nvml import NvmlSource
from collector.spool import Spool
from finops.web.app import create_app
from tests.support.fake_pynvml import ManualClock
from tests.support.node_fixture import GPUS, eight_h100_nvml
from tests.support.servers import free_port, running
from tests.support.stored_readings import stored_readings

TOKEN = "fault-token"
FIXTURE_NODE = Path(__file__).parents[1] / "fixtures" / "node"
FILE_SOURCES = ("infiniband", "diskstats", "nfs", "lustre")
INTERVAL_SECONDS = 10
OUTAGE_CYCLES = 2 * 3600 // INTERVAL_SECONDS


def _drain(delivery: Delivery) -> float:
    """Send the whole backlog; returns readings per second."""
    started = time.perf_counter()
    shipped_before = delivery.shipped_samples
    while (delay := delivery.send_next()) is not None:
        assert delay == 0.0, "the service is up: every send succeeds"
    return (delivery.shipped_samples - shipped_before) / (time.perf_counter() - started)


def test_two_hour_outage_at_8_gpus_every_10_s_loses_and_doubles_nothing(
    shared_data: Path, sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    port = free_port()
    clock = ManualClock()
    shipper = Shipper(f"http://127.0.0.1:{port}", TOKEN, "gpu-fault-01")
    delivery = Delivery(Spool(tmp_path / "spool"), shipper, backoff=Backoff(0.5, 60.0))
    agent = Agent([NvmlSource(eight_h100_nvml(shared_data, clock), clock)], LatestSamples(), delivery.enqueue)
    for cycle in range(OUTAGE_CYCLES):
        clock.advance(INTERVAL_SECONDS)
        assert agent.cycle() == GPUS
        if cycle % 60 == 0:  # the sender keeps trying through the outage
            delay = delivery.send_next()
            assert delay is not None and delay > 0
    assert delivery.spool.pending_samples == OUTAGE_CYCLES * GPUS
    with running(create_app(sessions, TOKEN, clock=lambda: clock.now.timestamp()), port):  # the node's clock
        rate = _drain(delivery)
    print(f"\nbacklog of {OUTAGE_CYCLES * GPUS} readings drained at {rate:,.0f} readings/s")
    assert stored_readings(sessions) == (OUTAGE_CYCLES * GPUS, OUTAGE_CYCLES * GPUS)
    assert delivery.shipped_samples == OUTAGE_CYCLES * GPUS, "each reading was acknowledged exactly once"
    assert delivery.failed_sends == OUTAGE_CYCLES // 60
    assert delivery.spool.pending_samples == 0


def test_kill_9_during_an_outage_loses_at_most_the_last_interval(
    shared_data: Path, sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    port = free_port()
    spool_dir = tmp_path / "spool"
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.collector_process", str(spool_dir), f"http://127.0.0.1:{port}"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    last = -1
    deadline = time.monotonic() + 60
    while last < 100 and time.monotonic() < deadline:
        last = int(process.stdout.readline())
    process.send_signal(signal.SIGKILL)
    process.wait()
    # Cycles it reported between the line read last and its death are still in the pipe: the last reported counts.
    last = max([last, *(int(line) for line in process.stdout)])
    delivery = Delivery(Spool(spool_dir), Shipper(f"http://127.0.0.1:{port}", TOKEN, "gpu-fault-01"))
    node_clock = ManualClock().now.timestamp() + 3600  # the process's manual clock, past its cycles
    with running(create_app(sessions, TOKEN, clock=lambda: node_clock), port):
        _drain(delivery)
    rows, distinct = stored_readings(sessions)
    assert rows == distinct
    assert (last + 1) * GPUS <= rows <= (last + 2) * GPUS, "every cycle reported spooled arrived; at most one more"


def test_an_unreadable_source_file_fails_only_its_source(tmp_path: Path) -> None:
    """The collector process over a copy of the fixture node whose mountstats cannot be read (a directory)."""
    root = tmp_path / "node"
    shutil.copytree(FIXTURE_NODE, root)
    (root / "proc/self/mountstats").unlink()
    (root / "proc/self/mountstats").mkdir()
    port = free_port()
    command = [sys.executable, "-m", "finops.cli", "collector", "--service-url", "http://127.0.0.1:9",
               "--metrics-address", "127.0.0.1", "--metrics-port", str(port), "--spool-dir", str(tmp_path / "spool"),
               "--proc-root", str(root / "proc"), "--sys-root", str(root / "sys"), "--interval", "1",
               *[arg for name in FILE_SOURCES for arg in ("--source", name)]]  # fmt: skip
    process = subprocess.Popen(command, env={**os.environ, "FINOPS_INGEST_TOKEN": "unused"})
    try:
        success: dict[str, float] = {}
        deadline = time.monotonic() + 30
        while len(success) < 4:
            assert time.monotonic() < deadline, f"the collector reported only {success}"
            with contextlib.suppress(httpx.TransportError):
                text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
                for family in text_string_to_metric_families(text):
                    if family.name == "gpufinops_collector_source_success":
                        success = {s.labels["source"]: s.value for s in family.samples}
            time.sleep(0.2)
        assert success == {"infiniband": 1.0, "diskstats": 1.0, "nfs": 0.0, "lustre": 1.0}
        assert "gpufinops_infiniband_received_bytes_total{" in text
        assert "gpufinops_lustre_client_read_bytes_total{" in text
    finally:
        process.terminate()
        process.wait(timeout=30)
