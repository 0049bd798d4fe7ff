"""What the demo's idle jobs wait on: DERIVED evidence for the waste reasons (docs/waste-reasons.md).

The Helios trace has no I/O and no GPU counters, so each idle job is given one wait, drawn with a seeded generator
(:data:`WAIT_WEIGHTS`), and the evidence a real node would show for it over the whole job:

- ``lustre`` / ``nfs``: the job's nodes read Lustre at 2.1 GB/s, or NFS at 600 MB/s (:data:`NODE_TRAFFIC`: a
  dataset being read, above the waste rules' 100 MB/s storage threshold; 600 MB/s is about half a 10 GbE link);
- ``infiniband``: the job's nodes receive and send 3 GB/s over InfiniBand (an eighth of one HDR port);
- ``throttled``: its GPUs' readings carry the ``sw_thermal`` and ``hw_slowdown`` clocks-event reasons
  (:data:`THROTTLE_REASONS`) at the idle SM clock, except for a burst of :data:`THROTTLE_BURST_MINUTES` at full
  clock and load every :data:`THROTTLE_PERIOD_MINUTES` from its start (the waste rule calls a GPU throttled when
  its clock is below the highest it reached in the day before; a GPU idle at one clock for longer has none);
- ``stalled``: its GPUs hold the busy capture's memory with no compute (a hung process);
- ``interactive``: the job is named ``jupyter-<user>`` (a notebook left open);
- ``None``: nothing (its idle time stays unexplained).

The traffic is a node's, as the collector reports it: the ``node_io`` part of the ingest batch, one entry per
minute with traffic, the rates of the jobs waiting on that node summed (:class:`NodeTraffic`); a node with none
reports no rate (not measured). Node-wide like real evidence, another idle job on the same node at the same time is
judged on it too.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from collector.contract.clocks_events import CLOCKS_EVENT_REASONS
from collector.contract.node_io import rate_field

LUSTRE, NFS, INFINIBAND, THROTTLED, STALLED, INTERACTIVE = (
    "lustre", "nfs", "infiniband", "throttled", "stalled", "interactive",
)  # fmt: skip
WAIT_WEIGHTS: tuple[tuple[str | None, float], ...] = (
    (LUSTRE, 0.2),
    (NFS, 0.1),
    (INFINIBAND, 0.2),
    (THROTTLED, 0.15),
    (STALLED, 0.15),
    (INTERACTIVE, 0.1),
    (None, 0.1),
)
"""Each wait and the share of idle jobs drawn to it (None: no derived evidence)."""
NODE_TRAFFIC: dict[str, dict[str, float]] = {
    LUSTRE: {"lustre_read": 2.1e9},
    NFS: {"nfs_read": 6.0e8},
    INFINIBAND: {"infiniband_received": 3.0e9, "infiniband_transmitted": 3.0e9},
}
"""The node traffic of a wait: ``node_io`` kind → bytes per second."""
THROTTLE_REASONS = CLOCKS_EVENT_REASONS["sw_thermal"] | CLOCKS_EVENT_REASONS["hw_slowdown"]
"""The clocks-event reason bits a throttled job's readings carry (added to the idle reading's own)."""
THROTTLE_PERIOD_MINUTES = 360
THROTTLE_BURST_MINUTES = 10
"""A throttled job runs at full clock for the first THROTTLE_BURST_MINUTES of every THROTTLE_PERIOD_MINUTES."""


def interactive_name(user: str) -> str:
    """The job name of an interactive job: JupyterHub's ``jupyter-<user>``."""
    return f"jupyter-{user}"


@dataclass(frozen=True, slots=True)
class Stretch:
    """Traffic on a node over minutes [start, end) of the trace: ``node_io`` kind → bytes per second."""

    start: int
    end: int
    rates: dict[str, float]


@dataclass(slots=True)
class NodeTraffic:
    """The derived traffic of every node, as stretches; :meth:`entries` gives a node's ``node_io`` entries."""

    start: datetime
    stretches: dict[str, list[Stretch]] = field(default_factory=lambda: defaultdict(list))

    def add(self, nodes: Iterable[str], start: int, end: int, wait: str | None) -> None:
        """Put the traffic of ``wait`` (nothing for a wait without traffic) on ``nodes`` over minutes [start, end)."""
        rates = NODE_TRAFFIC.get(wait or "")
        if rates:
            for node in nodes:
                self.stretches[node].append(Stretch(start, end, rates))

    def entries(self, node: str, first: int, last: int) -> list[dict[str, object]]:
        """``node``'s ``node_io`` entries (:class:`collector.contract.wire.NodeIo` as dicts) of minutes
        [first, last), one per minute with traffic: ``ts`` the minute's start (epoch seconds), the rates summed."""
        found = [s for s in self.stretches.get(node, ()) if s.start < last and first < s.end]
        if not found:
            return []
        base = int(self.start.timestamp())
        entries: list[dict[str, object]] = []
        for minute in range(first, last):
            rates: dict[str, float] = {}
            for stretch in found:
                if stretch.start <= minute < stretch.end:
                    for kind, rate in stretch.rates.items():
                        rates[kind] = rates.get(kind, 0.0) + rate
            if rates:
                entries.append({"ts": base + 60 * minute, **{rate_field(k): v for k, v in sorted(rates.items())}})
        return entries


def draw_wait(draw: float, weights: Sequence[tuple[str | None, float]] = WAIT_WEIGHTS) -> str | None:
    """The wait a uniform ``draw`` in [0, 1) falls on, by cumulative ``weights``."""
    total = 0.0
    for wait, weight in weights:
        total += weight
        if draw < total:
            return wait
    return weights[-1][0]
