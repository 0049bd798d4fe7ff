"""Raw telemetry kept in a Prometheus-compatible TSDB (``FINOPS_TELEMETRY_SOURCE=tsdb``): what the scheduler's rollup
reads from it instead of ``gpu_samples``: the GPUs (:meth:`TsdbTelemetry.discover`), the ledger's metering,
the readings idle episodes are judged on (:meth:`TsdbTelemetry.idle_readings`) and the nodes' fabric and storage
rates their waste reasons read (:meth:`TsdbTelemetry.store_node_rates`).

:class:`TsdbTelemetry` bundles the TSDB's client (Prometheus HTTP API,
:class:`finops.ingest.prometheus.PrometheusClient`) with the series' selector and label names
(:class:`finops.ingest.prometheus_pull.PullOptions`, as for the Prometheus pull) and gives the ledger's
metering (:class:`finops.ingest.tsdb_metering.TsdbMeter`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from collector.contract.node_io import NODE_IO_COUNTERS
from collector.contract.wire import GpuInfo
from finops.db.hours import mark_hours_dirty
from finops.db.ledger_tables import LedgerEntry
from finops.db.models import Gpu
from finops.ingest.amd_exporter import AMD_MEMORY_TOTAL
from finops.ingest.node_io import HourRate, replace_hours
from finops.ingest.prometheus import InstantSample, PrometheusClient, selector_matchers
from finops.ingest.prometheus_pull import PullOptions, series_identity
from finops.ingest.promql_select import gpu_selector, raw_readings, uuid_groups
from finops.ingest.readings import Ingestor
from finops.ingest.tsdb_idle import IdleReading, idle_readings
from finops.ingest.tsdb_metering import TsdbMeter
from finops.timeutil import HOUR, floor_hour, from_epoch, to_epoch

STACKED_DISKS = 'device!~"(dm-|md)[0-9]+"'
"""Disks left out of the disk rates, as the collector leaves them out (:mod:`collector.node_io`)."""
RATE_WINDOW_SECONDS = 300
"""The shortest ``rate()`` window of the node rates (five minutes: scrapes every 15 to 60 s give it several points)."""

DISCOVERY_LOOKBACK_SECONDS = 7 * 86400
"""Default of ``FINOPS_TSDB_DISCOVERY_LOOKBACK_SECONDS``: how far back an empty ledger's first rollup looks for
GPUs."""
DISCOVERY_STEPS_PER_QUERY = 1440
"""Most steps of one discovery subquery (a day at a 60 s step). Prometheus holds some 1.3 samples per series and
step with a reading at once (measured on 2.42) and refuses a query holding more than ``--query.max-samples`` (50
million by default; documentation "Command-line flags"): a week at a 60 s step in one query is refused from some
3,700 GPUs on, a day at a time from some 26,000 on."""
DISCOVERY_BURST_STEPS = 2
"""Steps within which the first readings of a burst of GPUs (:meth:`TsdbTelemetry._first_readings`) begin: a burst
too large to name in one query reads every GPU's series over its span, some 3 steps."""
DISCOVERY_CHUNK_STEPS = 60
"""Most steps one query of named GPUs' first readings spans (:meth:`TsdbTelemetry._first_readings`)."""


