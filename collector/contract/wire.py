"""The ingest wire format: what a collector POSTs to ``/api/v1/ingest``.

One JSON object per request (optionally gzip-encoded), shared by the collector that writes it and the
service that validates it. A node's readings come in one of two shapes, or both in one batch:

- ``series`` (columns, what the collector sends): per GPU, its timestamps as integer epoch seconds (UTC) and
  one list per reading field, each as long as ``ts`` (a field absent from the series is null throughout)::

    {"node": "gpu-a-01",
     "gpus": [{"uuid": "GPU-…", "index": 0, "model": "NVIDIA H100 80GB HBM3", "memory_total_bytes": 85520809984}],
     "series": [{"uuid": "GPU-…", "ts": [1795244400, 1795244410], "utilization_ratio": [1.0, 0.97],
                 "power_watts": [655.1, null], "job_id": ["4000123", "4000123"]}]}

- ``samples`` (rows, version 1 of the format, still accepted): one object per reading, ``ts`` an ISO 8601
  time that must carry a UTC offset::

    {"node": "gpu-a-01", "gpus": [...],
     "samples": [{"uuid": "GPU-…", "ts": "2026-11-22T07:00:00Z", "utilization_ratio": 1.0, …}]}

Values are base units, within the bounds of :mod:`collector.contract.bounds`; a field the GPU does not support is
absent (null), never 0. Instants are truncated to whole seconds. ``job_id`` is the Slurm ``JobIDRaw`` the
collector's job map saw on the GPU, when known. Columns are about 2.5 times smaller than rows and the service
validates them as arrays, which is what makes large backlogs cheap to ingest.

A GPU that compute processes of more than one job use at once (time-slicing, MPS) has no single ``job_id``;
for its readings the batch may also carry ``job_utilization``, one object per job and reading: the GPU's UUID,
the reading's ``ts`` as integer epoch seconds (UTC, in both shapes), the job id (as ``job_id``) and the job's
SM utilisation ratio (0..1: the sum of its processes' NVML ``smUtil`` / 100, :mod:`collector.sources.nvml`,
:func:`shared_job_utilization`)::

    {"node": "gpu-a-01", "gpus": [...], "series": [...],
     "job_utilization": [{"uuid": "GPU-…", "ts": 1795244400, "job_id": "4000123", "utilization_ratio": 0.99},
                         {"uuid": "GPU-…", "ts": 1795244400, "job_id": "4000124", "utilization_ratio": 0.0}]}

The field is optional (absent: none), so batches of collectors that predate it are valid as they were; it is
never a batch's only content. The service stores it beside the readings (``gpu_job_utilization``) and names a
malformed entry in its answer without refusing the readings (:mod:`finops.web.app`).

The node's fabric and storage throughput may come along as ``node_io``, one entry per collector cycle
(:class:`NodeIo`, :mod:`collector.contract.node_io`)::

    {"node": "gpu-a-01", "gpus": [...], "series": [...],
     "node_io": [{"ts": 1795244410, "infiniband_received_bytes_per_second": 2.4e9,
                  "lustre_read_bytes_per_second": 2.1e9}]}

Optional too (absent: none; collectors that predate it send none), never a batch's only content, and named entry by
entry in the answer when malformed, the readings kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from collector.contract import metric_names as m
from collector.contract.bounds import (
    INT32_MAX,
    INT64_MAX,
    JOB_ID_MAX_LENGTH,
    Celsius,
    Count,
    EpochSecond,
    Hertz,
    Integer,
    JobId,
    Joules,
    NodeRate,
    Ratio,
    Text,
    Watts,
)
from collector.contract.node_io import NODE_IO_COUNTERS, rate_field
from collector.contract.sample import Sample

_FINITE = ConfigDict(extra="forbid", allow_inf_nan=False)
"""Every model of the format refuses unknown fields and non-finite numbers: the JSON literals ``Infinity``,
``-Infinity`` and ``NaN``, text such as ``"inf"`` or ``"nan"``, and a number too large for a double (``1e400``)."""

UNTIMELY_REASONS = ("future", "too_old")
"""``reason`` of a reading the service refuses for its time, in its 422's ``rejected`` entry: ``future``, stamped
more than the service's grace ahead of its clock (the node's clock is fast), or ``too_old``, older than the
service's sample retention (a slow clock, or a backlog held too long)."""


