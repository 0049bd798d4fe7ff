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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from finops.ingest.partitions import retention_floor

FUTURE_GRACE_SECONDS = 600
"""How far ahead of the service's clock a reading may be stamped: 10 minutes, Grafana Mimir's default
``-validation.create-grace-period`` ("Controls how far into the future incoming samples and exemplars are
accepted compared to the wall clock", default ``10m``; Mimir's configuration reference), for the same reason:
collectors' clocks drift a little, never by hours."""
DEFAULT_RETENTION_DAYS = 35
"""``FINOPS_SAMPLE_RETENTION_DAYS``' default (:class:`finops.settings.server.StorageSettings`)."""
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
MAX_GPUS_PER_NODE = 64
"""``FINOPS_INGEST_MAX_GPUS_PER_NODE``' default: ingest registers a new GPU on a node only at an NVML index below it
(indices run from 0 to the node's GPU count less one), so a node token can never give its node more GPUs (a node
is unique on its indices). The largest boards carry 16 GPUs (HGX-2, DGX-2) and PCIe expansion chassis up to about
20; 64 leaves room for any of them and bounds what a stolen node token can invent to 64 GPUs' capacity cost. The
node inventory (``nodes import``) keeps a node's GPU model, not its count, so the bound is one for every node: set
it to the site's largest node."""
REQUESTS_PER_NODE = 2
"""Ingest requests one node token may have under way at once in a process (reading its body or being stored); more
are answered ``429`` at once. A collector sends one batch at a time (:class:`collector.delivery.Delivery`); the
second allows a retry while the service still reads the first. So one node's slow senders hold at most this many
of the process's ingest slots."""
LARGE_REQUESTS_PER_NODE = 1
"""Of :data:`REQUESTS_PER_NODE`, how many may hold a large body (a backlog: :data:`finops.web.app.SMALL_BODY_BYTES`
and more) at once."""
MAX_REQUESTS_UNDER_WAY = 64
"""Ingest requests one server process has under way at once (being read or stored, or waiting for one of its 16
slots) beyond which a new one is answered ``503`` with ``Retry-After`` at once (:mod:`finops.web.ingest_route`):
four times the slots, about 0.1 s of single-cycle POSTs queued on this machine's class (600 a second per process),
against the collector's 60 s request timeout."""
BODY_MEMORY_BUDGET_BYTES = 64 * 2**20
"""``FINOPS_BODY_MEMORY_BUDGET_BYTES``' default: request bodies (as received) one server process holds at once, 64
MiB: 16 of the REST API's largest (4 MiB) or 4 of ingest's (16 MiB); a collector's largest batch is about 1.5 MB."""


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
    ``job_utilization`` together); ``max_gpus_per_node``: a new GPU is registered only at an index below it (the
    GPUs of a node, :data:`MAX_GPUS_PER_NODE`); ``body_timeout_seconds``: the deadline for reading a request's body
    (every request's, not only ingest's); ``body_memory_budget_bytes``: the bytes of request bodies (every
    request's) the process holds at once (:class:`finops.web.body_limits.BodyBudget`); ``max_requests_under_way``:
    the ingest requests a process has under way beyond which it answers ``503`` (:data:`MAX_REQUESTS_UNDER_WAY`).
    """

    retention_days: int = DEFAULT_RETENTION_DAYS
    future_grace_seconds: int = FUTURE_GRACE_SECONDS
    readings_per_second: float = READINGS_PER_SECOND
    readings_burst: int = READINGS_BURST
    max_gpus_per_batch: int = MAX_GPUS_PER_BATCH
    max_gpus_per_node: int = MAX_GPUS_PER_NODE
    body_timeout_seconds: float = BODY_TIMEOUT_SECONDS
    body_memory_budget_bytes: int = BODY_MEMORY_BUDGET_BYTES
    max_requests_under_way: int = MAX_REQUESTS_UNDER_WAY


class NodeSlots:
    """The ingest requests each node has under way in one process, at most ``per_node`` at once (:meth:`take`).
    Used from the event loop only (no lock); a node's count is forgotten when it falls to 0."""

    def __init__(self, per_node: int) -> None:
        self.per_node = per_node
        self._held: dict[str, int] = {}

    @contextmanager
    def take(self, node: str | None) -> Iterator[bool]:
        """One of ``node``'s slots for the block: yields True, or False (nothing taken) when the node holds
        ``per_node`` already. ``node`` None (a credential that speaks for every node, whose node is known only from
        the body) is always True and not counted."""
        count = 0 if node is None else self._held.get(node, 0)
        if node is None or count >= self.per_node:
            yield node is None
            return
        self._held[node] = count + 1
        try:
            yield True
        finally:
            if self._held[node] == 1:
                del self._held[node]
            else:
                self._held[node] -= 1


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
