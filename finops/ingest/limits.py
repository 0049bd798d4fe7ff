"""What ingest accepts of a node's batch beyond its format: the time window a reading must fall in, the GPUs a batch
may carry, and how many readings a node may send per second (a token bucket per node).

A reading stamped too far in the future, or older than the raw-sample retention, is refused one by one (the rest of
the batch is stored): a clock gone wrong on a node, or a forged ``ts=0``, would otherwise move a GPU's
``in_service_from`` (its capacity cost) back to 1970 and write samples the retention job drops at once, or pin
hours far ahead as dirty.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass

from finops.ingest.partitions import retention_floor

FUTURE_GRACE_SECONDS = 600
"""How far ahead of the service's clock a reading may be stamped: 10 minutes, Grafana Mimir's default
``-validation.create-grace-period`` ("Controls how far into the future incoming samples and exemplars are
accepted compared to the wall clock", default ``10m``; Mimir's configuration reference), for the same reason:
collectors' clocks drift a little, never by hours."""
DEFAULT_RETENTION_DAYS = 35
"""``FINOPS_SAMPLE_RETENTION_DAYS``' default (:class:`finops.settings.StorageSettings`)."""
READINGS_PER_SECOND = 10_000
"""``FINOPS_INGEST_READINGS_PER_SECOND``' default: Grafana Mimir's per-tenant ``ingestion_rate`` default (10,000
samples/s), here per node. A collector sends one node's GPUs every 10 s (8 GPUs: under 1 reading/s); after an
outage it drains its spool in batches of at most 10,000 readings, which this rate takes one a second."""
READINGS_BURST = 200_000
"""``FINOPS_INGEST_READINGS_BURST``' default: Mimir's ``ingestion_burst_size`` default (200,000): the readings a node
may send at once after a quiet spell (20 of the collector's largest batches). A batch of more can never pass."""
BODY_TIMEOUT_SECONDS = 30.0
"""``FINOPS_INGEST_BODY_TIMEOUT_SECONDS``' default: a request body must be in within this of the service's first
read of it. A collector's largest batch (10,000 readings, about 1.5 MB of JSON, gzip a fraction of that) takes well
under a second on a datacentre network; 30 s still lets it through a 1 Mbit/s link uncompressed."""
MAX_GPUS_PER_BATCH = 256
"""``FINOPS_INGEST_MAX_GPUS_PER_BATCH``' default. A collector sends one node's physical GPUs (MIG instances are not
shipped): 8 on an HGX/DGX board, 16 on the largest (HGX-2, DGX-2); 256 is 16 times that and above the 56 a node
would show even counting each of 8 GPUs' 7 MIG instances."""


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """Readings at epoch seconds in [``earliest``, ``latest``] are accepted; others are refused with :meth:`reason`.

    ``earliest`` is the retention cutoff (:func:`finops.ingest.partitions.retention_cutoff` without its allowance
    for hours awaiting a ledger rebuild): the UTC midnight ``retention_days`` whole days before today's, before which
    the retention job drops samples; ``latest`` is now plus :data:`FUTURE_GRACE_SECONDS`.
    """

    earliest: int
    latest: int
    grace_seconds: int = FUTURE_GRACE_SECONDS

    @classmethod
    def at(cls, now: float, retention_days: int, grace_seconds: int = FUTURE_GRACE_SECONDS) -> TimeWindow:
        """The window at ``now`` (epoch seconds)."""
        return cls(retention_floor(int(now), retention_days), int(now) + grace_seconds, grace_seconds)

    def holds(self, ts: int) -> bool:
        return self.earliest <= ts <= self.latest

    def kind(self, ts: int) -> str:
        """Which bound ``ts`` (outside the window) is past: ``too_old`` or ``future``
        (:data:`collector.contract.wire.UNTIMELY_REASONS`)."""
        return "too_old" if ts < self.earliest else "future"

    def reason(self, ts: int) -> str:
        """Why ``ts`` (outside the window) is refused."""
        if ts < self.earliest:
            return (
                f"ts {ts} is older than the sample retention (readings from {self.earliest} on are kept; "
                "FINOPS_SAMPLE_RETENTION_DAYS)"
            )
        ahead = ts - (self.latest - self.grace_seconds)
        return (
            f"ts {ts} is {ahead} s in the future by the service's clock, more than the {self.grace_seconds} s allowed "
            f"(latest accepted now: {self.latest}); check the node's clock"
        )


@dataclass(frozen=True, slots=True)
class IngestLimits:
    """What ingest accepts of a node beyond the wire format (``serve`` builds it from the settings).

    ``retention_days``: readings older than the retention are refused (``FINOPS_SAMPLE_RETENTION_DAYS``);
    ``future_grace_seconds``: how far ahead of the service's clock a reading may be stamped;
    ``readings_per_second`` and ``readings_burst``: each node's token bucket (:class:`ReadingBuckets`);
    ``max_gpus_per_batch``: distinct GPU UUIDs a batch may name (``gpus``, ``series``, ``samples``,
    ``job_utilization`` together); ``body_timeout_seconds``: the deadline for reading a request's body (every
    request's, not only ingest's).
    """

    retention_days: int = DEFAULT_RETENTION_DAYS
    future_grace_seconds: int = FUTURE_GRACE_SECONDS
    readings_per_second: float = READINGS_PER_SECOND
    readings_burst: int = READINGS_BURST
    max_gpus_per_batch: int = MAX_GPUS_PER_BATCH
    body_timeout_seconds: float = BODY_TIMEOUT_SECONDS


class ReadingBuckets:
    """One token bucket per node, in this process: a node's bucket holds up to ``burst`` readings and refills at
    ``rate`` readings per second; a batch of n readings passes when the bucket holds n (they are taken out), else it
    is refused whole and the bucket left as it was. With several service replicas each keeps its own buckets (as
    Mimir's distributor does with its "local" ingestion rate strategy), so a node behind a load balancer may send up
    to the replicas' number times the rate.

    ``clock``: seconds, only differences are used (while a clock steps back nothing refills). Thread-safe: ingest
    calls it from worker threads. Buckets full again are forgotten once more than ``max_nodes`` are held, so names
    sent under the shared token cannot grow the table without bound.
    """

    def __init__(self, rate: float, burst: int, clock: Callable[[], float], max_nodes: int = 10_000) -> None:
        if rate <= 0 or burst <= 0:
            raise ValueError("rate and burst must be above 0")
        self.rate, self.burst, self.clock, self.max_nodes = rate, burst, clock, max_nodes
        self._buckets: dict[str, tuple[float, float]] = {}  # node -> (tokens, as of)
        self._lock = threading.Lock()
        self._latest = -math.inf

    def _now(self) -> float:
        self._latest = max(self._latest, self.clock())
        return self._latest

    def _level(self, node: str, now: float) -> float:
        tokens, then = self._buckets.get(node, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - then) * self.rate)

    def take(self, node: str, readings: int) -> int:
        """Take ``readings`` from ``node``'s bucket: 0 when they were taken, else the whole seconds (at least 1)
        until the bucket holds them (nothing taken). ``readings`` over ``burst`` can never pass: check
        :meth:`fits` first."""
        with self._lock:
            now = self._now()
            level = self._level(node, now)
            if readings > level:
                self._buckets[node] = (level, now)
                return max(1, math.ceil((readings - level) / self.rate))
            if node not in self._buckets and len(self._buckets) >= self.max_nodes:
                self._forget_full(now)
            self._buckets[node] = (level - readings, now)
            return 0

    def give_back(self, node: str, readings: int) -> None:
        """Return ``readings`` taken for a batch that was then not stored (the database failed)."""
        with self._lock:
            now = self._now()
            self._buckets[node] = (min(float(self.burst), self._level(node, now) + readings), now)

    def fits(self, readings: int) -> bool:
        """Whether a batch of ``readings`` can ever pass (it is within the burst)."""
        return readings <= self.burst

    def _forget_full(self, now: float) -> None:
        for node in [n for n in self._buckets if self._level(n, now) >= self.burst]:
            del self._buckets[node]