@dataclass(frozen=True, slots=True)
class TsdbTelemetry:
    """The TSDB at ``client`` as the service's telemetry source; ``options``: its series' selector, label names,
    utilisation field and readings' step (seconds); ``discovery_lookback_seconds``: see :meth:`discover`;
    ``discovery_steps_per_query``: see :data:`DISCOVERY_STEPS_PER_QUERY`."""

    client: PrometheusClient
    options: PullOptions = field(default_factory=PullOptions)
    discovery_lookback_seconds: int = DISCOVERY_LOOKBACK_SECONDS
    discovery_steps_per_query: int = DISCOVERY_STEPS_PER_QUERY
    ingestor: Ingestor = field(default_factory=Ingestor, compare=False)

    @property
    def meter(self) -> TsdbMeter:
        """The rollup's ``meter=`` (:func:`finops.ledger.rollup.rollup`) for this TSDB."""
        return TsdbMeter(self.client, self.options)

    def discover(self, session: Session, until: int) -> int:
        """Register the GPUs with readings in the TSDB before ``until`` (epoch seconds) since the ledger's newest hour
        (an empty ledger: since ``until`` − :attr:`discovery_lookback_seconds`): :meth:`register_gpus`. The
        scheduler's rollup calls this first, so that the GPUs it meters are known."""
        newest = session.scalar(select(func.max(LedgerEntry.hour)))
        start = to_epoch(newest) if newest is not None else until - self.discovery_lookback_seconds
        return self.register_gpus(session, start, until)

    def register_gpus(self, session: Session, start: int, end: int) -> int:
        """Register every GPU whose discovery series (:attr:`_discovery_fields`: dcgm-exporter's utilisation, AMD's
        exporter's VRAM size) has readings in [start, end) (epoch seconds) through the
        ingest's inventory path (:meth:`finops.ingest.readings.Ingestor.register`: node, index, model and UUID
        from the series' labels as the Prometheus pull reads them, ``in_service_from`` moved back to the first
        reading found), and mark the ledger hours from a GPU's new ``in_service_from`` to its old one (or ``end``)
        dirty. MIG instance series are left out. Returns how many GPUs were registered or moved back.

        The first reading: ``min_over_time(timestamp(U)[<span>s:<step>s])`` (a PromQL subquery at the readings'
        step, Prometheus documentation "Subquery"; over [start, end) in spans of at most
        :attr:`discovery_steps_per_query` steps) gives, per series, the newest reading at the first step instant
        after the first reading, v; for a GPU unknown or possibly entering service earlier than known, its raw
        readings of [max(start, v − step + 1), max(start, v) + step) give the first one exactly, for readings at
        most a step apart. Those raw readings are asked for many GPUs at once (:meth:`_first_readings`): a fleet
        found at once takes one query, not one per GPU."""
        step = self.options.step_seconds
        found: dict[str, tuple[str, GpuInfo, int, str]] = {}
        for name in self._discovery_fields:
            for sample in self._first_timestamps(self.options.query(name), start, end):
                identity = series_identity(sample.labels, self.options.labels)
                if identity is None or identity[1]["mig_profile"]:
                    continue
                node, labels, _ = identity
                info = GpuInfo(uuid=labels["uuid"], index=int(labels["gpu"]), model=labels["model"])
                approximate = int(sample.value)
                if labels["uuid"] not in found or approximate < found[labels["uuid"]][2]:
                    found[labels["uuid"]] = (node, info, approximate, name)
        known = {
            uuid: to_epoch(entered)
            for uuid, entered in session.execute(select(Gpu.uuid, Gpu.in_service_from))
            if uuid in found
        }
        asks = {
            uuid: (name, max(start, approximate - step + 1), max(start, approximate) + step)
            for uuid, (_, _, approximate, name) in found.items()
            if uuid not in known or known[uuid] > max(start, approximate - step + 1)
        }
        firsts = self._first_readings(asks)
        by_node: dict[str, dict[str, tuple[GpuInfo, int]]] = defaultdict(dict)
        for uuid in asks:
            node, info, approximate, _ = found[uuid]
            first = firsts.get(uuid, max(start, approximate))
            if uuid not in known or first < known[uuid]:
                by_node[node][uuid] = (info, first)
        dirty: set[int] = set()
        for node, gpus in sorted(by_node.items()):
            first_seen = {uuid: first for uuid, (_, first) in gpus.items()}
            self.ingestor.register(session, node, [info for info, _ in gpus.values()], first_seen)
            for uuid, first in first_seen.items():
                dirty.update(range(floor_hour(first), known.get(uuid, end), HOUR))
        mark_hours_dirty(session, dirty)
        return sum(len(gpus) for gpus in by_node.values())

    def _first_readings(self, asks: Mapping[str, tuple[str, int, int]]) -> dict[str, int]:
        """Per GPU of ``asks`` (UUID → its discovery series, a, b): the epoch second of its first reading of that
        series in [a, b), where it has one.

        Raw readings (:func:`~finops.ingest.promql_select.raw_readings`) of the GPUs in time order of a, in few
        queries: a *burst* (GPUs whose a lie within :data:`DISCOVERY_BURST_STEPS` steps of the first one's) that
        fills more than one query of UUIDs is asked for every series of the field at once over its span, the other
        GPUs named by UUID (:func:`~finops.ingest.promql_select.uuid_groups`), as many a query as fit in one whose
        span is at most :data:`DISCOVERY_CHUNK_STEPS` steps. So a fleet entering service together (the first rollup
        of a new site) takes one query, and GPUs entering apart a query per some 50 of them or per span."""
        step = self.options.step_seconds
        chunks: list[tuple[str, list[str], bool]] = []  # (series, UUIDs, named)
        by_name: dict[str, list[tuple[int, str]]] = defaultdict(list)
        for uuid, (name, a, _) in asks.items():
            by_name[name].append((a, uuid))
        for name, spans in by_name.items():
            spans.sort()
            scattered: list[str] = []
            for burst in _runs(spans, DISCOVERY_BURST_STEPS * step):
                uuids = [uuid for _, uuid in burst]
                if len(uuid_groups(uuids)) > 1:
                    chunks.append((name, uuids, False))
                else:
                    scattered += uuids
            for span in _runs([(asks[uuid][1], uuid) for uuid in scattered], DISCOVERY_CHUNK_STEPS * step):
                chunks += [(name, group, True) for group in uuid_groups([uuid for _, uuid in span])]
        firsts: dict[str, int] = {}
        for name, uuids, named in chunks:
            lo, hi = min(asks[uuid][1] for uuid in uuids), max(asks[uuid][2] for uuid in uuids)
            selector = gpu_selector(self.options, name, uuids) if named else self.options.query(name)
            wanted = set(uuids)
            for series in raw_readings(self.client, selector, lo, hi):
                uuid = self.options.labels.canonical(series.labels).get("UUID", "")
                if uuid not in wanted:
                    continue
                _, a, b = asks[uuid]
                times = [int(ts) for ts, _ in series.points if a <= ts < b]
                if times and (uuid not in firsts or min(times) < firsts[uuid]):
                    firsts[uuid] = min(times)
        return firsts

    def _first_timestamps(self, series: str, start: int, end: int) -> list[InstantSample]:
        """Per series of ``series`` and span of [start, end) (epoch seconds) of at most
        :attr:`discovery_steps_per_query` steps with readings: the subquery's value (see :meth:`register_gpus`)."""
        step = self.options.step_seconds
        span = self.discovery_steps_per_query * step
        return [
            sample
            for a in range(start, end, span)
            for sample in self.client.query(
                f"min_over_time(timestamp({series})[{min(a + span, end) - a}s:{step}s])",
                from_epoch(min(a + span, end) - 1),
            )
        ]

    @property
    def _discovery_fields(self) -> tuple[str, str]:
        """The series a GPU is found by, one per exporter: dcgm-exporter's utilisation (the first of the options'), and
        AMD's exporter's VRAM size (:data:`finops.ingest.amd_exporter.AMD_MEMORY_TOTAL`), which every device exports,
        where ``gpu_gfx_activity`` is partition 0's only on a partitioned MI300X under some exporter versions: the
        other partitions, found by it, would never be metered."""
        return (self.options.utilization_fields[0], AMD_MEMORY_TOTAL)

    def idle_readings(self, session: Session, start: int, end: int, threshold: float) -> list[IdleReading]:
        """The readings of [start, end) (epoch seconds) of the GPUs the database knows that idle detection judges at
        thresholds up to ``threshold`` (a utilisation ratio), as :class:`finops.analysis.idle.ReadingSource` gives
        them: those at or below it and their neighbours, each the TSDB's own sample, not a value resampled at a
        step, asked for the fleet at once and read for the GPUs and five minutes with one
        (:func:`finops.ingest.tsdb_idle.idle_readings`). MIG instance series are left out."""
        by_uuid = {uuid: gpu_id for gpu_id, uuid in session.execute(select(Gpu.id, Gpu.uuid)) if uuid is not None}
        return idle_readings(self.client, self.options, by_uuid, start, end, threshold)

    def store_node_rates(self, session: Session, hours: Iterable[int]) -> int:
        """Read the nodes' fabric and storage rates of ``hours`` (epoch starts; the hours a rollup rebuilt) from the
        collectors' byte counters in the TSDB and put them in ``node_io_hours`` in place of those hours' rows
        (:func:`finops.ingest.node_io.replace_hours`); returns the rows written.

        Per hour and kind (:data:`collector.contract.node_io.NODE_IO_COUNTERS`), one instant query at the hour's last
        second: the node's rate ``sum by (instance, Hostname) (rate(COUNTER[w]))`` (w the step, at least
        :data:`RATE_WINDOW_SECONDS`; device-mapper and md disks left out) sampled at the step over the hour by a
        subquery, its ``avg_over_time``, ``max_over_time`` and ``count_over_time`` (told apart by a ``stat`` label).
        The node is the ``Hostname`` label, else ``instance`` without its port, as for dcgm-exporter's series."""
        wanted = sorted(set(hours))
        labels, step = self.options.labels, self.options.step_seconds
        window_seconds = max(step, RATE_WINDOW_SECONDS)
        found: list[HourRate] = []
        for hour in wanted:
            for kind, (entity, counter) in NODE_IO_COUNTERS.items():
                matchers = ", ".join(m for m in (selector_matchers(self.options.selector),
                                                 STACKED_DISKS if entity == "disk" else "") if m)  # fmt: skip
                rate = (
                    f"sum by ({labels.instance}, {labels.hostname}) (rate({counter}{{{matchers}}}[{window_seconds}s]))"
                )
                stats = " or ".join(
                    f'label_replace({stat}_over_time(({rate})[{HOUR}s:{step}s]), "stat", "{stat}", "", "")'
                    for stat in ("avg", "max", "count")
                )
                per_node: dict[str, dict[str, float]] = defaultdict(dict)
                for sample in self.client.query(stats, from_epoch(hour + HOUR - 1)):
                    per_node[labels.node(sample.labels)][sample.labels.get("stat", "")] = sample.value
                found += [
                    HourRate(node, hour, kind, int(values.get("count", 0)), values.get("avg", 0.0),
                             values.get("max", 0.0))
                    for node, values in per_node.items()
                    if node
                ]  # fmt: skip
        return replace_hours(session, wanted, found)


def _runs(spans: Sequence[tuple[int, str]], width: int) -> list[list[tuple[int, str]]]:
    """``spans`` ((epoch second, UUID), in time order) cut into consecutive runs, each within ``width`` seconds of
    its first."""
    runs: list[list[tuple[int, str]]] = []
    for span in spans:
        if runs and span[0] - runs[-1][0][0] <= width:
            runs[-1].append(span)
        else:
            runs.append([span])
    return runs
