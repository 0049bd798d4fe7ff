"""The DCGM field table and label rules that the collector's dcgm source and the service's Prometheus pull share.

dcgm-exporter (NVIDIA/dcgm-exporter) names each series after its DCGM field (``DCGM_FI_DEV_POWER_USAGE``) in the
field's own unit, as its counters CSV documents (``default-counters.csv``: W, MHz, °C, MiB, %, mJ, µs). The
declarative :data:`FIELDS` table maps each field we use to our metric and scale; :data:`IGNORED` lists the
fields dcgm-exporter may expose that we deliberately do not map.

Hardware activity (profiling fields, ``DCGM_FI_PROF_*``; NVIDIA/DCGM ``dcgmlib/dcgm_fields.h``): DCGM 4.6 renamed
the ratio fields 1001-1016 ``*_UTIL_RATIO`` (``DCGM_FI_PROF_SM_ACTIVE`` is now ``DCGM_FI_PROF_SM_UTIL_RATIO``) and
keeps the old names as aliases; both names are in :data:`FIELDS`. DCGM 4.6 also added raw monotonic cycle counters
(field ids 1084-1096, ``DCGM_FI_PROF_*_CYCLES_*_TOTAL``): :data:`CYCLE_COUNTERS` maps each active-cycles counter to
its activity metric, whose mean between two scrapes is Δ active cycles / Δ :data:`SM_CYCLES_ELAPSED`
(:func:`cycle_means`; the collector's :mod:`collector.sources.dcgm_cycles`, the service's Prometheus pull and TSDB
metering).

GPU identity from dcgm-exporter's labels: ``gpu`` (index), ``UUID``, ``modelName``; for a MIG instance also
``GPU_I_PROFILE`` and ``GPU_I_ID`` (:func:`gpu_labels`). Job mapping: ``hpc_job``, else Kubernetes
``namespace``/``pod`` (:func:`job_of`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from collector.contract import metric_names as m

log = logging.getLogger(__name__)

MIB = 2**20


@dataclass(frozen=True, slots=True)
class Field:
    """One DCGM field: our metric and the factor from the field's unit to our base unit."""

    metric: str
    scale: float


