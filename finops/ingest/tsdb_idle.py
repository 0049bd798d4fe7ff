"""The readings idle episodes are judged on, read from a Prometheus-compatible TSDB
(:meth:`finops.ingest.tsdb_source.TsdbTelemetry.idle_readings`, a :class:`finops.analysis.idle.ReadingSource`).

Which readings. Idle detection (:func:`finops.analysis.idle.detect_idle`) finds runs of readings at or below the
threshold; a reading above it counts only as the neighbour of one at or below: it ends the run before it, and its
time is where that run's cover ends and where the gap before the next run begins. So the readings given are those of
the period at or below the threshold (*low*) and, of each, the reading just before and just after it in its GPU's
series (:func:`kept`): the statement finds the same runs in them, at the same times, with the same readings and
memory, as in all the period's readings (for every threshold up to the one asked, and any max gap).

Queries (PromQL; Prometheus documentation "Query functions", "Operators"), the period cut into slices of
:data:`SLICE_SECONDS`:

1. Which GPUs have a low reading in which slice, for the whole fleet at once: per utilisation series (dcgm-exporter's,
   AMD's exporter's), one range query of ``min_over_time(U[<slice>s]) <= limit`` at each slice's last millisecond
   (the threshold in the series' unit, with a margin of 1e-9 of itself; the answers are checked against the
   threshold exactly here). Only the series with a low reading answer.
2. Their raw utilisation and memory readings (one selector names both series: ``{__name__=~"U|M", UUID=~"…"}``),
   per slice for the GPUs low in it, the slice widened by two steps each side so that the neighbours of its first
   and last low readings are read with it: one instant query of a range selector
   (:func:`~finops.ingest.promql_select.raw_readings`) per slice and group of UUIDs that fits a query
   (:func:`~finops.ingest.promql_select.uuid_groups`).
3. Where a low reading's neighbour may lie outside what was read (no reading of the GPU between it and the edge of
   what was read: a silence longer than the margin, or the newest readings), whether the GPU has a reading between
   that edge and the period's end (or start): ``count_over_time`` over that span, the GPUs with one edge packed
   into few queries; where it has, the GPU's slice beyond the edge as in 2, until the neighbour is read. GPUs low
   at their newest reading (idle now, in a period that runs past now) cost the one ``count_over_time``.
4. Where an AMD GPU's readings were read, the partitions of a partitioned GPU whose partition 0 alone has
   ``gpu_gfx_activity`` in an hour are given partition 0's readings of that hour, as the Prometheus pull gives them
   (:mod:`finops.ingest.tsdb_idle_partitions`, which says what it asks; a fleet without AMD GPUs asks nothing more).

Each sample counts in the second its time falls in (fraction dropped), as the database stores readings; of two in
one second of a GPU the later answered stands. MIG instance series and GPUs the database does not know are left out.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta

from finops.ingest.amd_exporter import AMD_MEMORY_USED, AMD_UTILIZATION
from finops.ingest.prometheus import PrometheusClient, RangeSeries
from finops.ingest.prometheus_pull import PullOptions, field_scale
from finops.ingest.promql_select import ask_packed, fields_selector, gpu_selector, raw_readings, uuid_groups, window
from finops.ingest.tsdb_idle_partitions import share_partition_zero
from finops.ingest.tsdb_metering import MEMORY_FIELD
from finops.timeutil import from_epoch

log = logging.getLogger(__name__)

SLICE_SECONDS = 300
"""Length of the slices the idle period is asked in: the GPUs low in a slice have that slice's raw readings read.
Shorter slices read fewer readings of GPUs idle for part of the period and ask more queries (a GPU idle across
several slices is named in each)."""
MARGIN_STEPS = 2
"""Steps (``FINOPS_PROMETHEUS_STEP_SECONDS``) a slice's raw readings are read beyond each of its edges, so that the
reading just outside it, the neighbour of a low reading at its edge, comes with it."""
LIMIT_MARGIN = 1e-9
"""Relative margin of the server-side threshold (the TSDB compares in the series' unit; the exact test is here)."""

_MS = timedelta(milliseconds=1)

IdleReading = tuple[int, int, float, float | None]
"""(``gpus.id``, epoch second, utilisation ratio, memory used in bytes or None), as
:class:`finops.analysis.idle.ReadingSource` gives them."""


def idle_readings(
    client: PrometheusClient,
    options: PullOptions,
    by_uuid: Mapping[str, int],
    start: int,
    end: int,
    threshold: float,
) -> list[IdleReading]:
    """The readings of [start, end) (epoch seconds) of the GPUs of ``by_uuid`` (UUID → ``gpus.id``) that idle
    detection judges at thresholds up to ``threshold`` (a utilisation ratio): each low reading and its neighbours
    (see the module documentation), in GPU and time order. The utilisation series read are dcgm-exporter's (the
    first of ``options.utilization_fields``) and AMD's exporter's ``gpu_gfx_activity``, each with its exporter's
    memory series. Raises :class:`~finops.ingest.prometheus.PrometheusError` when a query fails."""
    if end <= start:
        return []
    pairs = ((options.utilization_fields[0], MEMORY_FIELD), (AMD_UTILIZATION, AMD_MEMORY_USED))
    # Slices of equal length (range query steps), the last one past ``end``: its readings there are not read.
    slices = [(a, a + SLICE_SECONDS) for a in range(start, end, SLICE_SECONDS)]
    low = _low_slices(client, options, [name for name, _ in pairs], slices, by_uuid, threshold)
    reader = SliceReader(client, options, by_uuid, slices, MARGIN_STEPS * options.step_seconds, end)
    for (utilization, memory), wanted in zip(pairs, low, strict=True):
        read = reader.read(utilization, memory, wanted, threshold)
        if utilization == AMD_UTILIZATION and read:
            share_partition_zero(reader, read, threshold)
    found: list[IdleReading] = []
    for gpu_id, series in sorted(reader.utilization.items()):
        memory_of = reader.memory.get(gpu_id, {})
        found += [(gpu_id, ts, series[ts], memory_of.get(ts)) for ts in kept(sorted(series), series, threshold)]
    return found


def kept(times: Sequence[int], values: Mapping[int, float], threshold: float) -> list[int]:
    """Of a GPU's readings at ``times`` (in order; ``values``: each one's utilisation ratio), the times of those at
    or below ``threshold`` and of the readings just before and just after each of them, in order."""
    if not times:
        return []
    low = [values[ts] <= threshold for ts in times]
    after, before = [*low[1:], False], [False, *low[:-1]]
    return [ts for ts, a, b, c in zip(times, low, after, before, strict=True) if a or b or c]


def _low_slices(
    client: PrometheusClient,
    options: PullOptions,
    names: Sequence[str],
    slices: Sequence[tuple[int, int]],
    by_uuid: Mapping[str, int],
    threshold: float,
) -> list[dict[int, set[str]]]:
    """Per utilisation series of ``names``: slice index → the known GPUs (UUIDs) with a reading at or below
    ``threshold`` in that slice (query 1 of the module documentation).

    One range query per series (:meth:`~finops.ingest.prometheus.PrometheusClient.query_range`, ``exact``):
    ``min_over_time(U[<slice>s]) <= limit`` at each slice's last millisecond, b − 0.001, whose window holds the
    readings of [b − slice, b) to the millisecond as :func:`~finops.ingest.promql_select.window` selects them; the
    TSDB reads each reading once for all the slices. Where the server answers at other instants (a query frontend
    that aligns ranges to the step), the slices are asked as instant queries instead, packed
    (:func:`~finops.ingest.promql_select.ask_packed`), and that is logged."""
    low: list[dict[int, set[str]]] = []
    for name in names:
        limit = threshold / field_scale(name)
        limit += abs(limit) * LIMIT_MARGIN
        selector = options.query(name)
        first, last = from_epoch(slices[0][1]) - _MS, from_epoch(slices[-1][1]) - _MS
        answers: list[list[tuple[dict[str, str], float]]] = [[] for _ in slices]
        try:
            for series in client.query_range(f"min_over_time({selector}[{SLICE_SECONDS}s]) <= {limit!r}", first,
                                             last, SLICE_SECONDS, exact=True):  # fmt: skip
                for ts, value in series.points:
                    answers[_slice_at(slices, ts)].append((series.labels, value))
        except _Misaligned as exc:
            log.warning("%s: %s; the idle readings' slices are asked one by one", client.url, exc)
            asks = [(f"min_over_time({selector}{window(a, b)}) <= {limit!r}", b) for a, b in slices]
            answers = [[(s.labels, s.value) for s in samples] for samples in ask_packed(client, asks)]
        per_slice: dict[int, set[str]] = defaultdict(set)
        for index, samples in enumerate(answers):
            for labels, value in samples:
                canonical = options.labels.canonical(labels)
                uuid = canonical.get("UUID", "")
                if uuid in by_uuid and "GPU_I_PROFILE" not in canonical and value * field_scale(name) <= threshold:
                    per_slice[index].add(uuid)
        low.append(per_slice)
    return low


class _Misaligned(ValueError):
    """A range query answered at an instant that is not one asked."""


def _slice_at(slices: Sequence[tuple[int, int]], ts: float) -> int:
    """The index of the slice whose last millisecond is ``ts`` (epoch seconds); :class:`_Misaligned` for none."""
    index = round((ts - slices[0][1]) / SLICE_SECONDS)
    if not 0 <= index < len(slices) or abs(slices[index][1] - 0.001 - ts) > 0.0005:
        raise _Misaligned(f"answered at {ts:.3f}, not at the end of a slice asked")
    return index


class SliceReader:
    """Reads GPUs' raw utilisation and memory readings slice by slice (queries 2 and 3 of the module documentation)
    into :attr:`utilization` and :attr:`memory` (``gpus.id`` → epoch second → ratio, bytes)."""

    def __init__(
        self,
        client: PrometheusClient,
        options: PullOptions,
        by_uuid: Mapping[str, int],
        slices: Sequence[tuple[int, int]],
        margin: int,
        end: int,
    ) -> None:
        self.client, self.options, self.by_uuid, self.slices, self.margin = client, options, by_uuid, slices, margin
        self.end = end
        self.utilization: dict[int, dict[int, float]] = defaultdict(dict)
        self.memory: dict[int, dict[int, float]] = defaultdict(dict)

    def read(
        self, utilization: str, memory: str, wanted: Mapping[int, set[str]], threshold: float
    ) -> dict[str, set[int]]:
        """Read ``utilization``'s and ``memory``'s readings of the slices ``wanted`` (slice index → UUIDs), then of
        the slices beyond any edge a low reading's neighbour may lie past, until none is left; returns the slices
        read of each GPU (UUID → slice indexes)."""
        read: dict[str, set[int]] = defaultdict(set)
        while wanted:
            for index, uuids in sorted(wanted.items()):
                lo, hi = self.span(index)
                for group in uuid_groups(sorted(uuids)):
                    selector = fields_selector(self.options, [utilization, memory], group)
                    self.store(raw_readings(self.client, selector, lo, hi), utilization, memory)
                for uuid in uuids:
                    read[uuid].add(index)
            wanted = self._beyond(utilization, read, threshold)
        return read

    def span(self, index: int) -> tuple[int, int]:
        """The seconds slice ``index`` is read over: the slice and the margin each side, within the period."""
        a, b = self.slices[index]
        return max(self.slices[0][0], a - self.margin), min(self.end, b + self.margin)

    def store(self, found: Iterable[RangeSeries], utilization: str, memory: str) -> None:
        """Keep the readings of the raw series ``found`` of ``utilization`` and ``memory`` of known GPUs (not MIG
        instances), scaled to a ratio and bytes, each at the second its time falls in."""
        for series in found:
            labels = self.options.labels.canonical(series.labels)
            gpu_id = self.by_uuid.get(labels.get("UUID", ""))
            name = series.labels.get("__name__", "")
            if gpu_id is None or "GPU_I_PROFILE" in labels or name not in (utilization, memory):
                continue
            values = self.utilization[gpu_id] if name == utilization else self.memory[gpu_id]
            scale = field_scale(name)
            values.update({int(ts): value * scale for ts, value in series.points})

    def _beyond(self, utilization: str, read: Mapping[str, set[int]], threshold: float) -> dict[int, set[str]]:
        """Slice index → the GPUs whose slice there must be read too: for each stretch of slices read of a GPU, the
        slice before it when its first reading is low (its neighbour before may lie past the stretch's start) and
        the GPU has a reading between the period's start and the stretch, the slice after it when its last reading
        is low and the GPU has a reading between the stretch and the period's end (``count_over_time`` of
        ``utilization`` there, the GPUs with one edge asked together: :meth:`_with_readings`)."""
        edges: dict[tuple[int, int, int], set[str]] = defaultdict(set)  # (a, b, slice beside) → UUIDs
        first_second, last_second = self.slices[0][0], self.end
        for uuid, indexes in read.items():
            series = self.utilization.get(self.by_uuid[uuid], {})
            times = sorted(series)
            for first, last in _stretches(sorted(indexes)):
                lo, hi = self.span(first)[0], self.span(last)[1]
                inside = times[bisect_left(times, lo) : bisect_left(times, hi)]
                if lo > first_second and inside and series[inside[0]] <= threshold:
                    edges[first_second, lo, first - 1].add(uuid)
                if hi < last_second and inside and series[inside[-1]] <= threshold:
                    edges[hi, last_second, last + 1].add(uuid)
        wanted: dict[int, set[str]] = defaultdict(set)
        for (a, b, index), uuids in edges.items():
            wanted[index] |= self._with_readings(utilization, uuids, a, b)
        return {index: uuids for index, uuids in wanted.items() if uuids}

    def _with_readings(self, utilization: str, uuids: set[str], a: int, b: int) -> set[str]:
        """The GPUs of ``uuids`` with a reading of ``utilization`` in [a, b) (epoch seconds)."""
        asks = [(f"count_over_time({gpu_selector(self.options, utilization, group)}{window(a, b)})", b)
                for group in uuid_groups(sorted(uuids))]  # fmt: skip
        found = set()
        for sample in (sample for samples in ask_packed(self.client, asks) for sample in samples):
            labels = self.options.labels.canonical(sample.labels)
            if "GPU_I_PROFILE" not in labels and labels.get("UUID", "") in uuids:
                found.add(labels["UUID"])
        return found


def _stretches(indexes: Sequence[int]) -> list[tuple[int, int]]:
    """Consecutive runs of the sorted slice ``indexes`` as (first, last)."""
    runs: list[tuple[int, int]] = []
    for index in indexes:
        if runs and runs[-1][1] == index - 1:
            runs[-1] = (runs[-1][0], index)
        else:
            runs.append((index, index))
    return runs
