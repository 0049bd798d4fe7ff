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
from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from collector.contract.node_io import NODE_IO_COUNTERS
from collector.contract.wire import GpuInfo
from finops.db.hours import mark_hours_dirty
from finops.db.models import Gpu, LedgerEntry
from finops.ingest.amd_exporter import AMD_MEMORY_USED, AMD_UTILIZATION
from finops.ingest.node_io import HourRate, replace_hours
from finops.ingest.prometheus import InstantSample, PrometheusClient, selector_matchers
from finops.ingest.prometheus_pull import PullOptions, field_scale, series_identity
from finops.ingest.promql_select import gpu_selector, raw_readings, uuid_groups, window
from finops.ingest.readings import Ingestor
from finops.ingest.tsdb_metering import MEMORY_FIELD, TsdbMeter
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
        """Register every GPU whose utilisation series has readings in [start, end) (epoch seconds) through the
        ingest's inventory path (:meth:`finops.ingest.readings.Ingestor.register`: node, index, model and UUID
        from the series' labels as the Prometheus pull reads them, ``in_service_from`` moved back to the first
        reading found), and mark the ledger hours from a GPU's new ``in_service_from`` to its old one (or ``end``)
        dirty. MIG instance series are left out. Returns how many GPUs were registered or moved back.

        The first reading: ``min_over_time(timestamp(U)[<span>s:<step>s])`` (a PromQL subquery at the readings'
        step, Prometheus documentation "Subquery"; over [start, end) in spans of at most
        :attr:`discovery_steps_per_query` steps) gives, per series, the newest reading at the first step instant
        after the first reading, v; for a GPU unknown or possibly entering service earlier than known, its raw
        readings of [max(start, v − step + 1), max(start, v) + step) (an instant query of a range selector) give the
        first one exactly, for readings at most a step apart."""
        step = self.options.step_seconds
        found: dict[str, tuple[str, GpuInfo, int, str]] = {}
        for name in self._utilization_fields:
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
            for uuid, entered in session.execute(
                select(Gpu.uuid, Gpu.in_service_from).where(Gpu.uuid.in_(sorted(found)))
            )
        }
        by_node: dict[str, dict[str, tuple[GpuInfo, int]]] = defaultdict(dict)
        for uuid, (node, info, approximate, name) in found.items():
            if uuid in known and known[uuid] <= max(start, approximate - step + 1):
                continue
            first = self._first_reading(name, uuid, max(start, approximate - step + 1), max(start, approximate) + step)
            first = max(start, approximate) if first is None else first
            if uuid not in known or first < known[uuid]:
                by_node[node][uuid] = (info, first)
        for node, gpus in sorted(by_node.items()):
            first_seen = {uuid: first for uuid, (_, first) in gpus.items()}
            self.ingestor.register(session, node, [info for info, _ in gpus.values()], first_seen)
            for uuid, first in first_seen.items():
                mark_hours_dirty(session, range(floor_hour(first), known.get(uuid, end), HOUR))
        return sum(len(gpus) for gpus in by_node.values())

    def _first_timestamps(self, utilization: str, start: int, end: int) -> list[InstantSample]:
        """Per series of ``utilization`` and span of [start, end) (epoch seconds) of at most
        :attr:`discovery_steps_per_query` steps with readings: the subquery's value (see :meth:`register_gpus`)."""
        step = self.options.step_seconds
        span = self.discovery_steps_per_query * step
        return [
            sample
            for a in range(start, end, span)
            for sample in self.client.query(
                f"min_over_time(timestamp({utilization})[{min(a + span, end) - a}s:{step}s])",
                from_epoch(min(a + span, end) - 1),
            )
        ]

    @property
    def _utilization_fields(self) -> tuple[str, str]:
        """The utilisation series read: dcgm-exporter's (the first of the options'), AMD's exporter's."""
        return (self.options.utilization_fields[0], AMD_UTILIZATION)

    def _first_reading(self, name: str, uuid: str, a: int, b: int) -> int | None:
        """The epoch second of one GPU's first utilisation reading (series ``name``) in [a, b), None without one."""
        series = raw_readings(self.client, gpu_selector(self.options, name, [uuid]), a, b)
        return min((int(ts) for s in series for ts, _ in s.points), default=None)

    def idle_readings(
        self, session: Session, start: int, end: int, threshold: float
    ) -> list[tuple[int, int, float, float | None]]:
        """The readings of [start, end) (epoch seconds) of the GPUs the database knows that read at or below
        ``threshold`` (a utilisation ratio) at least once in it, as idle detection judges them
        (:class:`finops.analysis.idle.ReadingSource`): (``gpus.id``, epoch second, utilisation ratio, memory used in
        bytes or None), each the TSDB's own sample, not a value resampled at a step. MIG instance series are left
        out.

        First the GPUs: ``min_over_time`` of the utilisation over each hour of the period, for every GPU (one query
        an hour). Then those GPUs' raw samples of the utilisation and memory series by instant queries of range
        selectors naming them (:func:`finops.ingest.promql_select.uuid_matcher`, as many a query as
        :func:`~finops.ingest.promql_select.uuid_groups` allows), an hour at a time
        (:func:`finops.ingest.promql_select.raw_readings`), at the second their time falls in (fraction dropped, as
        the database stores readings)."""
        by_uuid = {uuid: gpu_id for gpu_id, uuid in session.execute(select(Gpu.id, Gpu.uuid)) if uuid is not None}
        pairs = tuple(zip(self._utilization_fields, (MEMORY_FIELD, AMD_MEMORY_USED), strict=True))
        hours = [(a, min(a + HOUR, end)) for a in range(start, end, HOUR)]
        low: dict[str, set[str]] = {name: set() for name, _ in pairs}
        for a, b in hours:
            for name, _ in pairs:
                for sample in self.client.query(
                    f"min_over_time({self.options.query(name)}{window(a, b)})", from_epoch(b)
                ):
                    labels = self.options.labels.canonical(sample.labels)
                    uuid = labels.get("UUID", "")
                    low_enough = sample.value * field_scale(name) <= threshold
                    if uuid in by_uuid and "GPU_I_PROFILE" not in labels and low_enough:
                        low[name].add(uuid)
        utilization: dict[tuple[int, int], float] = {}
        memory: dict[tuple[int, int], float] = {}
        for (utilization_field, memory_field), uuids in zip(pairs, low.values(), strict=True):
            for group in uuid_groups(sorted(uuids)):
                for a, b in hours:
                    for name, values in ((utilization_field, utilization), (memory_field, memory)):
                        for series in raw_readings(self.client, gpu_selector(self.options, name, group), a, b):
                            labels = self.options.labels.canonical(series.labels)
                            gpu_id = by_uuid.get(labels.get("UUID", ""))
                            if gpu_id is None or "GPU_I_PROFILE" in labels:
                                continue
                            for ts, value in series.points:
                                values[gpu_id, int(ts)] = value * field_scale(name)
        return [(gpu_id, ts, u, memory.get((gpu_id, ts))) for (gpu_id, ts), u in sorted(utilization.items())]

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
