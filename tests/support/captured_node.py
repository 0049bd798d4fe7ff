"""A node whose fabric and storage counters are real captures from ``../shared/data``, copied into a test's own
directory so that a test can let time pass on it.

Real (read as captured, see each folder's SOURCE.md): the InfiniBand sysfs tree of ``procfs-fixtures`` (hfi1_0,
mlx4_0 with two ports, mlx5_0: their counters, rates and states), its ``/proc/diskstats``, the NFS client
``mountstats`` of ``telegraf-storage-fixtures`` (an NFSv3 mount with direct I/O, NFSv4 mounts) and the Lustre 2.10
client ``llite`` stats of ``lustre-procfs-hpe`` (with the OST/MDT job_stats beside them, which the node rates leave
out).

DERIVED: a capture is one instant, and a rate needs two. :meth:`CapturedNode.grow` writes the captured files again
with chosen counters grown by chosen amounts, in the files' own units (4-byte words for InfiniBand data, 512-byte
sectors for disks, bytes for NFS and Lustre), as if that much had moved since the capture; the test moves its clock
on by the interval it means.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from collector.contract.sample import Source
from collector.sources.diskstats import DiskstatsSource
from collector.sources.infiniband import InfinibandSource
from collector.sources.lustre import LustreSource
from collector.sources.nfs import NfsSource

LLITE = "llite/lustrefs-ffff88105db50000/stats"
IB_WORDS = {"received": "port_rcv_data", "transmitted": "port_xmit_data"}


class CapturedNode:
    """The captures under ``root`` (``sys/class/infiniband``, ``proc/diskstats``, ``proc/self/mountstats``,
    ``proc/fs/lustre``), copied from ``shared_data``."""

    def __init__(self, shared_data: Path, root: Path) -> None:
        self.root = root
        shutil.copytree(shared_data / "procfs-fixtures/sys/class/infiniband", root / "sys/class/infiniband")
        (root / "proc/self").mkdir(parents=True)
        shutil.copy(shared_data / "procfs-fixtures/proc/diskstats", root / "proc/diskstats")
        shutil.copy(shared_data / "telegraf-storage-fixtures/nfsclient/testdata/mountstats", self.mountstats)
        shutil.copytree(shared_data / "lustre-procfs-hpe/proc/fs/lustre", root / "proc/fs/lustre")

    @property
    def mountstats(self) -> Path:
        return self.root / "proc/self/mountstats"

    def sources(self, clock: Callable[[], datetime]) -> list[Source]:
        """The collector's four node sources on these files, reading ``clock``."""
        proc, sys = self.root / "proc", self.root / "sys"
        return [
            InfinibandSource(sys, clock),
            DiskstatsSource(proc, sys_root=sys, clock=clock),
            NfsSource(self.mountstats, clock),
            LustreSource(proc, clock),
        ]

    def grow_infiniband(self, device: str, port: str, direction: str, words: int) -> None:
        """Add ``words`` 4-byte words to the port's ``counters/port_rcv_data`` (``received``) or ``port_xmit_data``
        (``transmitted``)."""
        path = self.root / f"sys/class/infiniband/{device}/ports/{port}/counters/{IB_WORDS[direction]}"
        path.write_text(f"{int(path.read_text()) + words}\n")

    def grow_nfs(self, mountpoint: str, normal_read: int = 0, direct_read: int = 0, normal_write: int = 0) -> None:
        """Add bytes to the ``bytes:`` counters of the mount at ``mountpoint`` (fields 1, 3 and 2)."""
        lines = self.mountstats.read_text().splitlines(keepends=True)
        current = None
        for i, line in enumerate(lines):
            device = re.match(r"^device \S+ mounted on (\S+) ", line)
            if device:
                current = device.group(1)
            elif current == mountpoint and line.strip().startswith("bytes:"):
                fields = line.split()
                counters = [int(f) for f in fields[1:]]
                counters[0] += normal_read
                counters[1] += normal_write
                counters[2] += direct_read
                lines[i] = line[: line.index("bytes:")] + "bytes:\t" + " ".join(map(str, counters)) + "\n"
        self.mountstats.write_text("".join(lines))

    def grow_lustre(self, read_bytes: int = 0, write_bytes: int = 0) -> None:
        """Add bytes to the client's llite ``read_bytes`` and ``write_bytes`` sums (one more call each)."""
        path = self.root / "proc/fs/lustre" / LLITE
        grown = {"read_bytes": read_bytes, "write_bytes": write_bytes}
        lines = []
        for line in path.read_text().splitlines():
            fields = line.split()
            if fields and fields[0] in grown and grown[fields[0]]:
                fields[1] = str(int(fields[1]) + 1)
                fields[6] = str(int(fields[6]) + grown[fields[0]])
                line = " ".join(fields)
            lines.append(line)
        path.write_text("\n".join(lines) + "\n")

    def grow_disk(self, device: str, sectors_read: int) -> None:
        """Add ``sectors_read`` 512-byte sectors to ``device``'s sectors-read field in ``/proc/diskstats``."""
        path = self.root / "proc/diskstats"
        lines = []
        for line in path.read_text().splitlines():
            fields = line.split()
            if len(fields) > 5 and fields[2] == device:
                fields[5] = str(int(fields[5]) + sectors_read)
                line = " ".join(fields)
            lines.append(line)
        path.write_text("\n".join(lines) + "\n")
