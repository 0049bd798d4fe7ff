"""DiskstatsSource: hand-written fixtures, the real prometheus/procfs and node_exporter fixtures, and this host."""

from __future__ import annotations

import logging
import shutil
from datetime import timedelta
from pathlib import Path

import pytest

from collector.contract.metric_names import DISK_READ_BYTES, DISK_WRITTEN_BYTES
from collector.contract.sample import Sample
from collector.sources.diskstats import DiskstatsSource

FIXTURES = Path(__file__).parents[1] / "fixtures" / "diskstats"
SECTOR = 512


def by_device(samples: list[Sample]) -> dict[str, tuple[float, float]]:
    """Device -> (bytes read, bytes written); also checks the sample shape."""
    for sample in samples:
        assert sample.entity == "disk"
        assert set(sample.labels) == {"device"}
        assert set(sample.values) == {DISK_READ_BYTES, DISK_WRITTEN_BYTES}
        assert sample.timestamp.utcoffset() == timedelta(0)
    result = {s.labels["device"]: (s.values[DISK_READ_BYTES], s.values[DISK_WRITTEN_BYTES]) for s in samples}
    assert len(result) == len(samples), "one sample per device"
    return result


def sectors(read: int, written: int) -> tuple[float, float]:
    return (read * SECTOR, written * SECTOR)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "collector.sources.diskstats" and r.levelno >= logging.WARNING
    ]


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    """An empty procfs root; a test copies a fixture's diskstats into it."""
    root = tmp_path / "proc"
    root.mkdir()
    return root


@pytest.fixture
def no_sysfs(tmp_path: Path) -> Path:
    """A sysfs root without ``block/``: whole disks are told from partitions by name."""
    return tmp_path / "no-sysfs"


def put(fixture: str, proc: Path) -> None:
    shutil.copyfile(FIXTURES / fixture / "diskstats", proc / "diskstats")


FIRST_WHOLE_DISKS = {
    "sda": sectors(6437034, 9345218),
    "nvme0n1": sectors(152847364, 401958176),
    "dm-0": sectors(152801306, 401958160),
    "mmcblk0": sectors(412018, 96512),
    "cciss/c0d0": sectors(2400336, 3301210),
}


def test_first_reading_reports_whole_disks_in_bytes(proc: Path, no_sysfs: Path) -> None:
    put("first", proc)
    source = DiskstatsSource(proc, sys_root=no_sysfs)

    assert by_device(source.collect()) == FIRST_WHOLE_DISKS


