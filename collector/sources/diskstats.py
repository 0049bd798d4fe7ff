"""Bytes read and written per whole disk, from ``/proc/diskstats``, kept as monotonic counters.

Format (Linux ``Documentation/admin-guide/iostats.rst``): per line, major, minor, device name, then 11 fields
(kernels before 4.18: 14 fields in all), 15 (4.18 added discards: 18 in all) or 17 (5.5 added flushes: 20 in
all). Field 3 after the name is sectors read and field 7 sectors written; sectors are 512 bytes whatever the
device's own sector size.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from collector.contract import metric_names as m
from collector.contract.sample import Sample, utc_now
from collector.counters import MonotonicTotals

log = logging.getLogger(__name__)

SECTOR_BYTES = 512
FIELD_COUNTS = frozenset({14, 18, 20})
SECTORS_READ_FIELD = 5  # 0-based index in the line: major, minor, name, reads, reads merged, sectors read
SECTORS_WRITTEN_FIELD = 9  # ..., time reading, writes, writes merged, sectors written

VIRTUAL_DEVICE = re.compile(r"^(z?ram|loop)\d+$")
"""RAM disks, compressed RAM (zram) and loop devices: never reported."""

PARTITION = re.compile(r"^((h|s|v|xv)d[a-z]+|nvme\d+n\d+p|mmcblk\d+p)\d+$")
"""Partition names, used only without ``<sys_root>/block``.

The partition part of node_exporter's default device exclude (``collector/diskstats_linux.go``,
``^(z?ram|loop|fd|(h|s|v|xv)d[a-z]|nvme\\d+n\\d+p)\\d+$``), widened to disks past ``sdz`` (``sdaa1``) and with
eMMC/SD partitions (``mmcblk0p1``) added. Floppies (``fd0``), which node_exporter also excludes, are whole disks
and are kept.
"""


class DiskstatsSource:
    """One ``entity="disk"`` sample per whole disk, labels ``{"device": name}``, values
    :data:`~collector.contract.metric_names.DISK_READ_BYTES` and
    :data:`~collector.contract.metric_names.DISK_WRITTEN_BYTES` (sectors read/written x 512 bytes).

    Whole disks: if ``<sys_root>/block`` exists, exactly the devices listed there (a partition lives under
    ``/sys/block/<disk>/<partition>``; a ``/`` in a diskstats name is ``!`` in sysfs); otherwise every name not
    matching :data:`PARTITION`. Loop, RAM and zram devices (:data:`VIRTUAL_DEVICE`) are never reported.

    The values are this source's own counters: each ``collect`` adds the growth of the kernel counter since the
    previous ``collect``; a kernel counter that went down was reset (device re-attached, 32-bit wrap) and its
    new value is added whole, so the totals never decrease. The first reading of a device adds the kernel
    counter whole (bytes since boot).

    A missing ``<root>/diskstats`` gives ``[]``. A malformed line (field count not 14, 18 or 20, or a
    non-numeric counter) is logged with file and line number and skipped.
    """

    name = "diskstats"

    def __init__(
        self, root: Path = Path("/proc"), sys_root: Path = Path("/sys"), clock: Callable[[], datetime] = utc_now
    ) -> None:
        self.path = root / "diskstats"
        self.sys_block = sys_root / "block"
        self._clock = clock
        self._totals = MonotonicTotals()

    def collect(self) -> list[Sample]:
        """One sample per whole disk in ``<root>/diskstats``; ``[]`` if that file does not exist."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        timestamp = self._clock()
        is_whole_disk = self._whole_disk_rule()
        samples = []
        for number, line in enumerate(text.splitlines(), start=1):
            parsed = self._parse(line, number)
            if parsed is None:
                continue
            device, sectors_read, sectors_written = parsed
            if VIRTUAL_DEVICE.match(device) or not is_whole_disk(device):
                continue
            values = {
                m.DISK_READ_BYTES: float(self._totals.add((device, "read"), sectors_read) * SECTOR_BYTES),
                m.DISK_WRITTEN_BYTES: float(self._totals.add((device, "written"), sectors_written) * SECTOR_BYTES),
            }
            samples.append(Sample(entity="disk", labels={"device": device}, values=values, timestamp=timestamp))
        return samples

    def _whole_disk_rule(self) -> Callable[[str], bool]:
        if self.sys_block.is_dir():
            disks = {entry.name for entry in self.sys_block.iterdir()}
            return lambda device: device.replace("/", "!") in disks
        return lambda device: PARTITION.match(device) is None

    def _parse(self, line: str, number: int) -> tuple[str, int, int] | None:
        """(device, sectors read, sectors written), or None for a blank or malformed line (logged)."""
        fields = line.split()
        if not fields:
            return None
        if len(fields) not in FIELD_COUNTS:
            log.warning("%s:%d: %d fields, expected 14, 18 or 20; line skipped", self.path, number, len(fields))
            return None
        numbers = fields[:2] + fields[3:]
        if not all(field.isascii() and field.isdigit() for field in numbers):
            log.warning("%s:%d: non-numeric counter; line skipped", self.path, number)
            return None
        return fields[2], int(fields[SECTORS_READ_FIELD]), int(fields[SECTORS_WRITTEN_FIELD])
