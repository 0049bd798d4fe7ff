"""The ingest wire format, version 1: what a collector POSTs to ``/api/v1/ingest``.

One JSON object per request (optionally gzip-encoded), shared by the collector that writes it and the
service that validates it::

    {"node": "gpu-a-01",
     "gpus": [{"uuid": "GPU-…", "index": 0, "model": "NVIDIA H100 80GB HBM3", "memory_total_bytes": 85520809984}],
     "samples": [{"uuid": "GPU-…", "ts": "2026-11-22T07:00:00Z", "utilization_ratio": 1.0, …}]}

Values are base units; a field the GPU does not support is absent (null), never 0. ``ts`` must carry a UTC
offset. ``job_id`` is the Slurm ``JobIDRaw`` the collector's job map saw on the GPU, when known.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from collector import metric_names as m
from collector.sample import Sample


class GpuInfo(BaseModel):
    """Inventory of one GPU on the node (NVML UUID, index and product name)."""

    model_config = ConfigDict(extra="forbid")
    uuid: str = Field(min_length=1, max_length=64)
    index: int = Field(ge=0)
    model: str = Field(min_length=1, max_length=128)
    memory_total_bytes: int | None = Field(None, ge=0)


class GpuReading(BaseModel):
    """One GPU at one instant. Ratios are 0..1; bytes, watts, joules, °C and Hz as named."""

    model_config = ConfigDict(extra="forbid")
    uuid: str = Field(min_length=1, max_length=64)
    ts: AwareDatetime
    utilization_ratio: float | None = Field(None, ge=0, le=1)
    memory_utilization_ratio: float | None = Field(None, ge=0, le=1)
    memory_used_bytes: int | None = Field(None, ge=0)
    power_watts: float | None = Field(None, ge=0)
    energy_joules: float | None = Field(None, ge=0)
    temperature_celsius: float | None = None
    sm_clock_hertz: float | None = Field(None, ge=0)
    clocks_event_reasons: int | None = Field(None, ge=0)
    job_id: str | None = Field(None, max_length=64)


class IngestBatch(BaseModel):
    """A node's batch: its GPU inventory and readings."""

    node: str = Field(min_length=1, max_length=255)
    gpus: list[GpuInfo] = Field(default_factory=list)
    samples: list[GpuReading]


_READING_FIELDS: dict[str, str] = {
    m.GPU_UTILIZATION: "utilization_ratio",
    m.GPU_MEMORY_UTILIZATION: "memory_utilization_ratio",
    m.GPU_MEMORY_USED: "memory_used_bytes",
    m.GPU_POWER: "power_watts",
    m.GPU_ENERGY: "energy_joules",
    m.GPU_TEMPERATURE: "temperature_celsius",
    m.GPU_SM_CLOCK: "sm_clock_hertz",
    m.GPU_CLOCKS_EVENT_REASONS: "clocks_event_reasons",
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
    """The inventory entry for the GPU a :class:`Sample` was read from."""
    total = sample.values.get(m.GPU_MEMORY_TOTAL)
    return {
        "uuid": sample.labels["uuid"],
        "index": int(sample.labels["gpu"]),
        "model": sample.labels["model"],
        "memory_total_bytes": None if total is None else int(total),
    }


def shippable(sample: Sample) -> bool:
    """Whether the service stores this sample: a reading of a whole GPU that answered.

    MIG instances (a non-empty ``mig_profile`` label) are left out: the ledger bills the physical GPU, and an
    instance shipped beside it would bill its share twice. A lost GPU (``gpufinops_gpu_up`` = 0) has no reading.
    """
    return sample.entity == "gpu" and not sample.labels.get("mig_profile") and sample.values.get(m.GPU_UP, 1.0) != 0


def batch_dict(samples: Iterable[Sample]) -> dict[str, list[dict[str, object]]]:
    """``{"gpus": [...], "samples": [...]}`` for the :func:`shippable` samples (the batch without its node)."""
    readings = [s for s in samples if shippable(s)]
    inventory = {s.labels["uuid"]: gpu_info_dict(s) for s in readings}
    return {"gpus": list(inventory.values()), "samples": [reading_dict(s) for s in readings]}


def merge_batches(batches: Iterable[dict[str, list[dict[str, object]]]]) -> dict[str, list[dict[str, object]]]:
    """Several :func:`batch_dict` results as one: inventories merged by UUID (the last wins), readings in order."""
    inventory: dict[object, dict[str, object]] = {}
    readings: list[dict[str, object]] = []
    for batch in batches:
        inventory.update((gpu["uuid"], gpu) for gpu in batch["gpus"])
        readings.extend(batch["samples"])
    return {"gpus": list(inventory.values()), "samples": readings}