ACTIVITY_COLUMNS = (
    "sm_active_ratio", "sm_occupancy_ratio", "tensor_active_ratio", "dram_active_ratio", "fp64_active_ratio",
    "fp32_active_ratio", "fp16_active_ratio", "graphics_engine_active_ratio",
)  # fmt: skip
"""The hardware activity fields of a reading (ratios 0..1, each the mean over the reading's interval, never an
instant): what the GPU's profiling counters measured, as DCGM's profiling fields and NVML GPM define them.

- ``sm_active_ratio``: fraction of time at least one warp was resident on an SM, averaged over all SMs
  (DCGM_FI_PROF_SM_ACTIVE, NVML GPM ``NVML_GPM_METRIC_SM_UTIL`` / 100);
- ``sm_occupancy_ratio``: resident warps over the maximum an SM holds, averaged over time and SMs
  (DCGM_FI_PROF_SM_OCCUPANCY, ``NVML_GPM_METRIC_SM_OCCUPANCY`` / 100);
- ``tensor_active_ratio``: fraction of cycles any tensor pipe was active (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE,
  ``NVML_GPM_METRIC_ANY_TENSOR_UTIL`` / 100);
- ``dram_active_ratio``: fraction of cycles device memory was sending or receiving data
  (DCGM_FI_PROF_DRAM_ACTIVE, ``NVML_GPM_METRIC_DRAM_BW_UTIL`` / 100);
- ``fp64_active_ratio``, ``fp32_active_ratio``, ``fp16_active_ratio``: fraction of cycles the FP64, FMA (FP32) and
  FP16 pipes were active (DCGM_FI_PROF_PIPE_FP64/FP32/FP16_ACTIVE, ``NVML_GPM_METRIC_FP64/FP32/FP16_UTIL`` / 100);
- ``graphics_engine_active_ratio``: fraction of time the graphics or compute engine was active
  (DCGM_FI_PROF_GR_ENGINE_ACTIVE, ``NVML_GPM_METRIC_GRAPHICS_UTIL`` / 100).

A GPU that does not report a field leaves it null, never 0 (NVIDIA DCGM user guide, "Profiling Metrics"; NVML API
reference, "GPM"). DCGM 4.6's ``*_UTIL_RATIO`` names are the same fields.
"""

PACKAGE_SUMMED_FIELDS = ("power_watts", "energy_joules")
"""Reading fields a package reports as its total (watts, the joules counter): the service gives each of its
``package_devices`` devices an equal share, the value divided by their number (:mod:`finops.ingest.package_split`)."""
PACKAGE_MEAN_FIELDS = ("utilization_ratio", "memory_utilization_ratio", *ACTIVITY_COLUMNS)
"""Reading fields a package reports as a mean over its devices (ratios): the service gives each device the package's
value, whose mean over the devices is the package's (:mod:`finops.ingest.package_split`)."""
PACKAGE_FIELDS = (*PACKAGE_SUMMED_FIELDS, *PACKAGE_MEAN_FIELDS)
"""Every reading field a device may report for its whole package (:attr:`GpuInfo.package_fields`)."""


class GpuInfo(BaseModel):
    """Inventory of one GPU on the node (NVML or amdsmi UUID, index from 0 to :data:`INT32_MAX` and product name).

    A device that is part of a physical package shown as several devices (AMD Instinct MI250X: two GCDs; an
    MI300-series GPU in DPX, TPX, QPX or CPX mode: 2, 3, 4 or 8 compute partitions) names its package:

    - ``package_id``: the same text for every device of the package (1 to 64 characters), null for a whole GPU;
    - ``package_devices``: how many devices the package shows (1 to 64), each ``1 / package_devices`` of it;
    - ``package_fields``: the reading fields (of :data:`PACKAGE_FIELDS`) this device reports for the whole
      package, because the hardware reports them once per package (AMD: MI250X socket power and energy on one die
      only; MI300-series activity, power and energy on partition 0 only in the partitioned modes). The package's
      other devices leave them null. The service splits them over the package's devices when it stores the readings
      (:mod:`finops.ingest.package_split`), so that nothing is counted twice.

    The three are null by default (collectors that predate them send none); ``package_fields`` needs the other two.
    """

    model_config = _FINITE
    uuid: Text = Field(min_length=1, max_length=64)
    index: Integer = Field(ge=0, le=INT32_MAX)
    model: Text = Field(min_length=1, max_length=128)
    memory_total_bytes: Integer | None = Field(None, ge=0, le=INT64_MAX)
    package_id: Text | None = Field(None, min_length=1, max_length=64)
    package_devices: Integer | None = Field(None, ge=1, le=64)
    package_fields: list[str] | None = Field(None, max_length=len(PACKAGE_FIELDS))

    @model_validator(mode="after")
    def _package_fields_known(self) -> GpuInfo:
        unknown = sorted(set(self.package_fields or ()) - set(PACKAGE_FIELDS))
        if unknown:
            raise ValueError(f"package_fields: {', '.join(unknown)} not one of {', '.join(PACKAGE_FIELDS)}")
        if self.package_fields and (self.package_id is None or self.package_devices is None):
            raise ValueError("package_fields needs package_id and package_devices")
        return self


