"""GPU telemetry pulled from a Prometheus server that scrapes dcgm-exporter or AMD's Device Metrics Exporter, stored
through the ingest path.

Sites that already run dcgm-exporter (or AMD's exporter) and Prometheus need no collector: :func:`import_range` reads
the DCGM series with the Prometheus HTTP API (``GET /api/v1/query_range`` and ``/api/v1/query``; the JSON envelope,
the ``matrix`` and ``vector`` result formats and the error answers are those of the Prometheus documentation,
"HTTP API") and stores them as :class:`collector.contract.wire.IngestBatch` objects with
:meth:`finops.ingest.readings.Ingestor.store`, so the ledger, idle detection and reports treat them as collector
readings.

Fields and units are the collector's dcgm source table (:data:`collector.contract.dcgm_fields.FIELDS`; units from
dcgm-exporter's ``default-counters.csv``): DCGM_FI_DEV_GPU_UTIL % → ratio (or DCGM_FI_PROF_GR_ENGINE_ACTIVE,
already a ratio, see :data:`UTILIZATION_FIELDS`), DCGM_FI_DEV_MEM_COPY_UTIL % → ratio, DCGM_FI_DEV_FB_USED MiB →
bytes, DCGM_FI_DEV_POWER_USAGE W, DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION mJ (a counter since boot, as the CSV says) → J,
DCGM_FI_DEV_GPU_TEMP °C, DCGM_FI_DEV_SM_CLOCK MHz → Hz, DCGM_FI_DEV_CLOCKS_EVENT_REASONS (or its pre-3.3 name
DCGM_FI_DEV_CLOCK_THROTTLE_REASONS) bitmask; DCGM_FI_DEV_FB_TOTAL, or FB_USED + FB_FREE, MiB → the inventory's
memory size; and the hardware activity (:data:`ACTIVITY_METRICS`), from every profiling field the table maps to
one, ratios 0..1: DCGM_FI_PROF_SM_ACTIVE, SM_OCCUPANCY, PIPE_TENSOR_ACTIVE, DRAM_ACTIVE, PIPE_FP64/FP32/FP16_ACTIVE
and GR_ENGINE_ACTIVE (also the utilisation fallback: it fills both). Where two fields give one value (a field and its
other name) the first in the table's order present counts. A field the exporter does not export (dcgm-exporter's
``default-counters.csv`` leaves SM activity and occupancy and the FP pipes out) leaves its value null, never 0.

DCGM 4.6's cycle counters (:data:`CYCLE_FIELDS`: ``DCGM_FI_PROF_SM_CYCLES_ELAPSED_TOTAL`` and the active cycles of
the SM, any tensor pipe and the FP64/FP32/FP16 pipes, ``DCGM_FI_PROF_*_CYCLES_ACTIVE_TOTAL``), where a GPU's series
export them, give its SM, tensor and FP pipe activity in place of the ratio fields: at each instant, Δ active /
Δ elapsed between the counters' values at the previous instant and at this one
(:func:`collector.contract.dcgm_fields.cycle_means`), the exact mean over the interval between the two scrapes they
come from, as the collector's dcgm source takes it between its own scrapes. The counters are read by range queries
of their raw values starting one step before the window, so that the window's first instant has a base. PromQL's
``increase()`` is not used: Prometheus extrapolates it to the window's edges, and stops the extrapolation where a
counter would reach zero, which a barely used pipe's counter (a small value since boot) does and the elapsed
counter does not, so the two increases would not cover the same time. No mean, never 0: at a GPU's first instant
with counters, where the elapsed counter did not grow (no new scrape since the previous instant) and where a counter
went down (a reset); the reading's ratio field stands there if the GPU exports one. The choice is per GPU and
instant, so a fleet mixing DCGM versions gets counters where they are exported and ratio fields elsewhere.

Sampling: a range query evaluates every series at ``first, first + step, …, last``; each value is the newest
scraped sample at or before that instant (within Prometheus' lookback, 5 minutes by default). The instants are
multiples of ``step`` since the epoch, so two pulls of overlapping ranges ask for the same instants and the
ingest's uniqueness on (GPU, timestamp) stores each reading once. Prometheus refuses a range query of more than
11,000 points per series; :func:`step_chunks` splits a range into queries of at most ``max_points_per_query``
instants (≤ 11,000), and each chunk is stored in its own transaction. Before Prometheus' oldest data a query
returns no series, which is no data, not an error.

Identity: node = the ``Hostname`` label, else the host part of ``instance``; GPU = ``UUID`` with the ``gpu`` index
and ``modelName``; job = ``hpc_job`` if non-empty (dcgm-exporter ``--hpc-job-mapping-dir``: the Slurm job id),
else ``<namespace>/<pod>`` (``--kubernetes``). MIG instance series (``GPU_I_PROFILE``/``GPU_I_ID``) are read and
then left out exactly as the collector leaves them out (:func:`collector.contract.wire.shippable`): the ledger bills the
physical GPU, and an instance beside it would bill its share twice. Label names are configurable
(:class:`LabelNames`), and a selector (``{cluster="a"}``) adds matchers to every query.

AMD Instinct GPUs: AMD's Device Metrics Exporter's series (:data:`finops.ingest.amd_exporter.AMD_FIELDS`: activity,
memory, power, the µJ energy counter, temperatures and the profiler's activity fields) are pulled with the DCGM fields,
by the same code: a GPU is dcgm-exporter's or AMD's by its labels (:meth:`LabelNames.is_amd`), each series is scaled by
its own table, and a metric no series of the GPU gives stays null. AMD's identity and job labels
(``hostname``, ``gpu_id``, ``gpu_uuid``, ``card_series``, ``job_id``, ``namespace``/``pod``) are read under
dcgm-exporter's names (:meth:`LabelNames.canonical`). An MI250X GCD and an MI300X compute partition are GPUs of their
own; what AMD reports once per package (socket power and energy, on partition 0 or one die) is marked on the device
that reports it (:func:`finops.ingest.amd_exporter.marked_by_hour`, per node and UTC hour of a query window) and split
over the package's devices at ingest by :mod:`finops.ingest.package_split`'s rule, never counted twice.

Watermark: none is stored. ``gpu-finops import prometheus --start --end`` pulls an explicit range; the scheduled
pull (:class:`ScheduledPull`) pulls [now − 2 × interval, now) on every run, so a late or missed run loses nothing
and the overlap costs only skipped duplicates. A longer outage is filled by running the command over the gap.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker

from collector.contract import metric_names as m
from collector.contract.dcgm_fields import (
    CYCLE_COUNTERS,
    FIELDS,
    SM_CYCLES_ELAPSED,
    Field,
    cycle_means,
    fill_memory_total,
    gpu_labels,
    job_of,
)
from collector.contract.sample import Sample
from collector.contract.wire import IngestBatch, batch_dict
from finops.ingest.amd_exporter import (
    AMD_FIELDS,
    AMD_UTILIZATION,
    PACKAGE_WIDE,
    PackageLabels,
    marked_by_hour,
    reports_package,
)
from finops.ingest.prometheus import (
    MAX_POINTS_PER_SERIES,
    LabelNames,
    PrometheusClient,
    describe,
    selector_matchers,
    validation_message,
)
from finops.ingest.readings import Ingestor
from finops.timeutil import from_epoch, utc_now

log = logging.getLogger(__name__)


UTILIZATION_FIELDS: dict[str, Field] = {
    "DCGM_FI_DEV_GPU_UTIL": FIELDS["DCGM_FI_DEV_GPU_UTIL"],  # % of time a kernel ran
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": Field(m.GPU_UTILIZATION, 1.0),  # ratio of time the graphics engine was active
}
"""The DCGM fields that can give a GPU's utilisation, with their scale to a ratio."""


FB_FREE = "DCGM_FI_DEV_FB_FREE"

ACTIVITY_METRICS: dict[str, str] = {
    m.GPU_SM_ACTIVE: "sm_active",
    m.GPU_SM_OCCUPANCY: "sm_occupancy",
    m.GPU_TENSOR_ACTIVE: "tensor_active",
    m.GPU_DRAM_ACTIVE: "dram_active",
    m.GPU_FP64_ACTIVE: "fp64_active",
    m.GPU_FP32_ACTIVE: "fp32_active",
    m.GPU_FP16_ACTIVE: "fp16_active",
    m.GPU_GRAPHICS_ENGINE_ACTIVE: "graphics_engine_active",
}
"""Our hardware activity metrics (ratios 0..1) → the activity's name (the reading field
:data:`collector.contract.wire.ACTIVITY_COLUMNS` without ``_ratio``)."""


_STORED_METRICS = frozenset(
    {
        m.GPU_MEMORY_UTILIZATION,
        m.GPU_MEMORY_USED,
        m.GPU_MEMORY_TOTAL,
        m.GPU_POWER,
        m.GPU_ENERGY,
        m.GPU_TEMPERATURE,
        m.GPU_SM_CLOCK,
        m.GPU_CLOCKS_EVENT_REASONS,
        *ACTIVITY_METRICS,
    }
)


