"""A spool whose file system fills up (a real 256 KiB tmpfs): the collector keeps running, drops the newest cycles
(counted, logged once), delivers what is spooled, starts on a full disk, and spools again once there is room."""

from __future__ import annotations

import contextlib
import errno
import logging
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from sqlalchemy.orm import Session, sessionmaker

from collector import node as node_process
from collector.agent import Agent
from collector.contract.sample import Sample
from collector.delivery import Delivery
from collector.exposition import DeliveryStats, LatestSamples
from collector.shipper import Backoff, Shipper
from collector.spool import Spool
from finops.web.app import create_app
from tests.support.servers import free_port, running
from tests.support.stored_readings import stored_readings

TOKEN = "full-disk-token"
GPUS = 8
T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs mounted for the test (skipped where mounting is not permitted), unmounted after."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount_point)],
                             capture_output=True, text=True)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


def _fill(directory: Path) -> Path:
    """Write a filler file until the file system answers ENOSPC; returns it."""
    filler = directory / "filler"
    with filler.open("wb", buffering=0) as handle, contextlib.suppress(OSError):
        while True:
            handle.write(b"\0" * 4096)
    with pytest.raises(OSError) as full:
        (directory / "probe").write_bytes(b"\0" * 4096)
    assert full.value.errno == errno.ENOSPC
    (directory / "probe").unlink(missing_ok=True)
    return filler


class Gpus:
    """A source of 8 GPUs read every 10 s from :data:`T0` on."""

    name = "nvml"

    def __init__(self) -> None:
        self.cycles = 0

    def collect(self) -> list[Sample]:
        ts = T0 + timedelta(seconds=10 * self.cycles)
        self.cycles += 1
        return [
            Sample(
                "gpu",
                {"gpu": str(i), "uuid": f"GPU-full-{i}", "model": "H100", "mig_profile": "", "parent_uuid": ""},
                {"gpufinops_gpu_utilization_ratio": 0.5, "gpufinops_gpu_up": 1.0},
                ts,
            )
            for i in range(GPUS)
        ]


def _unspooled(delivery: Delivery) -> float:
    """``gpufinops_collector_unspooled_samples_total{reason="disk_full"}`` as the collector's /metrics shows it."""
    registry = CollectorRegistry()
    registry.register(DeliveryStats(delivery))
    value = registry.get_sample_value("gpufinops_collector_unspooled_samples_total", {"reason": "disk_full"})
    assert value is not None, generate_latest(registry).decode()
    return value


def test_an_append_the_full_disk_refuses_leaves_the_spool_as_it_was(small_disk: Path) -> None:
    spool = Spool(small_disk / "spool")
    for i in range(3):
        spool.append(f"batch-{i}".encode(), 8)
    filler = _fill(small_disk)
    with pytest.raises(OSError) as refused:
        for _ in range(100):  # the first appends may still fit in the segment's last page
            spool.append(b"x" * 8000, 8)
    assert refused.value.errno == errno.ENOSPC
    records = spool.peek(10**9)
    assert [r.payload for r in records][:3] == [b"batch-0", b"batch-1", b"batch-2"]
    spooled = spool.pending_samples
    assert Spool(small_disk / "spool").pending_samples == spooled, "no torn record: a restart reads the same"
    spool.ack(records)  # the cursor cannot be saved on the full disk: kept in memory, delivery goes on
    assert spool.pending_samples == 0 and spool.peek(10**9) == []
    assert list((small_disk / "spool").glob("*.seg")) == [], "the delivered segment is deleted, freeing its room"
    filler.unlink()
    spool.append(b"after", 8)
    assert [r.payload for r in Spool(small_disk / "spool").peek(10**9)] == [b"after"]


def test_a_full_spool_disk_drops_new_cycles_and_delivers_the_spooled_ones_also_after_a_restart(
    small_disk: Path, sessions: sessionmaker[Session], caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    source = Gpus()
    spool_dir = small_disk / "spool"

    def collector() -> tuple[Delivery, Agent]:
        shipper = Shipper(f"http://127.0.0.1:{port}", TOKEN, "gpu-full-01")
        delivery = Delivery(Spool(spool_dir), shipper, backoff=Backoff(0.01, 0.05))
        return delivery, Agent([source], LatestSamples(), delivery.enqueue)

    delivery, agent = collector()
    caplog.set_level(logging.INFO, logger="collector")
    spooled = 0
    while (taken := agent.cycle()) == GPUS:  # the service is down: the spool grows until the disk is full
        spooled += GPUS
        assert spooled < 10_000, "a 256 KiB disk fills"
    assert taken == 0 and spooled > 0
    for _ in range(20):
        assert agent.cycle() == 0, "each new cycle is dropped, the collector runs on"
    assert delivery.spool.pending_samples == spooled
    assert _unspooled(delivery) == 21 * GPUS
    errors = [r for r in caplog.records if r.levelno == logging.ERROR and "cannot take" in r.getMessage()]
    assert len(errors) == 1, "logged once per episode, not per cycle"
    assert "No space left on device" in errors[0].getMessage()

    delivery, agent = collector()  # a restart on the full disk
    assert agent.cycle() == 0
    assert delivery.spool.pending_samples == spooled
    with running(create_app(sessions, TOKEN), port):
        while (delay := delivery.send_next()) is not None:
            assert delay == 0.0, "the service is up: every send succeeds"
        assert delivery.shipped_samples == spooled
        assert stored_readings(sessions) == (spooled, spooled), "everything spooled before the disk filled, once"
        assert agent.cycle() == GPUS, "delivery freed the spool's room: cycles are spooled again"
        assert delivery.send_next() == 0.0
    assert stored_readings(sessions) == (spooled + GPUS, spooled + GPUS)
    assert any("takes readings again" in r.getMessage() for r in caplog.records)


def test_the_collector_process_starts_on_a_full_disk_and_delivers_what_is_spooled(
    small_disk: Path, sessions: sessionmaker[Session]
) -> None:
    spool_dir = small_disk / "spool"
    earlier = Delivery(Spool(spool_dir), Shipper("http://127.0.0.1:9", TOKEN, "gpu-full-01"))
    source = Gpus()
    while earlier.enqueue(source.collect()):  # a run before the restart spooled until the disk was full
        assert earlier.spool.pending_samples < 10_000
    spooled = earlier.spool.pending_samples
    metrics_port = free_port()
    with running(create_app(sessions, TOKEN)) as url:
        config = node_process.NodeConfig(
            service_url=url, token=TOKEN, node="gpu-full-01", spool_dir=spool_dir, interval_seconds=0.1,
            metrics_address="127.0.0.1", metrics_port=metrics_port,
        )  # fmt: skip
        stop = threading.Event()
        collector = threading.Thread(target=node_process.run, args=(config, [source], stop, lambda s: s), daemon=True)
        collector.start()
        try:
            deadline = time.monotonic() + 60
            # the backlog, then a cycle spooled in the room it freed
            while stored_readings(sessions)[1] < spooled + GPUS:
                assert collector.is_alive(), "the collector runs on"
                assert time.monotonic() < deadline, f"{stored_readings(sessions)} of {spooled} spooled readings stored"
                time.sleep(0.1)
            metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics").text
        finally:
            stop.set()
            collector.join(timeout=30)
    assert not collector.is_alive()
    assert 'gpufinops_collector_unspooled_samples_total{reason="disk_full"}' in metrics
    rows, distinct = stored_readings(sessions)
    assert rows == distinct, "each reading stored once"
