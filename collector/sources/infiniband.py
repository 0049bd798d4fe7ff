"""InfiniBand port counters, link rate and state from ``/sys/class/infiniband``.

Layout (Linux ``Documentation/ABI/stable/sysfs-class-infiniband``): ``<device>/ports/<port>/`` holds ``rate``
(``"40 Gb/sec (4X QDR)"``), ``state`` (``"4: ACTIVE"``), ``phys_state`` (``"5: LinkUp"``) and ``counters/``.
Old kernels and mlx4 also have ``counters_ext/`` with 64-bit ``port_rcv_data_64`` and ``port_xmit_data_64``,
preferred for the data counters when present because the 32-bit PortRcvData saturates (2^32 words, 16 GiB:
seconds at QDR); packet counts come from ``counters/`` and fall back to ``counters_ext/*_packets_64``.
``port_rcv_data`` and ``port_xmit_data`` count 4-byte words (IB spec PortRcvData/PortXmitData: "divided by 4"),
so bytes = value x 4. A counter file reading ``N/A (no PMA)`` (no performance management agent, e.g. i40iw
iWARP) is skipped, as node_exporter's infiniband collector does.
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

WORD_BYTES = 4
NO_PMA = "N/A (no PMA)"
RATE = re.compile(r"^(\d+(?:\.\d+)?) Gb/sec")
STATE = re.compile(r"^(\d+):")

COUNTERS: dict[str, tuple[tuple[str, ...], int]] = {
    m.INFINIBAND_RECEIVED_BYTES: (("counters_ext/port_rcv_data_64", "counters/port_rcv_data"), WORD_BYTES),
    m.INFINIBAND_TRANSMITTED_BYTES: (("counters_ext/port_xmit_data_64", "counters/port_xmit_data"), WORD_BYTES),
    m.INFINIBAND_RECEIVED_PACKETS: (("counters/port_rcv_packets", "counters_ext/port_rcv_packets_64"), 1),
    m.INFINIBAND_TRANSMITTED_PACKETS: (("counters/port_xmit_packets", "counters_ext/port_xmit_packets_64"), 1),
}
"""metric -> (files under the port directory, first present wins; multiplier to base units)."""


class InfinibandSource:
    """One ``entity="ib_port"`` sample per port, labels ``{"device", "port"}``.

    Values: bytes and packets received/transmitted (this collector's running totals of the sysfs counters, see
    :class:`collector.counters.MonotonicTotals`), link rate in bytes/s (``rate`` Gb/s x 10^9 / 8), logical and
    physical state numbers. A file that is missing, unreadable or not a number leaves its series out (logged
    with its path); the other series and ports are still read. No ``<sys_root>/class/infiniband`` gives ``[]``.
    """

    name = "infiniband"

    def __init__(self, sys_root: Path = Path("/sys"), clock: Callable[[], datetime] = utc_now) -> None:
        self.root = sys_root / "class" / "infiniband"
        self._clock = clock
        self._totals = MonotonicTotals()

    def collect(self) -> list[Sample]:
        """One sample per ``<device>/ports/<port>``; ``[]`` when the host has no InfiniBand class."""
        if not self.root.is_dir():
            return []
        timestamp = self._clock()
        samples = []
        for port_dir in sorted(self.root.glob("*/ports/*")):
            device, port = port_dir.parent.parent.name, port_dir.name
            values = self._counters(port_dir, device, port)
            rate = self._parsed(port_dir / "rate", RATE)
            if rate is not None:
                values[m.INFINIBAND_RATE] = rate * 1e9 / 8
            for metric, file in ((m.INFINIBAND_STATE, "state"), (m.INFINIBAND_PHYSICAL_STATE, "phys_state")):
                state = self._parsed(port_dir / file, STATE)
                if state is not None:
                    values[metric] = state
            samples.append(Sample("ib_port", {"device": device, "port": port}, values, timestamp))
        return samples

    def _counters(self, port_dir: Path, device: str, port: str) -> dict[str, float]:
        values: dict[str, float] = {}
        for metric, (files, multiplier) in COUNTERS.items():
            path = next((port_dir / f for f in files if (port_dir / f).is_file()), port_dir / files[-1])
            raw = self._integer(path)
            if raw is not None:
                values[metric] = float(self._totals.add((device, port, metric), raw) * multiplier)
        return values

    @staticmethod
    def _integer(path: Path) -> int | None:
        """The counter in ``path``; None if absent, ``N/A (no PMA)``, unreadable or malformed (logged)."""
        text = _read(path)
        if text is None or text == NO_PMA:
            return None
        if not text.isdigit():
            log.warning("%s: %r is not a counter; series left out", path, text[:40])
            return None
        return int(text)

    @staticmethod
    def _parsed(path: Path, pattern: re.Pattern[str]) -> float | None:
        """The number ``pattern`` captures at the start of ``path``; None if absent or malformed (logged)."""
        text = _read(path)
        if text is None:
            return None
        match = pattern.match(text)
        if match is None:
            log.warning("%s: unexpected content %r; series left out", path, text[:40])
            return None
        return float(match.group(1))


def _read(path: Path) -> str | None:
    """A sysfs file's stripped text; None if it does not exist or cannot be read (the latter logged)."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("%s: unreadable (%s); series left out", path, exc.strerror)
        return None
