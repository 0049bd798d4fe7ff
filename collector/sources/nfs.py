"""NFS client traffic per mount from ``/proc/self/mountstats`` (NFSv3 and NFSv4).

Format (Linux ``fs/nfs/super.c`` ``nfs_show_stats`` and ``net/sunrpc/stats.c`` ``rpc_clnt_show_stats``; the
layout prometheus/procfs ``mountstats.go`` parses): a ``device <export> mounted on <mountpoint> with fstype
<fstype> statvers=1.1`` line, then tab-indented lines for NFS mounts, among them ``bytes:`` with eight counters
(normal read, normal write, direct read, direct write, server read, server write bytes, read pages, write
pages) and, after ``per-op statistics``, one ``<OPERATION>: <ops> <transmissions> …`` line per RPC operation.
Read bytes are normal + direct reads (what applications read through the mount, page cache hits included),
written bytes normal + direct writes.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from collector.contract import metric_names as m
from collector.contract.sample import Sample, utc_now
from collector.counters import MonotonicTotals

log = logging.getLogger(__name__)

DEVICE = re.compile(r"^device (\S+) mounted on (\S+) with fstype (\S+)")
NFS_FSTYPES = frozenset({"nfs", "nfs4"})
OPERATION = re.compile(r"^\s+([A-Z_0-9]+):\s+(\d+)")
NORMAL_READ, NORMAL_WRITE, DIRECT_READ, DIRECT_WRITE = 0, 1, 2, 3


@dataclass
class _Mount:
    export: str
    mountpoint: str
    fstype: str
    bytes: list[int] | None = None
    operations: dict[str, int] = field(default_factory=dict)


class NfsSource:
    """Per NFS mount, one ``entity="nfs_mount"`` sample (labels ``mountpoint``, ``export``, ``fstype``; bytes read
    and written) and one ``entity="nfs_operation"`` sample per RPC operation (same labels plus ``operation``;
    operations sent).

    Values are this collector's running totals of the kernel counters (:class:`MonotonicTotals`). A missing
    mountstats file (``<proc>/self/mountstats``) gives ``[]``; a malformed ``bytes:`` or operation line is logged
    with file and line number and left out. A mount listed twice with the same labels is read once.
    """

    name = "nfs"

    def __init__(
        self, mountstats: Path = Path("/proc/self/mountstats"), clock: Callable[[], datetime] = utc_now
    ) -> None:
        self.path = mountstats
        self._clock = clock
        self._totals = MonotonicTotals()

    def collect(self) -> list[Sample]:
        """Samples for every NFS mount; ``[]`` without mountstats or NFS mounts."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        timestamp = self._clock()
        samples: list[Sample] = []
        seen: set[tuple[str, str, str]] = set()
        for mount in self._mounts(text):
            key = (mount.mountpoint, mount.export, mount.fstype)
            if key in seen:
                continue
            seen.add(key)
            labels = {"mountpoint": mount.mountpoint, "export": mount.export, "fstype": mount.fstype}
            if mount.bytes is not None:
                read = mount.bytes[NORMAL_READ] + mount.bytes[DIRECT_READ]
                written = mount.bytes[NORMAL_WRITE] + mount.bytes[DIRECT_WRITE]
                values = {
                    m.NFS_READ_BYTES: float(self._totals.add((*key, "read"), read)),
                    m.NFS_WRITTEN_BYTES: float(self._totals.add((*key, "written"), written)),
                }
                samples.append(Sample("nfs_mount", labels, values, timestamp))
            for operation, count in mount.operations.items():
                total = float(self._totals.add((*key, operation), count))
                samples.append(
                    Sample("nfs_operation", {**labels, "operation": operation}, {m.NFS_OPERATIONS: total}, timestamp)
                )
        return samples

    def _mounts(self, text: str) -> list[_Mount]:
        mounts: list[_Mount] = []
        current: _Mount | None = None
        in_operations = False
        for number, line in enumerate(text.splitlines(), start=1):
            device = DEVICE.match(line)
            if device is not None:
                export, mountpoint, fstype = device.groups()
                current = _Mount(export, mountpoint, fstype) if fstype in NFS_FSTYPES else None
                if current is not None:
                    mounts.append(current)
                in_operations = False
                continue
            if current is None:
                continue
            stripped = line.strip()
            if stripped.startswith("bytes:"):
                fields = stripped.split()[1:]
                if len(fields) < 8 or not all(f.isdigit() for f in fields):
                    log.warning("%s:%d: malformed bytes: line; left out", self.path, number)
                else:
                    current.bytes = [int(f) for f in fields]
            elif stripped == "per-op statistics":
                in_operations = True
            elif in_operations and stripped:
                operation = OPERATION.match(line)
                if operation is None:
                    log.warning("%s:%d: malformed per-op line; left out", self.path, number)
                else:
                    current.operations[operation.group(1)] = int(operation.group(2))
        return mounts
