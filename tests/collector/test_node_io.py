"""The collector's ``node_io`` entry: rates over its interval from the InfiniBand, NFS, Lustre and disk counters of
real captures (:mod:`tests.support.captured_node`; the growth between two readings is DERIVED), bounded, and carried
through the spool and the columnar body."""

from __future__ import annotations

import gzip
import logging
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from collector.contract import metric_names as m
from collector.contract.node_io import MAX_NODE_IO_BYTES_PER_SECOND, NODE_IO_COUNTERS, rate_field
from collector.contract.sample import Sample
from collector.contract.wire import NodeIo, merge_batches
from collector.delivery import Delivery
from collector.node_io import NodeIoRates
from collector.shipper import Shipper
from collector.spool import Spool
from tests.support.captured_node import CapturedNode
from tests.support.fake_pynvml import ManualClock

INTERVAL = 10


def _collect_twice(node: CapturedNode, grow) -> dict[str, object] | None:  # type: ignore[no-untyped-def]
    clock, rates = ManualClock(), NodeIoRates()
    sources = node.sources(clock)  # one set of sources: their running totals span both cycles
    assert rates.entry([s for source in sources for s in source.collect()]) is None, "no rate from one reading"
    grow()
    clock.advance(INTERVAL)
    return rates.entry([s for source in sources for s in source.collect()])


def test_rates_over_the_interval_from_the_captured_counters(shared_data: Path, tmp_path: Path) -> None:
    node = CapturedNode(shared_data, tmp_path)

    def grow() -> None:
        node.grow_infiniband("mlx4_0", "1", "received", 250_000_000)  # words: 1 GB
        node.grow_infiniband("mlx5_0", "1", "received", 125_000_000)  # 0.5 GB
        node.grow_infiniband("hfi1_0", "1", "transmitted", 25_000_000)  # 0.1 GB
        node.grow_nfs("/A", normal_read=300_000_000, direct_read=200_000_000)  # v3 mount: normal + direct
        node.grow_nfs("/B", normal_write=40_000_000)
        node.grow_lustre(read_bytes=21_000_000_000)
        node.grow_disk("sda", sectors_read=2_000_000)  # 1.024 GB
        node.grow_disk("dm-0", sectors_read=2_000_000)  # the same reads through LVM: not counted again

    entry = _collect_twice(node, grow)
    assert entry is not None
    assert entry == {
        "ts": int(ManualClock().now.timestamp()) + INTERVAL,
        "infiniband_received_bytes_per_second": (1e9 + 0.5e9) / INTERVAL,
        "infiniband_transmitted_bytes_per_second": 0.1e9 / INTERVAL,
        "nfs_read_bytes_per_second": 0.5e9 / INTERVAL,
        "nfs_written_bytes_per_second": 0.04e9 / INTERVAL,
        "lustre_read_bytes_per_second": 2.1e9,
        "lustre_written_bytes_per_second": 0.0,
        "disk_read_bytes_per_second": 2_000_000 * 512 / INTERVAL,
        "disk_written_bytes_per_second": 0.0,
    }
    assert NodeIo.model_validate(entry).rates()["lustre_read"] == 2.1e9, "what the service accepts"


def test_a_node_without_such_devices_sends_none_and_a_counter_misread_is_left_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    rates = NodeIoRates()
    gpu_only = [Sample("gpu", {"gpu": "0", "uuid": "GPU-1", "model": "H100"}, {m.GPU_UTILIZATION: 0.0}, clock.now)]
    assert rates.entry(gpu_only) is None
    assert rates.entry(gpu_only) is None

    disk = Sample("disk", {"device": "nvme0n1"}, {m.DISK_READ_BYTES: 1e6, m.DISK_WRITTEN_BYTES: 0.0}, clock.now)
    assert rates.entry([disk]) is None
    clock.advance(1)
    jump = MAX_NODE_IO_BYTES_PER_SECOND * 2
    grown = replace(disk, values={m.DISK_READ_BYTES: 1e6 + jump, m.DISK_WRITTEN_BYTES: 5.0}, timestamp=clock.now)
    with caplog.at_level(logging.WARNING):
        entry = rates.entry([grown])
    assert entry == {"ts": int(clock.now.timestamp()), "disk_written_bytes_per_second": 5.0}
    assert "disk_read rate" in caplog.text


def test_every_kind_is_a_field_of_the_wire_entry() -> None:
    assert {rate_field(kind) for kind in NODE_IO_COUNTERS} == set(NodeIo.model_fields) - {"ts"}


def test_the_spool_carries_each_cycle_s_entry_to_the_body(shared_data: Path, tmp_path: Path) -> None:
    node = CapturedNode(shared_data, tmp_path / "node")
    clock = ManualClock()
    sources = node.sources(clock)
    delivery = Delivery(Spool(tmp_path / "spool"), Shipper("http://127.0.0.1:9", "", "captured"))
    gpu = Sample("gpu", {"gpu": "0", "uuid": "GPU-1", "model": "H100"}, {m.GPU_UTILIZATION: 0.0}, clock.now)
    for _ in range(3):
        node.grow_lustre(read_bytes=10_000_000_000)
        assert delivery.enqueue([replace(gpu, timestamp=clock.now), *(s for x in sources for s in x.collect())]) == 1
        clock.advance(INTERVAL)
    batches = [orjson.loads(record.payload) for record in delivery.spool.peek(100)]
    assert ["node_io" in batch for batch in batches] == [False, True, True], "no rate at the first cycle"
    merged = merge_batches(batches)
    assert [entry["lustre_read_bytes_per_second"] for entry in merged["node_io"]] == [1e9, 1e9]
    body = orjson.loads(gzip.decompress(delivery.shipper.body(merged)))
    assert body["node_io"] == merged["node_io"] and body["series"][0]["uuid"] == "GPU-1"