class GpuReading(BaseModel):
    """One GPU at one instant (a row). Ratios are 0..1; bytes, watts, joules, °C and Hz as named, each within what
    the collectors' sources can report (:data:`~collector.contract.bounds.MAX_POWER_WATTS`,
    :data:`~collector.contract.bounds.MAX_ENERGY_JOULES`, :data:`~collector.contract.bounds.MAX_CLOCK_HERTZ`,
    :data:`~collector.contract.bounds.ABSOLUTE_ZERO_CELSIUS` to :data:`~collector.contract.bounds.UINT32_MAX` °C);
    integers up to :data:`INT64_MAX`; infinities and NaN are refused, and so is text holding NUL (:data:`Text`)."""

    model_config = _FINITE
    uuid: Text = Field(min_length=1, max_length=64)
    ts: AwareDatetime
    utilization_ratio: Ratio | None = None
    memory_utilization_ratio: Ratio | None = None
    memory_used_bytes: Count | None = None
    power_watts: Watts | None = None
    energy_joules: Joules | None = None
    temperature_celsius: Celsius | None = None
    sm_clock_hertz: Hertz | None = None
    clocks_event_reasons: Count | None = None
    job_id: JobId | None = None
    sm_active_ratio: Ratio | None = None
    sm_occupancy_ratio: Ratio | None = None
    tensor_active_ratio: Ratio | None = None
    dram_active_ratio: Ratio | None = None
    fp64_active_ratio: Ratio | None = None
    fp32_active_ratio: Ratio | None = None
    fp16_active_ratio: Ratio | None = None
    graphics_engine_active_ratio: Ratio | None = None


READING_COLUMNS = (
    "utilization_ratio", "memory_utilization_ratio", "memory_used_bytes", "power_watts", "energy_joules",
    "temperature_celsius", "sm_clock_hertz", "clocks_event_reasons", "job_id", *ACTIVITY_COLUMNS,
)  # fmt: skip
"""The reading fields besides ``uuid`` and ``ts``, in storage order: the columns of a :class:`GpuSeries`."""


class GpuSeries(BaseModel):
    """One GPU's readings as columns: ``ts`` (epoch seconds, UTC) and, per reading field, a list as long as ``ts``
    (its values in the same units and bounds as :class:`GpuReading`'s; null where not read). A field left out
    is null for every reading. Infinities and NaN are refused (JSON has neither, some encoders write them).
    """

    model_config = _FINITE
    uuid: Text = Field(min_length=1, max_length=64)
    ts: list[EpochSecond]
    utilization_ratio: list[Ratio | None] | None = None
    memory_utilization_ratio: list[Ratio | None] | None = None
    memory_used_bytes: list[Count | None] | None = None
    power_watts: list[Watts | None] | None = None
    energy_joules: list[Joules | None] | None = None
    temperature_celsius: list[Celsius | None] | None = None
    sm_clock_hertz: list[Hertz | None] | None = None
    clocks_event_reasons: list[Count | None] | None = None
    job_id: list[JobId | None] | None = None
    sm_active_ratio: list[Ratio | None] | None = None
    sm_occupancy_ratio: list[Ratio | None] | None = None
    tensor_active_ratio: list[Ratio | None] | None = None
    dram_active_ratio: list[Ratio | None] | None = None
    fp64_active_ratio: list[Ratio | None] | None = None
    fp32_active_ratio: list[Ratio | None] | None = None
    fp16_active_ratio: list[Ratio | None] | None = None
    graphics_engine_active_ratio: list[Ratio | None] | None = None

    @model_validator(mode="after")
    def _columns_as_long_as_ts(self) -> GpuSeries:
        for name in READING_COLUMNS:
            column = getattr(self, name)
            if column is not None and len(column) != len(self.ts):
                raise ValueError(f"{name} has {len(column)} values for {len(self.ts)} timestamps")
        return self