def test_malformed_lines_are_logged_with_file_and_line_and_skipped(
    proc: Path, no_sysfs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    put("first", proc)

    devices = by_device(DiskstatsSource(proc, sys_root=no_sysfs).collect())

    assert "sdb" not in devices and "sdc" not in devices
    assert "sda" in devices and "mmcblk0" in devices  # the lines around them are still read
    path = proc / "diskstats"
    assert warnings(caplog) == [
        f"{path}:8: 9 fields, expected 14, 18 or 20; line skipped",
        f"{path}:9: non-numeric counter; line skipped",
    ]


def test_second_reading_adds_deltas_and_treats_a_decrease_as_reset(proc: Path, no_sysfs: Path) -> None:
    source = DiskstatsSource(proc, sys_root=no_sysfs)
    put("first", proc)
    first = by_device(source.collect())
    put("second", proc)

    second = by_device(source.collect())

    assert second == {
        "sda": sectors(6437034 + 1000, 9345218 + 2048),
        # the kernel counters went down to 5000 and 800: a reset, all of the new value is new I/O
        "nvme0n1": sectors(152847364 + 5000, 401958176 + 800),
        "dm-0": FIRST_WHOLE_DISKS["dm-0"],
        "sdb": sectors(301722, 7040),  # first seen: everything since boot
        "mmcblk0": sectors(412018 + 6512, 96512),
        "cciss/c0d0": sectors(2400336 + 1024, 3301210 + 1024),
    }
    for device, (read, written) in first.items():
        if device in second:  # totals never go down
            assert second[device][0] >= read and second[device][1] >= written


def test_growth_after_a_reset_is_added_to_the_totals(proc: Path, no_sysfs: Path) -> None:
    source = DiskstatsSource(proc, sys_root=no_sysfs)
    put("first", proc)
    source.collect()
    put("second", proc)
    source.collect()
    (proc / "diskstats").write_text(" 259       0 nvme0n1 330 0 5400 45 60 11 1000 10 0 44 55 0 0 0 0\n")

    assert by_device(source.collect()) == {"nvme0n1": sectors(152847364 + 5400, 401958176 + 1000)}


def test_sysfs_block_entries_are_the_whole_disks(proc: Path, tmp_path: Path) -> None:
    sys_root = tmp_path / "sys"
    for entry in ("sda/sda1", "nvme0n1/nvme0n1p1", "cciss!c0d0", "loop0", "zram0"):
        (sys_root / "block" / entry).mkdir(parents=True)
    put("first", proc)

    devices = by_device(DiskstatsSource(proc, sys_root=sys_root).collect())

    # dm-0 and mmcblk0 are not in this sysfs; loop0 and zram0 are but are never reported
    assert devices == {name: FIRST_WHOLE_DISKS[name] for name in ("sda", "nvme0n1", "cciss/c0d0")}


def test_missing_diskstats_file_gives_no_data(proc: Path, no_sysfs: Path) -> None:
    assert DiskstatsSource(proc, sys_root=no_sysfs).collect() == []


def test_prometheus_procfs_fixture(shared_data: Path, no_sysfs: Path, caplog: pytest.LogCaptureFixture) -> None:
    source = DiskstatsSource(shared_data / "procfs-fixtures" / "proc", sys_root=no_sysfs)

    devices = by_device(source.collect())

    assert set(devices) == {
        "sda", "dm-0", "dm-1", "dm-2", "dm-3", "dm-4", "dm-5", "mmcblk0", "fd0", "vda", "sr0", "nvme0n1", "sdb", "sdc",
    }  # fmt: skip
    assert devices["sda"] == sectors(1003346126, 505697032)  # 14 fields
    assert devices["sdb"] == sectors(9657779, 1972905)  # 18 fields
    assert devices["sdc"] == sectors(579164, 180500)  # 20 fields
    assert warnings(caplog) == []


def test_node_exporter_fixture(shared_data: Path, no_sysfs: Path, caplog: pytest.LogCaptureFixture) -> None:
    source = DiskstatsSource(shared_data / "node-exporter-fixtures" / "proc", sys_root=no_sysfs)

    devices = by_device(source.collect())

    assert set(devices) == {
        "sda", "dm-0", "dm-1", "dm-2", "dm-3", "dm-4", "dm-5", "mmcblk0", "fd0", "vda", "sr0", "nvme0n1", "sdb", "sdc",
    }  # fmt: skip
    assert devices["vda"] == sectors(32670882, 213637440)  # 14 fields
    assert devices["sdb"] == sectors(9657779, 1972905)  # 18 fields
    assert devices["sdc"] == sectors(1657779, 172905)  # 20 fields
    assert warnings(caplog) == []


def test_this_hosts_proc_diskstats(caplog: pytest.LogCaptureFixture) -> None:
    proc_diskstats = Path("/proc/diskstats")
    if not proc_diskstats.is_file():
        pytest.skip("this host has no /proc/diskstats")
    source = DiskstatsSource()

    first = by_device(source.collect())
    kernel = {line.split()[2]: line.split() for line in proc_diskstats.read_text().splitlines()}
    second = by_device(source.collect())

    sys_block = Path("/sys/block")
    if sys_block.is_dir():
        expected = {
            name
            for name in kernel
            if (sys_block / name.replace("/", "!")).exists() and not name.startswith(("loop", "ram", "zram"))
        }
        assert set(first) == expected
    for name, (read, written) in first.items():
        assert not (Path("/sys/class/block") / name.replace("/", "!") / "partition").exists()
        assert read % SECTOR == 0 and written % SECTOR == 0
        # counters only grow: the file read after the first collect holds at least as much
        assert read <= int(kernel[name][5]) * SECTOR and written <= int(kernel[name][9]) * SECTOR
        assert second[name][0] >= read and second[name][1] >= written
    assert warnings(caplog) == []