VALUE_FIELDS: tuple[str, ...] = (*(name for name, spec in FIELDS.items() if spec.metric in _STORED_METRICS), FB_FREE)
"""DCGM fields pulled besides utilisation: every field whose value the ingest wire format carries (the hardware
activity fields among them, :data:`ACTIVITY_METRICS`), the memory size fields for the inventory, and FB_FREE (memory
size = FB_USED + FB_FREE when FB_TOTAL is not exported)."""

CYCLE_FIELDS: tuple[str, ...] = (
    SM_CYCLES_ELAPSED,
    *(name for name, metric in CYCLE_COUNTERS.items() if metric in ACTIVITY_METRICS),
)
"""DCGM 4.6's cycle counters pulled: the elapsed SM cycles and each active-cycles counter that gives one of
:data:`ACTIVITY_METRICS` (SM, any tensor pipe, FP64, FP32, FP16)."""


@dataclass(frozen=True, slots=True)
class PullOptions:
    """What to pull and how.

    Attributes:
        step_seconds: seconds between readings (whole seconds, ≥ 1); instants are multiples of it since the epoch.
        selector: label matchers added to every query, in braces (``{cluster="a"}``); empty for none.
        labels: the site's label names.
        utilization_fields: DCGM fields for utilisation, in order of preference (a GPU's first one present at an
            instant is used): any of :data:`UTILIZATION_FIELDS`.
        max_points_per_query: instants per range query, 1..11,000 (a chunk holds GPUs × points × fields values
            in memory before it is stored).
    """

    step_seconds: int = 60
    selector: str = ""
    labels: LabelNames = field(default_factory=LabelNames)
    utilization_fields: tuple[str, ...] = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    max_points_per_query: int = 1440

    def __post_init__(self) -> None:
        if isinstance(self.step_seconds, bool) or not isinstance(self.step_seconds, int) or self.step_seconds < 1:
            raise ValueError(f"step_seconds: {self.step_seconds!r} is not a whole number of seconds ≥ 1")
        if not 1 <= self.max_points_per_query <= MAX_POINTS_PER_SERIES:
            raise ValueError(f"max_points_per_query: {self.max_points_per_query} is not in 1..{MAX_POINTS_PER_SERIES}")
        unknown = [name for name in self.utilization_fields if name not in UTILIZATION_FIELDS]
        if unknown or not self.utilization_fields:
            raise ValueError(f"utilization_fields: {unknown or '(none)'}; choose from {', '.join(UTILIZATION_FIELDS)}")
        selector_matchers(self.selector)

    @property
    def dcgm_fields(self) -> tuple[str, ...]:
        """Every DCGM field pulled, once: the utilisation fields, then :data:`VALUE_FIELDS`."""
        return tuple(dict.fromkeys((*self.utilization_fields, *VALUE_FIELDS)))

    @property
    def fields(self) -> tuple[str, ...]:
        """Every series pulled: :attr:`dcgm_fields`, then AMD's exporter's (:data:`AMD_FIELDS`)."""
        return (*self.dcgm_fields, *AMD_FIELDS)

    def query(self, dcgm_field: str) -> str:
        """The PromQL selector of one field: ``DCGM_FI_DEV_GPU_UTIL{cluster="a"}``."""
        inner = selector_matchers(self.selector)
        return f"{dcgm_field}{{{inner}}}" if inner else dcgm_field


@dataclass(frozen=True, slots=True)
class PulledChunk:
    """One range query window: instants ``first..last`` (epoch seconds, inclusive), one batch per node (per run of
    hours an AMD node's packages are marked alike in: :func:`finops.ingest.amd_exporter.marked_by_hour`), and how
    many readings were left out as MIG instances."""

    first: int
    last: int
    batches: list[IngestBatch]
    mig_readings: int


@dataclass(slots=True)
class PullResult:
    """What :func:`import_range` stored: readings sent to the ingest (a reading already stored adds no row),
    nodes and GPU UUIDs seen, query windows, and MIG instance readings left out."""

    readings: int = 0
    nodes: set[str] = field(default_factory=set)
    gpus: set[str] = field(default_factory=set)
    chunks: int = 0
    mig_readings: int = 0


def step_chunks(start: datetime, end: datetime, step_seconds: int, max_points: int) -> list[tuple[int, int]]:
    """The query windows covering every instant of [start, end) that is a multiple of ``step_seconds`` since the
    epoch: (first, last) epoch seconds, both evaluated, at most ``max_points`` instants each, in order, contiguous
    (the next window's first instant is the previous one's last + step). Empty when no instant falls in the range.
    """
    if start.tzinfo is None or end.tzinfo is None:
        raise ValueError("start and end must be timezone-aware")
    if end < start:
        raise ValueError(f"end {end.isoformat()} is before start {start.isoformat()}")
    first = -(-math.ceil(start.timestamp()) // step_seconds) * step_seconds
    last = (math.ceil(end.timestamp()) - 1) // step_seconds * step_seconds
    span = (max_points - 1) * step_seconds
    chunks = []
    while first <= last:
        chunk_last = min(first + span, last)
        chunks.append((first, chunk_last))
        first = chunk_last + step_seconds
    return chunks


@dataclass(slots=True)
class _Point:
    fields: dict[str, float] = field(default_factory=dict)
    job: str | None = None


@dataclass(slots=True)
class _Gpu:
    node: str
    labels: dict[str, str]
    points: dict[int, _Point] = field(default_factory=dict)
    counters: dict[int, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))


def pull(
    client: PrometheusClient, start: datetime, end: datetime, options: PullOptions | None = None
) -> Iterator[PulledChunk]:
    """The readings of [start, end), one :class:`PulledChunk` per query window (queried as it is consumed).

    Raises :class:`PrometheusError` when a query fails (the chunks already yielded stay valid).
    """
    options = options or PullOptions()
    for first, last in step_chunks(start, end, options.step_seconds, options.max_points_per_query):
        yield pull_chunk(client, first, last, options)


def pull_chunk(client: PrometheusClient, first: int, last: int, options: PullOptions) -> PulledChunk:
    """One query window (instants ``first..last`` epoch seconds, inclusive): every field's range query (the cycle
    counters' from ``first − step``, their base), grouped per node and GPU, aligned on the step instants, as one
    :class:`IngestBatch` per node (sorted by node; per run of hours marked alike for a node with AMD packages)."""
    step = options.step_seconds
    gpus: dict[tuple[str, str, str], _Gpu] = {}
    packages: dict[str, PackageLabels] = {}
    queries = [(name, first) for name in options.fields] + [(name, first - step) for name in CYCLE_FIELDS]
    for name, start in queries:
        for series in client.query_range(options.query(name), from_epoch(start), from_epoch(last), step):
            identity = series_identity(series.labels, options.labels)
            if identity is None:
                continue
            node, labels, job = identity
            canonical = options.labels.canonical(series.labels)
            if name in PACKAGE_WIDE and not reports_package(canonical):
                continue  # another device reports its package's power and energy
            key = (node, labels["gpu"], labels["uuid"])
            gpu = gpus.get(key)
            if gpu is None:
                gpu = gpus[key] = _Gpu(node, labels)
                package = PackageLabels.of(canonical) if options.labels.is_amd(series.labels) else None
                if package is not None:
                    packages[labels["uuid"]] = package
            for ts, value in series.points:
                epoch = round(ts)
                if name in CYCLE_FIELDS:
                    gpu.counters[epoch][name] = value
                    if epoch < first:
                        continue
                point = gpu.points.get(epoch)
                if point is None:
                    point = gpu.points[epoch] = _Point()
                if name not in CYCLE_FIELDS:
                    point.fields[name] = value
                if point.job is None:
                    point.job = job
    samples: dict[str, list[Sample]] = defaultdict(list)
    for gpu in gpus.values():
        for epoch in sorted(gpu.points):
            point = gpu.points[epoch]
            previous, current = gpu.counters.get(epoch - step), gpu.counters.get(epoch)
            cycles = (
                cycle_means(previous, current, (gpu.node, gpu.labels["uuid"], epoch)) if previous and current else {}
            )
            values = reading_values(point.fields, options.utilization_fields, cycles)
            if values:
                samples[gpu.node].append(Sample("gpu", gpu.labels, values, from_epoch(epoch), job_id=point.job))
    batches = []
    mig_readings = 0
    for node in sorted(samples):
        for run in marked_by_hour(samples[node], packages):
            payload: dict[str, Any] = {"node": node, **batch_dict(run)}
            mig_readings += len(run) - len(payload["samples"])
            batch = _validated(payload)
            if batch is not None and batch.samples:
                batches.append(batch)
    return PulledChunk(first, last, batches, mig_readings)


def field_spec(name: str) -> Field | None:
    """The metric and scale of a DCGM field (:data:`collector.contract.dcgm_fields.FIELDS`) or of an AMD exporter
    series (:data:`finops.ingest.amd_exporter.AMD_FIELDS`); None for neither."""
    return FIELDS.get(name) or AMD_FIELDS.get(name)


def field_scale(name: str) -> float:
    """The factor from a pulled series' unit to our base unit (:func:`field_spec`); KeyError naming an unknown one."""
    spec = field_spec(name)
    if spec is None:
        raise KeyError(f"{name}: neither a DCGM field nor an AMD exporter series")
    return spec.scale


def reading_values(
    raw: Mapping[str, float], utilization_fields: tuple[str, ...], cycles: Mapping[str, float] | None = None
) -> dict[str, float]:
    """Our metrics in base units (:mod:`collector.contract.metric_names`) from one GPU's DCGM field (or AMD
    exporter series) values at one instant, scaled by the collector's field table (or :data:`AMD_FIELDS`; where
    several fields give one metric, as a field and its older name, the first of ``raw`` present); utilisation from
    the first of ``utilization_fields`` (then AMD's ``gpu_gfx_activity``) present; the activity means from the cycle
    counters (``cycles``: metric -> ratio, :func:`cycle_means`) in place of the ratio fields'. A metric none of whose
    fields is in ``raw`` nor in ``cycles`` is absent (stored as null), never 0."""
    values: dict[str, float] = dict(cycles or {})
    for name, value in raw.items():
        spec = field_spec(name)
        if spec is not None and spec.metric != m.GPU_UTILIZATION:
            values.setdefault(spec.metric, value * spec.scale)
    for name in (*utilization_fields, AMD_UTILIZATION):
        if name in raw:
            values[m.GPU_UTILIZATION] = raw[name] * (UTILIZATION_FIELDS.get(name) or AMD_FIELDS[name]).scale
            break
    fill_memory_total(values, raw.get(FB_FREE))
    return values


def import_range(
    sessions: sessionmaker[Session],
    client: PrometheusClient,
    start: datetime,
    end: datetime,
    options: PullOptions | None = None,
    ingestor: Ingestor | None = None,
) -> PullResult:
    """Pull [start, end) and store it, each query window in its own transaction (a failure keeps the windows
    before it; pulling again is harmless: a reading already stored adds no row).

    Raises :class:`PrometheusError` naming the query that failed.
    """
    ingestor = ingestor or Ingestor()
    result = PullResult()
    for chunk in pull(client, start, end, options):
        with sessions.begin() as session:
            for batch in chunk.batches:
                result.readings += ingestor.store(session, batch)
                result.nodes.add(batch.node)
                result.gpus.update(reading.uuid for reading in batch.samples)
        result.chunks += 1
        result.mig_readings += chunk.mig_readings
    return result