class JobUtilization(BaseModel):
    """One job's SM utilisation of a GPU it shares with other jobs, at one reading.

    ``uuid``: the GPU's NVML UUID; ``ts``: the reading's instant, epoch seconds (UTC); ``job_id``: as
    :class:`GpuReading`'s (a Slurm ``JobIDRaw``, or ``pod/<uid>``); ``utilization_ratio``: 0..1, the fraction of the
    period since the collector's previous cycle a kernel of the job's processes ran (sum over its processes of
    NVML ``smUtil`` / 100, capped at 1). Infinities and NaN are refused.
    """

    model_config = _FINITE
    uuid: Text = Field(min_length=1, max_length=64)
    ts: EpochSecond
    job_id: Text = Field(min_length=1, max_length=JOB_ID_MAX_LENGTH)
    utilization_ratio: Ratio


class NodeIo(BaseModel):
    """One collector cycle's fabric and storage throughput of the batch's node (:mod:`collector.contract.node_io`):
    ``ts`` (epoch seconds, UTC) and one rate per kind of :data:`~collector.contract.node_io.NODE_IO_COUNTERS`, bytes
    per second from 0 to :data:`~collector.contract.node_io.MAX_NODE_IO_BYTES_PER_SECOND` (null: the node has no such
    device). Unknown fields, infinities and NaN are refused."""

    model_config = _FINITE
    ts: EpochSecond
    infiniband_received_bytes_per_second: NodeRate | None = None
    infiniband_transmitted_bytes_per_second: NodeRate | None = None
    nfs_read_bytes_per_second: NodeRate | None = None
    nfs_written_bytes_per_second: NodeRate | None = None
    lustre_read_bytes_per_second: NodeRate | None = None
    lustre_written_bytes_per_second: NodeRate | None = None
    disk_read_bytes_per_second: NodeRate | None = None
    disk_written_bytes_per_second: NodeRate | None = None

    def rates(self) -> dict[str, float]:
        """Kind (a key of :data:`~collector.contract.node_io.NODE_IO_COUNTERS`) → rate in bytes per second, for the
        kinds the entry carries."""
        return {kind: value for kind in NODE_IO_COUNTERS if (value := getattr(self, rate_field(kind))) is not None}


class IngestBatch(BaseModel):
    """A node's batch: its GPU inventory and readings, as rows (``samples``), columns (``series``) or both, the
    per-job utilisation of shared GPUs (``job_utilization``, optional) and the node's throughput (``node_io``,
    optional)."""

    node: Text = Field(min_length=1, max_length=255)
    gpus: list[GpuInfo] = Field(default_factory=list)
    samples: list[GpuReading] = Field(default_factory=list)
    series: list[GpuSeries] = Field(default_factory=list)
    job_utilization: list[JobUtilization] = Field(default_factory=list)
    node_io: list[NodeIo] = Field(default_factory=list)

    @model_validator(mode="after")
    def _carries_readings(self) -> IngestBatch:
        if not {"samples", "series"} & self.model_fields_set:
            raise ValueError("a batch carries its readings in samples or series")
        return self

    @property
    def gpu_uuids(self) -> set[str]:
        """UUIDs of every GPU the batch names: in ``gpus``, ``series``, ``samples`` and ``job_utilization``."""
        named = {info.uuid for info in self.gpus} | {series.uuid for series in self.series}
        return named | {reading.uuid for reading in self.samples} | {share.uuid for share in self.job_utilization}

    @property
    def reading_count(self) -> int:
        """Readings in the batch: rows plus the length of every series."""
        return len(self.samples) + sum(len(s.ts) for s in self.series)


