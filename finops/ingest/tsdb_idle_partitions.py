"""Idle readings of the partitions of an AMD GPU whose partition 0 alone exports ``gpu_gfx_activity`` (exporters
before 1.3.1), read from a TSDB (query 4 of :mod:`finops.ingest.tsdb_idle`): each other partition is given partition
0's utilisation at the instants it has a reading of its own, as the Prometheus pull gives it
(:mod:`finops.ingest.package_split`: a package's mean goes on each device's own reading at that instant; a device
without a reading then gets none), so that its job's idle time is judged as the pull judges it. Which packages share,
per hour, is the TSDB metering's rule (:func:`finops.ingest.tsdb_packages.package_activity`).

Queries, only where an AMD GPU's readings were read (a fleet without one asks nothing more):

1. per hour those readings fall in, the hour's ``count_over_time`` of ``gpu_gfx_activity`` and ``gpu_used_vram`` for
   every GPU (each AMD device's series answers), all the hours' asks packed
   (:func:`~finops.ingest.promql_select.ask_packed`): the devices known to the hour, their labels (package, mode,
   partition) and which have the activity;
2. per hour, for each such GPU whose partition 0's readings were read in it, the other partitions' ``gpu_used_vram``
   readings over the stretches of what was read of partition 0 in the hour, the partitions of GPUs read over the
   same stretches named together (per group of UUIDs that fits a query): the instants they have a reading, and their
   memory then;
3. where a partition's shared hours end with a low reading and the period goes on in an hour without sharing, its
   own readings of the rest of that slice, so that the reading that ends its run is its own, as in the pull.

A partition with no reading of its own at the instant of partition 0's reading that ends a run, whose next reading
lies past what was read of partition 0, has no neighbour there: its run's cover then ends the max gap after its last
low reading rather than at that next reading.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from finops.ingest.amd_exporter import AMD_MEMORY_USED, AMD_UTILIZATION
from finops.ingest.prometheus import PrometheusClient, RangeSeries
from finops.ingest.prometheus_pull import PullOptions
from finops.ingest.promql_select import ask_packed, fields_selector, raw_readings, uuid_groups, window
from finops.ingest.tsdb_packages import package_activity
from finops.timeutil import HOUR, floor_hour


class Reader(Protocol):
    """What :func:`share_partition_zero` reads and fills: :class:`finops.ingest.tsdb_idle.SliceReader`."""

    client: PrometheusClient
    options: PullOptions
    by_uuid: Mapping[str, int]
    slices: Sequence[tuple[int, int]]
    end: int
    utilization: dict[int, dict[int, float]]
    memory: dict[int, dict[int, float]]

    def span(self, index: int) -> tuple[int, int]:
        """The seconds slice ``index`` is read over."""

    def store(self, found: Iterable[RangeSeries], utilization: str, memory: str) -> None:
        """Keep the readings of the raw series ``found``."""


def share_partition_zero(reader: Reader, read: Mapping[str, set[int]], threshold: float) -> None:
    """Give each partition of a partitioned AMD GPU whose partition 0 alone has ``gpu_gfx_activity`` in an hour
    partition 0's readings read of that hour (``reader.utilization``, ``gpus.id`` → epoch second → ratio) at the
    instants the partition has a ``gpu_used_vram`` reading of its own (kept in ``reader.memory``); ``read``: the
    slices read of each GPU's ``gpu_gfx_activity`` (UUID → slice indexes); ``threshold``: the utilisation ratio at
    or below which a reading is low. Queries: the module documentation."""
    uuid_of = {gpu_id: uuid for uuid, gpu_id in reader.by_uuid.items()}
    reporters = {reader.by_uuid[uuid] for uuid in read}
    hours = sorted({floor_hour(ts) for gpu_id in reporters for ts in reader.utilization.get(gpu_id, {})})
    shared_hours: dict[int, set[int]] = defaultdict(set)  # partition (gpus.id) → hours it is given partition 0's
    for hour, packages in _packages_to_share(reader, hours).items():
        wanted: dict[tuple[tuple[int, int], ...], set[str]] = defaultdict(set)  # spans → partitions read over them
        given: list[tuple[dict[int, float], list[int]]] = []
        for reporter, partitions in packages:
            series = {ts: v for ts, v in reader.utilization.get(reporter, {}).items() if hour <= ts < hour + HOUR}
            spans = [
                (max(lo, hour), min(hi, hour + HOUR)) for lo, hi in map(reader.span, read.get(uuid_of[reporter], ()))
            ]
            spans = _merged(span for span in spans if span[0] < span[1])
            if series and spans and partitions:
                wanted[tuple(spans)] |= {uuid_of[gpu_id] for gpu_id in partitions}
                given.append((series, partitions))
        for stretches, uuids in wanted.items():
            _read_raw(reader, stretches, sorted(uuids), [AMD_MEMORY_USED])
        for series, partitions in given:
            for gpu_id in partitions:
                own = reader.memory.get(gpu_id, {})
                reader.utilization.setdefault(gpu_id, {}).update({ts: v for ts, v in series.items() if ts in own})
                shared_hours[gpu_id].add(hour)
    after: dict[tuple[int, int], list[str]] = defaultdict(list)
    for gpu_id, shared in shared_hours.items():
        for edge in _open_edges(reader, gpu_id, shared, threshold, read.get(uuid_of[gpu_id], set())):
            after[edge].append(uuid_of[gpu_id])
    for span, members in after.items():
        _read_raw(reader, [span], sorted(members), [AMD_UTILIZATION, AMD_MEMORY_USED])


def _packages_to_share(reader: Reader, hours: Sequence[int]) -> dict[int, list[tuple[int, list[int]]]]:
    """Per hour of ``hours`` (epoch starts), the partitioned packages whose partition 0 alone has
    ``gpu_gfx_activity`` in it (:func:`finops.ingest.tsdb_packages.package_activity`): (partition 0, the other
    partitions known to the hour), as ``gpus.id``. One packed ask of each series per hour (query 1)."""
    names = (AMD_UTILIZATION, AMD_MEMORY_USED)
    asks = [(f"count_over_time({reader.options.query(name)}{window(hour, hour + HOUR)})", hour + HOUR)
            for hour in hours for name in names]  # fmt: skip
    answers = ask_packed(reader.client, asks) if asks else []
    found: dict[int, list[tuple[int, list[int]]]] = {}
    for index, hour in enumerate(hours):
        labels: dict[int, dict[str, str]] = {}
        having: set[int] = set()
        for name, samples in zip(names, answers[len(names) * index : len(names) * (index + 1)], strict=True):
            for sample in samples:
                canonical = reader.options.labels.canonical(sample.labels)
                gpu_id = reader.by_uuid.get(canonical.get("UUID", ""))
                if gpu_id is not None and "GPU_I_PROFILE" not in canonical:
                    labels.setdefault(gpu_id, canonical)
                    if name == AMD_UTILIZATION:
                        having.add(gpu_id)
        packages = [
            (reporter, [gpu_id for gpu_id in report.members if gpu_id != reporter])
            for reporter, report in sorted(package_activity(labels, having).items())
        ]
        if packages:
            found[hour] = packages
    return found


def _open_edges(
    reader: Reader, gpu_id: int, shared: set[int], threshold: float, read: set[int]
) -> list[tuple[int, int]]:
    """The spans (epoch seconds) of a partition's own readings to read after its stretches of ``shared`` hours: the
    rest of the slice a stretch's end falls in, where the stretch's last reading given is low and the period goes on,
    unless that slice is among ``read`` (its own low readings there were read with their neighbours). A run's start
    needs no such read: a run begins at its first low reading whatever reading precedes it."""
    series = reader.utilization.get(gpu_id, {})
    first_second, length = reader.slices[0][0], reader.slices[0][1] - reader.slices[0][0]
    edges = []
    for start, end in _merged([(hour, hour + HOUR) for hour in shared]):
        inside = [ts for ts in series if start <= ts < end]
        index = (end - first_second) // length
        if inside and end < reader.end and series[max(inside)] <= threshold and index not in read:
            edges.append((end, reader.span(index)[1]))
    return [(lo, hi) for lo, hi in edges if lo < hi]


def _read_raw(reader: Reader, spans: Iterable[tuple[int, int]], uuids: Sequence[str], names: Sequence[str]) -> None:
    """Read the raw readings of the series ``names`` (AMD's exporter's) of the GPUs ``uuids`` over each of ``spans``
    into ``reader``: one query per span and group of UUIDs that fits a query."""
    for lo, hi in spans:
        for group in uuid_groups(list(uuids)):
            reader.store(raw_readings(reader.client, fields_selector(reader.options, names, group), lo, hi),
                         AMD_UTILIZATION, AMD_MEMORY_USED)  # fmt: skip


def _merged(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` [a, b) merged where they overlap or touch, in order."""
    merged: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged
