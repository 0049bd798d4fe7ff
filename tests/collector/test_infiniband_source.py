"""InfinibandSource on the real procfs and node_exporter sysfs fixtures, and on hand-made edge cases."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from collector.contract import metric_names as m
from collector.sources.infiniband import InfinibandSource

NODE = Path(__file__).parents[1] / "fixtures" / "node"


def _ports(sys_root: Path) -> dict[tuple[str, str], dict[str, float]]:
    return {(s.labels["device"], s.labels["port"]): s.values for s in InfinibandSource(sys_root).collect()}


def test_prometheus_procfs_fixture(shared_data: Path) -> None:
    ports = _ports(shared_data / "procfs-fixtures" / "sys")
    assert sorted(ports) == [("hfi1_0", "1"), ("mlx4_0", "1"), ("mlx4_0", "2"), ("mlx5_0", "1")]
    # counters/port_rcv_data 2460436784 and port_xmit_data 26540356890 words of 4 bytes
    assert ports["mlx4_0", "2"] == {
        m.INFINIBAND_RECEIVED_BYTES: 2460436784 * 4,
        m.INFINIBAND_TRANSMITTED_BYTES: 26540356890 * 4,
        m.INFINIBAND_RECEIVED_PACKETS: 89332064,
        m.INFINIBAND_TRANSMITTED_PACKETS: 88622850,
        m.INFINIBAND_RATE: 40e9 / 8,  # "40 Gb/sec (4X QDR)"
        m.INFINIBAND_STATE: 4,  # "4: ACTIVE"
        m.INFINIBAND_PHYSICAL_STATE: 5,  # "5: LinkUp"
    }
    assert ports["hfi1_0", "1"][m.INFINIBAND_RATE] == 100e9 / 8
    assert ports["mlx5_0", "1"][m.INFINIBAND_TRANSMITTED_BYTES] == 2880761508848 * 4


def test_node_exporter_fixture_counters_ext_and_no_pma(shared_data: Path) -> None:
    ports = _ports(shared_data / "node-exporter-fixtures" / "sys")
    # mlx4_0 port 2: counters/port_rcv_data reads 0, counters_ext/port_rcv_data_64 4631917 (the 64-bit one wins)
    assert ports["mlx4_0", "2"][m.INFINIBAND_RECEIVED_BYTES] == 4631917 * 4
    assert ports["mlx4_0", "2"][m.INFINIBAND_TRANSMITTED_BYTES] == 3733440 * 4
    assert ports["mlx4_0", "2"][m.INFINIBAND_RECEIVED_PACKETS] == 0  # only counters_ext/port_rcv_packets_64
    assert ports["mlx4_0", "1"][m.INFINIBAND_RECEIVED_PACKETS] == 6825908347
    # i40iw0: every counter reads "N/A (no PMA)": those series are absent, rate and state remain
    assert ports["i40iw0", "1"] == {m.INFINIBAND_RATE: 10e9 / 8, m.INFINIBAND_STATE: 4, m.INFINIBAND_PHYSICAL_STATE: 5}


def test_a_counter_reset_never_decreases_the_total(tmp_path: Path) -> None:
    shutil.copytree(NODE / "sys", tmp_path / "sys")
    counter = tmp_path / "sys/class/infiniband/mlx5_0/ports/1/counters/port_rcv_data"
    source = InfinibandSource(tmp_path / "sys")
    assert source.collect()[0].values[m.INFINIBAND_RECEIVED_BYTES] == 250_000_000 * 4
    counter.write_text("250000100\n")
    assert source.collect()[0].values[m.INFINIBAND_RECEIVED_BYTES] == 250_000_100 * 4
    counter.write_text("50\n")  # reset: the 50 words since are added, the total never goes down
    assert source.collect()[0].values[m.INFINIBAND_RECEIVED_BYTES] == 250_000_150 * 4


def test_a_garbled_file_loses_only_its_series(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    shutil.copytree(NODE / "sys", tmp_path / "sys")
    port = tmp_path / "sys/class/infiniband/mlx5_0/ports/1"
    (port / "counters/port_xmit_data").write_text("garbage\n")
    (port / "rate").write_text("fast\n")
    with caplog.at_level(logging.WARNING):
        (sample,) = InfinibandSource(tmp_path / "sys").collect()
    assert m.INFINIBAND_TRANSMITTED_BYTES not in sample.values and m.INFINIBAND_RATE not in sample.values
    assert sample.values[m.INFINIBAND_RECEIVED_BYTES] == 250_000_000 * 4
    assert f"{port / 'counters/port_xmit_data'}: 'garbage' is not a counter" in caplog.text


def test_a_host_without_infiniband_has_no_data(tmp_path: Path) -> None:
    assert InfinibandSource(tmp_path).collect() == []