_READING_FIELDS: dict[str, str] = {
    m.GPU_UTILIZATION: "utilization_ratio",
    m.GPU_MEMORY_UTILIZATION: "memory_utilization_ratio",
    m.GPU_MEMORY_USED: "memory_used_bytes",
    m.GPU_POWER: "power_watts",
    m.GPU_ENERGY: "energy_joules",
    m.GPU_TEMPERATURE: "temperature_celsius",
    m.GPU_SM_CLOCK: "sm_clock_hertz",
    m.GPU_CLOCKS_EVENT_REASONS: "clocks_event_reasons",
    m.GPU_SM_ACTIVE: "sm_active_ratio",
    m.GPU_SM_OCCUPANCY: "sm_occupancy_ratio",
    m.GPU_TENSOR_ACTIVE: "tensor_active_ratio",
    m.GPU_DRAM_ACTIVE: "dram_active_ratio",
    m.GPU_FP64_ACTIVE: "fp64_active_ratio",
    m.GPU_FP32_ACTIVE: "fp32_active_ratio",
    m.GPU_FP16_ACTIVE: "fp16_active_ratio",
    m.GPU_GRAPHICS_ENGINE_ACTIVE: "graphics_engine_active_ratio",
}
_INTEGER_FIELDS = {"memory_used_bytes", "clocks_event_reasons"}


def reading_dict(sample: Sample) -> dict[str, object]:
    """The wire form of one GPU :class:`Sample` (a plain dict, ready for orjson)."""
    reading: dict[str, object] = {"uuid": sample.labels["uuid"], "ts": sample.timestamp}
    for metric, value in sample.values.items():
        field = _READING_FIELDS.get(metric)
        if field is not None:
            reading[field] = int(value) if field in _INTEGER_FIELDS else value
    if sample.job_id is not None:
        reading["job_id"] = sample.job_id
    return reading


def gpu_info_dict(sample: Sample) -> dict[str, object]:
    """The inventory entry for the GPU a :class:`Sample` was read from, with its package (:attr:`Sample.package`)
    when it has one."""
    total = sample.values.get(m.GPU_MEMORY_TOTAL)
    info: dict[str, object] = {
        "uuid": sample.labels["uuid"],
        "index": int(sample.labels["gpu"]),
        "model": sample.labels["model"],
        "memory_total_bytes": None if total is None else int(total),
    }
    if sample.package is not None:
        info["package_id"] = sample.package.id
        info["package_devices"] = sample.package.devices
        if sample.package.fields:
            info["package_fields"] = list(sample.package.fields)
    return info


def shippable(sample: Sample) -> bool:
    """Whether the service stores this sample: a reading of a whole GPU that answered.

    MIG instances (a non-empty ``mig_profile`` label) are left out: the ledger bills the physical GPU, and an
    instance shipped beside it would bill its share twice. A lost GPU (``gpufinops_gpu_up`` = 0) has no reading.
    """
    return sample.entity == "gpu" and not sample.labels.get("mig_profile") and sample.values.get(m.GPU_UP, 1.0) != 0


def shared_job_utilization(samples: list[Sample]) -> dict[str, dict[str, float]]:
    """Device UUID -> {job id: the job's SM utilisation ratio} for each device whose compute processes belong to
    more than one job in this cycle (a time-sliced or MPS GPU; a device held by one job has its own utilisation).

    Reads the ``entity="gpu_process"`` samples of one cycle after :meth:`JobMapper.annotate`: their ``uuid`` label
    (the GPU's, or the MIG instance's), :attr:`Sample.job_id` and ``gpufinops_gpu_process_sm_utilization_ratio``
    (:mod:`collector.sources.nvml`: mean ``smUtil`` / 100 since the last cycle). A job's ratio is the sum of its
    processes' ratios, capped at 1 (MPS clients of one job can each report a share of the same period). Processes
    without a job are left out of the sums; a device with a job-mapped process lacking the utilisation (NVML could
    not tell) gets no entry, since its shares would be partial.
    """
    jobs: dict[str, dict[str, float]] = {}
    unknown: set[str] = set()
    for sample in samples:
        if sample.entity != "gpu_process" or sample.job_id is None:
            continue
        uuid = sample.labels["uuid"]
        ratio = sample.values.get(m.GPU_PROCESS_SM_UTILIZATION)
        if ratio is None:
            unknown.add(uuid)
            continue
        shares = jobs.setdefault(uuid, {})
        shares[sample.job_id] = shares.get(sample.job_id, 0.0) + ratio
    return {
        uuid: {job: min(1.0, ratio) for job, ratio in shares.items()}
        for uuid, shares in jobs.items()
        if uuid not in unknown and len(shares) > 1
    }