FIELDS: dict[str, Field] = {
    "DCGM_FI_DEV_GPU_UTIL": Field(m.GPU_UTILIZATION, 0.01),  # %
    "DCGM_FI_DEV_MEM_COPY_UTIL": Field(m.GPU_MEMORY_UTILIZATION, 0.01),  # %
    "DCGM_FI_DEV_FB_USED": Field(m.GPU_MEMORY_USED, MIB),  # MiB
    "DCGM_FI_DEV_FB_TOTAL": Field(m.GPU_MEMORY_TOTAL, MIB),  # MiB
    "DCGM_FI_DEV_POWER_USAGE": Field(m.GPU_POWER, 1.0),  # W
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": Field(m.GPU_ENERGY, 1e-3),  # mJ
    "DCGM_FI_DEV_GPU_TEMP": Field(m.GPU_TEMPERATURE, 1.0),  # °C
    "DCGM_FI_DEV_SM_CLOCK": Field(m.GPU_SM_CLOCK, 1e6),  # MHz
    "DCGM_FI_DEV_MEM_CLOCK": Field(m.GPU_MEMORY_CLOCK, 1e6),  # MHz
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": Field(m.GPU_CLOCKS_EVENT_REASONS, 1.0),  # bitmask (name before DCGM 3.3)
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": Field(m.GPU_CLOCKS_EVENT_REASONS, 1.0),  # bitmask
    "DCGM_FI_DEV_POWER_VIOLATION": Field(m.GPU_POWER_VIOLATION, 1e-6),  # µs
    "DCGM_FI_DEV_THERMAL_VIOLATION": Field(m.GPU_THERMAL_VIOLATION, 1e-6),  # µs
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": Field(m.GPU_ECC_CORRECTED, 1.0),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": Field(m.GPU_ECC_UNCORRECTED, 1.0),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": Field(m.GPU_REMAPPED_CORRECTABLE, 1.0),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": Field(m.GPU_REMAPPED_UNCORRECTABLE, 1.0),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": Field(m.GPU_REMAPPED_PENDING, 1.0),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": Field(m.GPU_REMAPPED_FAILURE, 1.0),
    "DCGM_FI_PROF_PCIE_RX_BYTES": Field(m.GPU_PCIE_RX, 1.0),  # bytes/s
    "DCGM_FI_PROF_PCIE_TX_BYTES": Field(m.GPU_PCIE_TX, 1.0),  # bytes/s
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": Field(m.GPU_GRAPHICS_ENGINE_ACTIVE, 1.0),  # ratio
    "DCGM_FI_PROF_SM_ACTIVE": Field(m.GPU_SM_ACTIVE, 1.0),  # ratio
    "DCGM_FI_PROF_SM_OCCUPANCY": Field(m.GPU_SM_OCCUPANCY, 1.0),  # ratio
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": Field(m.GPU_TENSOR_ACTIVE, 1.0),  # ratio
    "DCGM_FI_PROF_DRAM_ACTIVE": Field(m.GPU_DRAM_ACTIVE, 1.0),  # ratio
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": Field(m.GPU_FP64_ACTIVE, 1.0),  # ratio
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": Field(m.GPU_FP32_ACTIVE, 1.0),  # ratio
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": Field(m.GPU_FP16_ACTIVE, 1.0),  # ratio
    "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE": Field(m.GPU_TENSOR_HMMA_ACTIVE, 1.0),  # ratio
    "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE": Field(m.GPU_TENSOR_IMMA_ACTIVE, 1.0),  # ratio
    "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE": Field(m.GPU_TENSOR_DFMA_ACTIVE, 1.0),  # ratio
    "DCGM_FI_PROF_NVLINK_RX_BYTES": Field(m.GPU_NVLINK_RX_RATE, 1.0),  # bytes/s
    "DCGM_FI_PROF_NVLINK_TX_BYTES": Field(m.GPU_NVLINK_TX_RATE, 1.0),  # bytes/s
    # DCGM 4.6 names of the same fields (1001-1008, 1013-1015)
    "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO": Field(m.GPU_GRAPHICS_ENGINE_ACTIVE, 1.0),
    "DCGM_FI_PROF_SM_UTIL_RATIO": Field(m.GPU_SM_ACTIVE, 1.0),
    "DCGM_FI_PROF_SM_OCCUPANCY_RATIO": Field(m.GPU_SM_OCCUPANCY, 1.0),
    "DCGM_FI_PROF_TENSOR_UTIL_RATIO": Field(m.GPU_TENSOR_ACTIVE, 1.0),
    "DCGM_FI_PROF_DRAM_UTIL_RATIO": Field(m.GPU_DRAM_ACTIVE, 1.0),
    "DCGM_FI_PROF_FP64_UTIL_RATIO": Field(m.GPU_FP64_ACTIVE, 1.0),
    "DCGM_FI_PROF_FP32_UTIL_RATIO": Field(m.GPU_FP32_ACTIVE, 1.0),
    "DCGM_FI_PROF_FP16_UTIL_RATIO": Field(m.GPU_FP16_ACTIVE, 1.0),
    "DCGM_FI_PROF_HMMA_UTIL_RATIO": Field(m.GPU_TENSOR_HMMA_ACTIVE, 1.0),
    "DCGM_FI_PROF_IMMA_UTIL_RATIO": Field(m.GPU_TENSOR_IMMA_ACTIVE, 1.0),
    "DCGM_FI_PROF_DFMA_UTIL_RATIO": Field(m.GPU_TENSOR_DFMA_ACTIVE, 1.0),
}
"""DCGM field -> our metric and scale (field units: dcgm-exporter's counters CSV and the DCGM field reference)."""

IGNORED = frozenset(
    {
        "DCGM_FI_DEV_MEMORY_TEMP",  # HBM temperature: not a metric of ours
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_ENC_UTIL",
        "DCGM_FI_DEV_DEC_UTIL",
        "DCGM_FI_DEV_XID_ERRORS",  # the last XID code, not a count
        "DCGM_FI_DEV_FB_FREE",  # used only to derive the total when FB_TOTAL is absent
        "DCGM_FI_DEV_FB_RESERVED",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",  # per-lane counter sum without a stated unit
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
        "DCGM_FI_DRIVER_VERSION",  # a label, not a value
        # DCGM 4.6 cumulative counters without a metric of ours
        "DCGM_FI_PROF_DMMA_CYCLES_ACTIVE_TOTAL",  # FP64 matrix; DFMA is the FP64 tensor pipe we expose
        "DCGM_FI_PROF_INT_CYCLES_ACTIVE_TOTAL",  # integer pipe
        "DCGM_FI_PROF_PCIE_TX_BYTES_TOTAL",  # DCGM_FI_PROF_PCIE_TX_BYTES gives the rate
        "DCGM_FI_PROF_PCIE_RX_BYTES_TOTAL",  # DCGM_FI_PROF_PCIE_RX_BYTES gives the rate
    }
)
"""Fields dcgm-exporter may expose (its default counters, and DCGM 4.6 counters) that we do not map, on purpose.
None of them is in :data:`FIELDS`, :data:`CYCLE_COUNTERS` or :data:`SM_CYCLES_ELAPSED`."""

SM_CYCLES_ELAPSED = "DCGM_FI_PROF_SM_CYCLES_ELAPSED_TOTAL"
"""Field 1084, SM cycles elapsed (a raw monotonic counter, DCGM 4.6): the denominator of every cycle mean."""