class ScheduledPull:
    """The scheduler's pull: each :meth:`run` stores [now − 2 × ``interval_seconds``, now), so a late or missed
    run leaves no gap (nothing is stored about earlier runs; see the module documentation)."""

    def __init__(
        self,
        client: PrometheusClient,
        options: PullOptions,
        interval_seconds: int,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.client = client
        self.options = options
        self.lookback = timedelta(seconds=2 * interval_seconds)
        self._clock = clock
        self._ingestor = Ingestor()

    def run(self, sessions: sessionmaker[Session]) -> PullResult:
        """Pull and store the lookback window ending now; logs what came at INFO, at DEBUG when nothing did."""
        now = self._clock()
        result = import_range(sessions, self.client, now - self.lookback, now, self.options, self._ingestor)
        log.log(
            logging.INFO if result.readings else logging.DEBUG,  # quiet when nothing came
            "prometheus pull: %d readings of %d GPUs on %d nodes from %s",
            result.readings,
            len(result.gpus),
            len(result.nodes),
            self.client.url,
        )
        return result


def series_identity(labels: dict[str, str], names: LabelNames) -> tuple[str, dict[str, str], str | None] | None:
    """(node, our GPU labels, job) of a GPU series of dcgm-exporter or AMD's exporter, or None (logged) when it lacks
    what identifies a GPU."""
    canonical = names.canonical(labels)
    amd = names.is_amd(labels)
    required = (
        ("UUID", names.uuid_label(amd)),
        ("gpu", names.amd_gpu if amd else names.gpu),
        ("modelName", f"{names.amd_model} or card_model" if amd else names.model),
    )
    missing = [site for key, site in required if not canonical.get(key)]
    if missing:
        log.warning("series %s skipped: no %s label", describe(labels), " or ".join(missing))
        return None
    if not canonical["gpu"].isdigit():
        log.warning("series %s skipped: GPU index %s=%r is not a number", describe(labels), required[1][1],
                    canonical["gpu"])  # fmt: skip
        return None
    node = names.node(labels)
    if not node:
        hostnames = f"{names.amd_hostname if amd else names.hostname} nor {names.instance}"
        log.warning("series %s skipped: neither %s names its node", describe(labels), hostnames)
        return None
    return node, gpu_labels(canonical), job_of(canonical)


def _validated(payload: dict[str, Any]) -> IngestBatch | None:
    """The batch, after leaving out (and logging) readings the wire format rejects; a job id it rejects is
    dropped from its reading, which is kept. None when the batch itself is invalid."""
    try:
        return IngestBatch.model_validate(payload)
    except ValidationError as exc:
        errors = exc.errors()
    node = payload["node"]
    readings: list[dict[str, Any]] = payload["samples"]
    drop_readings: set[int] = set()
    drop_gpus: set[object] = set()
    for error in errors:
        loc = error["loc"]
        if len(loc) >= 2 and loc[0] == "samples" and isinstance(loc[1], int):
            reading = readings[loc[1]]
            where = f"node {node} GPU {reading['uuid']} at {reading['ts'].isoformat()}"
            if loc[2:] == ("job_id",):
                log.warning("%s: job id %r not stored: %s", where, reading.pop("job_id", None), error["msg"])
            else:
                log.warning("%s: reading skipped: %s: %s", where, ".".join(map(str, loc[2:])), error["msg"])
                drop_readings.add(loc[1])
        elif len(loc) >= 2 and loc[0] == "gpus" and isinstance(loc[1], int):
            gpu = payload["gpus"][loc[1]]
            log.warning("node %s GPU %s skipped: %s: %s", node, gpu["uuid"], ".".join(map(str, loc[2:])), error["msg"])
            drop_gpus.add(gpu["uuid"])
        else:
            log.warning("node %r skipped: %s: %s", node, ".".join(map(str, loc)), error["msg"])
            return None
    payload["gpus"] = [gpu for gpu in payload["gpus"] if gpu["uuid"] not in drop_gpus]
    payload["samples"] = [r for i, r in enumerate(readings) if i not in drop_readings and r["uuid"] not in drop_gpus]
    try:
        return IngestBatch.model_validate(payload)
    except ValidationError as exc:
        log.warning("node %r skipped: %s", node, validation_message(exc))
        return None