def job_utilization_dicts(samples: Sequence[Sample], readings: Sequence[Sample]) -> list[dict[str, object]]:
    """The ``job_utilization`` entries (:class:`JobUtilization` as plain dicts) of one cycle's ``samples``: per
    reading of ``readings`` (shippable GPU samples) whose GPU processes of several jobs shared, one entry per job
    (:func:`shared_job_utilization`), at the reading's instant. Shares of a MIG instance
    are not shipped (its parent GPU is billed; NVML gives no per-process utilisation under MIG anyway)."""
    shares = shared_job_utilization(list(samples))
    return [
        {"uuid": uuid, "ts": int(reading.timestamp.timestamp()), "job_id": job, "utilization_ratio": ratio}
        for reading in readings
        for uuid in (reading.labels["uuid"],)
        for job, ratio in sorted(shares.get(uuid, {}).items())
    ]


def batch_dict(samples: Iterable[Sample]) -> dict[str, list[dict[str, object]]]:
    """``{"gpus": [...], "samples": [...]}`` for the :func:`shippable` samples (the batch without its node), with
    ``"job_utilization": [...]`` (:func:`job_utilization_dicts`) when a GPU was shared by several jobs."""
    collected = list(samples)
    readings = [s for s in collected if shippable(s)]
    newest = {s.labels["uuid"]: s for s in readings}  # each GPU's last reading, in order of its first
    batch = {"gpus": [gpu_info_dict(s) for s in newest.values()], "samples": [reading_dict(s) for s in readings]}
    shared = job_utilization_dicts(collected, readings)
    if shared:
        batch["job_utilization"] = shared
    return batch


SIDE_PARTS = ("job_utilization", "node_io")
"""The optional parts of a batch beside its readings, carried through merging and the columnar form as they are."""


def merge_batches(batches: Iterable[dict[str, list[dict[str, object]]]]) -> dict[str, list[dict[str, object]]]:
    """Several :func:`batch_dict` results as one: inventories merged by UUID (the last wins), readings and the
    entries of each :data:`SIDE_PARTS` part in order (a batch without one, e.g. spooled by an older collector, adds
    none to it)."""
    inventory: dict[object, dict[str, object]] = {}
    readings: list[dict[str, object]] = []
    sides: dict[str, list[dict[str, object]]] = {part: [] for part in SIDE_PARTS}
    for batch in batches:
        inventory.update((gpu["uuid"], gpu) for gpu in batch["gpus"])
        readings.extend(batch["samples"])
        for part, entries in sides.items():
            entries.extend(batch.get(part, []))
    merged = {"gpus": list(inventory.values()), "samples": readings}
    merged.update((part, entries) for part, entries in sides.items() if entries)
    return merged


def _epoch(value: object) -> int | None:
    """Epoch seconds of an aware instant (a datetime, or ISO 8601 text as orjson writes it); None otherwise."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if not isinstance(value, datetime) or value.tzinfo is None:
        return None
    return int(value.timestamp())


_ROW_KEYS = frozenset({"uuid", "ts", *READING_COLUMNS})


def columnar(batch: dict[str, list[dict[str, object]]]) -> dict[str, list[dict[str, Any]]]:
    """A :func:`batch_dict` (rows) batch as ``{"gpus": [...], "series": [...]}``: per GPU in order of first
    appearance, its readings in their order, columns that are null throughout left out.

    A reading the columns cannot carry as is (no aware ``ts``, no UUID, an unknown field) stays a row in
    ``samples``, so that the service judges it and names it in its answer exactly as before. The entries of the
    :data:`SIDE_PARTS` pass through as they are.
    """
    grouped: dict[str, tuple[list[int], list[dict[str, object]]]] = {}
    rows: list[dict[str, object]] = []
    for reading in batch["samples"]:
        uuid, epoch = reading.get("uuid"), _epoch(reading.get("ts"))
        if not isinstance(uuid, str) or epoch is None or not _ROW_KEYS.issuperset(reading):
            rows.append(reading)
            continue
        group = grouped.get(uuid)
        if group is None:
            group = grouped[uuid] = ([], [])
        group[0].append(epoch)
        group[1].append(reading)
    series: list[dict[str, Any]] = []
    for uuid, (stamps, readings) in grouped.items():
        entry: dict[str, Any] = {"uuid": uuid, "ts": stamps}
        for name in READING_COLUMNS:
            values = [reading.get(name) for reading in readings]
            if values.count(None) < len(values):
                entry[name] = values
        series.append(entry)
    body: dict[str, list[dict[str, Any]]] = {"gpus": batch["gpus"], "series": series}
    if rows:
        body["samples"] = rows
    body.update((part, batch[part]) for part in SIDE_PARTS if batch.get(part))
    return body
