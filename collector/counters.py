"""Monotonic totals from kernel and device counters that can reset or wrap.

Each source that reads a raw counter (``/proc/diskstats`` sectors, InfiniBand ``port_rcv_data``, NFS
``mountstats`` bytes, Lustre stats) feeds every reading to :class:`MonotonicTotals`; the exposed value is the
sum of the counter's growth since this collector started, which Prometheus ``rate()`` reads correctly.
"""

from __future__ import annotations

from collections.abc import Hashable


class MonotonicTotals:
    """Running totals of raw counters, keyed by any hashable (e.g. ``(device, metric)``).

    :meth:`add` takes the counter's latest raw value. The first reading of a key adds it whole (the counter's
    growth since it started: boot, driver load, mount). After that, growth ``raw - previous`` is added; a raw
    value lower than the previous one means the counter was reset or wrapped, and the new raw value is added
    whole (growth since the reset), so a total never decreases and a rate is never negative.
    """

    def __init__(self) -> None:
        self._raw: dict[Hashable, int] = {}
        self._totals: dict[Hashable, int] = {}

    def add(self, key: Hashable, raw: int) -> int:
        """Record ``raw`` (a non-negative integer counter value) for ``key``; returns the key's running total."""
        previous = self._raw.get(key, 0)
        self._raw[key] = raw
        total = self._totals.get(key, 0) + (raw - previous if raw >= previous else raw)
        self._totals[key] = total
        return total