CYCLE_COUNTERS: dict[str, str] = {
    "DCGM_FI_PROF_SM_CYCLES_ACTIVE_TOTAL": m.GPU_SM_ACTIVE,  # 1085, SM cycles with at least one warp
    "DCGM_FI_PROF_MMA_CYCLES_ACTIVE_TOTAL": m.GPU_TENSOR_ACTIVE,  # 1086, any tensor (MMA) pipe
    "DCGM_FI_PROF_HMMA_CYCLES_ACTIVE_TOTAL": m.GPU_TENSOR_HMMA_ACTIVE,  # 1088
    "DCGM_FI_PROF_IMMA_CYCLES_ACTIVE_TOTAL": m.GPU_TENSOR_IMMA_ACTIVE,  # 1089
    "DCGM_FI_PROF_DFMA_CYCLES_ACTIVE_TOTAL": m.GPU_TENSOR_DFMA_ACTIVE,  # 1090
    "DCGM_FI_PROF_FP64_CYCLES_ACTIVE_TOTAL": m.GPU_FP64_ACTIVE,  # 1094
    "DCGM_FI_PROF_FP32_CYCLES_ACTIVE_TOTAL": m.GPU_FP32_ACTIVE,  # 1095
    "DCGM_FI_PROF_FP16_CYCLES_ACTIVE_TOTAL": m.GPU_FP16_ACTIVE,  # 1096
}
"""DCGM 4.6 active-cycles counter -> the activity metric it gives as Δ counter / Δ :data:`SM_CYCLES_ELAPSED`
between two scrapes (the exact mean over that interval; it wins over the same scrape's ratio field, which DCGM
averages over its own sampling window). DRAM, SM occupancy and the graphics engine have no cycle counter."""


def cycle_means(previous: Mapping[str, float], current: Mapping[str, float], where: object) -> dict[str, float]:
    """The activity means (metric -> ratio 0..1) between two readings of one GPU's cycle counters (field name ->
    value; :data:`SM_CYCLES_ELAPSED` and any of :data:`CYCLE_COUNTERS`), ``previous`` the older.

    A metric has a mean, Δ active / Δ elapsed, when its counter and the elapsed counter are in both readings and
    both grew or held (Δ elapsed > 0, Δ active >= 0). No mean, never 0: when the elapsed counter did not grow or a
    counter went down (a reset: GPU reset, driver reload, DCGM restart), and for a mean above 1 (counters that
    disagree; logged as a warning naming ``where``, the GPU)."""
    if SM_CYCLES_ELAPSED not in previous or SM_CYCLES_ELAPSED not in current:
        return {}
    elapsed = current[SM_CYCLES_ELAPSED] - previous[SM_CYCLES_ELAPSED]
    if elapsed <= 0:
        return {}
    means: dict[str, float] = {}
    for field, metric in CYCLE_COUNTERS.items():
        if field not in previous or field not in current:
            continue
        active = current[field] - previous[field]
        if active < 0:
            continue
        if active > elapsed:
            log.warning("%s: %s grew %.0f cycles, more than the %.0f elapsed; no mean", where, field, active, elapsed)
            continue
        means[metric] = active / elapsed
    return means


def fill_memory_total(values: dict[str, float], free_mib: float | None) -> None:
    """Without DCGM_FI_DEV_FB_TOTAL, the installed memory is FB_USED + FB_FREE (``free_mib`` in MiB): set it in
    ``values`` (our metrics, base units) when it is absent and both parts are known."""
    if free_mib is not None and m.GPU_MEMORY_TOTAL not in values and m.GPU_MEMORY_USED in values:
        values[m.GPU_MEMORY_TOTAL] = values[m.GPU_MEMORY_USED] + free_mib * MIB


def gpu_labels(labels: dict[str, str]) -> dict[str, str]:
    """Our GPU labels (``gpu``, ``uuid``, ``model``, ``mig_profile``, ``parent_uuid``) from a series' dcgm-exporter
    labels, which must hold ``gpu`` and ``UUID``; a MIG instance's ``uuid`` is ``<parent UUID>/<GPU_I_ID>``."""
    profile = labels.get("GPU_I_PROFILE", "")
    instance = labels.get("GPU_I_ID", "")
    mig = bool(profile or instance)
    return {
        "gpu": labels["gpu"],
        "uuid": f"{labels['UUID']}/{instance}" if mig else labels["UUID"],
        "model": labels.get("modelName", ""),
        "mig_profile": profile,
        "parent_uuid": labels["UUID"] if mig else "",
    }


def job_of(labels: dict[str, str]) -> str | None:
    """The job of a series: its ``hpc_job`` label if non-empty, else ``<namespace>/<pod>``, else None."""
    if labels.get("hpc_job"):
        return labels["hpc_job"]
    if labels.get("pod") and labels.get("namespace"):
        return f"{labels['namespace']}/{labels['pod']}"
    return None
