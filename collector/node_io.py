"""The node's fabric and storage rates for the service: the ``node_io`` entry of a cycle
(:mod:`collector.contract.node_io`), from the byte counters the InfiniBand, NFS, Lustre and disk sources read.

A rate is a counter's growth over the time between two cycles' readings of it, divided by that time; a kind's rate is
the sum over the node's devices of that kind (ports, mounts, file systems, disks) read in both cycles. The counters
are the sources' running totals (:class:`collector.counters.MonotonicTotals`), which never decrease, so a rate is
never negative. Device-mapper and software RAID disks (``dm-N``, ``mdN``) are left out of the disk rates: their
I/O is their member disks', counted there. A device read for the first time gives no rate until its next reading
(its first total is the kernel counter since boot, not one interval's growth); a device missed in a cycle (its
source failed) is measured over the longer interval at its next reading.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from datetime import datetime

from collector.contract.node_io import MAX_NODE_IO_BYTES_PER_SECOND, NODE_IO_COUNTERS, rate_field
from collector.contract.sample import Sample

log = logging.getLogger(__name__)

STACKED_DISK = re.compile(r"^(dm-|md)\d+$")
"""Block devices stacked on other disks (device mapper: LVM, dm-crypt, multipath; md software RAID)."""

_Device = tuple[str, tuple[tuple[str, str], ...]]
"""(kind, the sample's labels sorted): one counter of one device."""


class NodeIoRates:
    """Remembers each device counter's last total and instant; :meth:`entry` turns one cycle's samples into that
    cycle's ``node_io`` entry. One instance per collector process (its state is the previous cycle's readings)."""

    def __init__(self) -> None:
        self._last: dict[_Device, tuple[float, datetime]] = {}

    def entry(self, samples: Iterable[Sample]) -> dict[str, object] | None:
        """The ``node_io`` entry of one cycle's samples: ``ts`` (epoch seconds of the newest reading used) and, per
        kind with a device read in this cycle and an earlier one, the rate in bytes per second; None when no kind
        has one (the first cycle, a node without such devices). A rate above
        :data:`~collector.contract.node_io.MAX_NODE_IO_BYTES_PER_SECOND` is left out (logged): the service would
        refuse it."""
        rates: dict[str, float] = {}
        newest: datetime | None = None
        for sample in samples:
            for kind, (entity, metric) in NODE_IO_COUNTERS.items():
                total = sample.values.get(metric) if sample.entity == entity else None
                if total is None or (entity == "disk" and STACKED_DISK.match(sample.labels.get("device", ""))):
                    continue
                device = (kind, tuple(sorted(sample.labels.items())))
                last = self._last.get(device)
                self._last[device] = (total, sample.timestamp)
                if last is None:
                    continue
                seconds = (sample.timestamp - last[1]).total_seconds()
                if seconds <= 0 or total < last[0]:
                    continue
                rates[kind] = rates.get(kind, 0.0) + (total - last[0]) / seconds
                newest = sample.timestamp if newest is None else max(newest, sample.timestamp)
        for kind, rate in list(rates.items()):
            if rate > MAX_NODE_IO_BYTES_PER_SECOND:
                log.warning("%s rate of %.3g bytes/s is above any node's; left out of node_io", kind, rate)
                del rates[kind]
        if newest is None or not rates:
            return None
        return {"ts": int(newest.timestamp()), **{rate_field(kind): rate for kind, rate in rates.items()}}
