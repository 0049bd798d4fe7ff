"""NVML GPM (GPU Performance Monitoring): hardware activity of Hopper and newer GPUs, the mean over each cycle.

The calls (NVML API reference, "GPM Functions", all HOPPER_OR_NEWER; nvidia-ml-py's ``pynvml`` binds them):

- nvmlGpmQueryDeviceSupport(device) -> ``nvmlGpmSupport_t`` {``version`` = NVML_GPM_SUPPORT_VERSION,
  ``isSupportedDevice``}: 0 on an older architecture.
- nvmlGpmSampleAlloc() -> an opaque ``nvmlGpmSample_t``; nvmlGpmSampleFree(sample) releases it.
- nvmlGpmSampleGet(device, sample) reads a whole GPU's counters into ``sample``; nvmlGpmMigSampleGet(device,
  gpuInstanceId, sample) those of one MIG GPU instance.
- nvmlGpmMetricsGet(``nvmlGpmMetricsGet_t``) computes metrics between two samples: in ``version`` =
  NVML_GPM_METRICS_GET_VERSION, ``numMetrics``, ``sample1`` (the older), ``sample2`` and each
  ``metrics[i].metricId`` (``NVML_GPM_METRIC_*``); out each ``metrics[i].nvmlReturn`` and ``.value``.

Every cycle reads one new sample per GPU (and per MIG GPU instance) and computes :data:`METRICS` between it and the
previous cycle's, so a value is the mean over exactly the time between two collections. The first cycle has none
(absent, never 0), nor has the first after a failed sample or after NVML is re-initialised. Two samples per GPU are
allocated once and reused alternately; :meth:`Gpm.close` frees them all.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from collector.contract import metric_names as m

log = logging.getLogger(__name__)

MIB = 2**20

METRICS: tuple[tuple[str, str, float], ...] = (
    ("NVML_GPM_METRIC_SM_UTIL", m.GPU_SM_ACTIVE, 0.01),  # % of SMs busy, mean over the interval
    ("NVML_GPM_METRIC_SM_OCCUPANCY", m.GPU_SM_OCCUPANCY, 0.01),  # % of the theoretical maximum warps
    ("NVML_GPM_METRIC_ANY_TENSOR_UTIL", m.GPU_TENSOR_ACTIVE, 0.01),
    ("NVML_GPM_METRIC_HMMA_TENSOR_UTIL", m.GPU_TENSOR_HMMA_ACTIVE, 0.01),
    ("NVML_GPM_METRIC_IMMA_TENSOR_UTIL", m.GPU_TENSOR_IMMA_ACTIVE, 0.01),
    ("NVML_GPM_METRIC_DFMA_TENSOR_UTIL", m.GPU_TENSOR_DFMA_ACTIVE, 0.01),
    ("NVML_GPM_METRIC_DRAM_BW_UTIL", m.GPU_DRAM_ACTIVE, 0.01),  # % of the theoretical DRAM bandwidth
    ("NVML_GPM_METRIC_FP64_UTIL", m.GPU_FP64_ACTIVE, 0.01),
    ("NVML_GPM_METRIC_FP32_UTIL", m.GPU_FP32_ACTIVE, 0.01),
    ("NVML_GPM_METRIC_FP16_UTIL", m.GPU_FP16_ACTIVE, 0.01),
    ("NVML_GPM_METRIC_GRAPHICS_UTIL", m.GPU_GRAPHICS_ENGINE_ACTIVE, 0.01),
    ("NVML_GPM_METRIC_PCIE_TX_PER_SEC", m.GPU_PCIE_TX, MIB),  # MiB/s -> bytes/s
    ("NVML_GPM_METRIC_PCIE_RX_PER_SEC", m.GPU_PCIE_RX, MIB),
    ("NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", m.GPU_NVLINK_TX_RATE, MIB),
    ("NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", m.GPU_NVLINK_RX_RATE, MIB),
)
"""(NVML GPM metric id name, our metric, scale): NVML gives the activities in percent (0.0 - 100.0) and the
rates in MiB/s (``pynvml`` comments on ``NVML_GPM_METRIC_*``)."""

RATIOS = frozenset(metric for _, metric, scale in METRICS if scale == 0.01)
"""The metrics that are ratios 0..1; a value outside that range is left out, with a warning."""


@dataclass(slots=True)
class _Samples:
    """The two NVML samples of one GPU or GPU instance; ``previous`` holds the last cycle's counters if ``filled``."""

    previous: Any
    current: Any
    filled: bool = False


class Gpm:
    """NVML GPM for the GPUs of one :class:`collector.sources.nvml.NvmlSource`.

    Args:
        nvml: the ``pynvml`` module (or the tests' stand-in).
        fatal_errors: NVML error codes that end a GPU's reading (re-raised; the source marks the GPU down).

    Support is asked once per GPU (index and UUID). A GPU without GPM gets no GPM values; :meth:`log_unsupported`
    names it once, with the reason: an architecture older than Hopper (``isSupportedDevice`` 0), a driver without GPM
    (NVMLError_FunctionNotFound), or the NVML error the query answered (NVMLError_NotSupported, ...). Other
    errors of a sample or of the metrics call leave that cycle's values out (NVML_ERROR_NOT_SUPPORTED quietly, any
    other with a warning) and start the GPU afresh; fatal errors are raised.
    """

    def __init__(self, nvml: Any, fatal_errors: set[int]) -> None:
        self._nvml = nvml
        self._fatal = fatal_errors
        self._metrics = [(int(getattr(nvml, name)), metric, scale) for name, metric, scale in METRICS]
        self._unsupported: dict[tuple[str, str], str | None] = {}  # (index, UUID) -> why no GPM; None: it has
        self._names: dict[tuple[str, str], str] = {}
        self._reported: set[tuple[str, str]] = set()
        self._samples: dict[tuple[str, str, int | None], _Samples] = {}

    def gpu(self, handle: Any, gpu: dict[str, str]) -> dict[str, float]:
        """A whole GPU's means since the previous cycle (``gpu``: its labels), metric -> base units; ``{}`` when
        there is no previous sample or no GPM."""
        if not self._supported(handle, gpu):
            return {}
        return self._read(
            (gpu["gpu"], gpu["uuid"], None), gpu, lambda sample: self._nvml.nvmlGpmSampleGet(handle, sample)
        )

    def gpu_instance(self, handle: Any, gpu: dict[str, str], instance: int) -> dict[str, float]:
        """The means of MIG GPU instance ``instance`` of the GPU ``handle`` (``gpu``: the parent's labels), as
        :meth:`gpu`; every compute instance of the GPU instance shares them."""
        if not self._supported(handle, gpu):
            return {}
        nvml = self._nvml
        return self._read(
            (gpu["gpu"], gpu["uuid"], instance), gpu, lambda sample: nvml.nvmlGpmMigSampleGet(handle, instance, sample)
        )

    def log_unsupported(self) -> None:
        """One INFO line naming each GPU without GPM not named before, and why (at start: all of them)."""
        new = [gpu for gpu, why in self._unsupported.items() if why is not None and gpu not in self._reported]
        if new:
            reasons = "; ".join(f"{self._names[gpu]}: {self._unsupported[gpu]}" for gpu in new)
            log.info("NVML GPM unavailable, so no hardware-activity series from NVML, on %s", reasons)
            self._reported.update(new)

    def close(self) -> None:
        """Free every sample (nvmlGpmSampleFree; its failure is only logged); the next read starts afresh."""
        for pair in self._samples.values():
            for sample in (pair.previous, pair.current):
                try:
                    self._nvml.nvmlGpmSampleFree(sample)
                except self._nvml.NVMLError as exc:
                    log.debug("nvmlGpmSampleFree: %s", exc)
        self._samples.clear()

    def _supported(self, handle: Any, gpu: dict[str, str]) -> bool:
        key = (gpu["gpu"], gpu["uuid"])
        if key not in self._unsupported:
            self._unsupported[key] = self._why_unsupported(handle)
            self._names[key] = f"GPU {gpu['gpu']} ({gpu['model']})"
        return self._unsupported[key] is None

    def _why_unsupported(self, handle: Any) -> str | None:
        nvml = self._nvml
        try:
            support = nvml.nvmlGpmQueryDeviceSupport(handle)
        except nvml.NVMLError as exc:
            if exc.value in self._fatal:
                raise
            if exc.value == nvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                return f"the driver has no GPM ({type(exc).__name__})"
            return f"{type(exc).__name__} ({exc})"
        if not support.isSupportedDevice:
            return "unsupported architecture (GPM needs Hopper or newer)"
        return None

    def _read(
        self, key: tuple[str, str, int | None], gpu: dict[str, str], sample_get: Callable[[Any], Any]
    ) -> dict[str, float]:
        nvml = self._nvml
        pair = self._samples.get(key)
        try:
            if pair is None:
                pair = self._samples[key] = self._allocate()
            sample_get(pair.current)
            values = self._means(pair.previous, pair.current) if pair.filled else {}
        except nvml.NVMLError as exc:
            if exc.value in self._fatal:
                raise
            if exc.value != nvml.NVML_ERROR_NOT_SUPPORTED:
                where = f"GPU {gpu['gpu']}" + ("" if key[2] is None else f" GPU instance {key[2]}")
                log.warning("NVML %s: GPM values left out: %s (%s)", where, exc, type(exc).__name__)
            if pair is not None:
                pair.filled = False
            return {}
        pair.previous, pair.current, pair.filled = pair.current, pair.previous, True
        return values

    def _allocate(self) -> _Samples:
        nvml = self._nvml
        first = nvml.nvmlGpmSampleAlloc()
        try:
            return _Samples(first, nvml.nvmlGpmSampleAlloc())
        except nvml.NVMLError:
            nvml.nvmlGpmSampleFree(first)
            raise

    def _means(self, older: Any, newer: Any) -> dict[str, float]:
        """nvmlGpmMetricsGet between two samples: every metric whose own ``nvmlReturn`` is NVML_SUCCESS, scaled."""
        nvml = self._nvml
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(self._metrics)
        request.sample1, request.sample2 = older, newer
        for slot, (metric_id, _, _) in zip(request.metrics, self._metrics, strict=False):
            slot.metricId = metric_id
        nvml.nvmlGpmMetricsGet(request)
        values: dict[str, float] = {}
        for slot, (_, metric, scale) in zip(request.metrics, self._metrics, strict=False):
            value = slot.value * scale
            if slot.nvmlReturn != nvml.NVML_SUCCESS or not math.isfinite(value):
                continue
            if metric in RATIOS and not 0 <= value <= 1:
                log.warning("NVML GPM %s: %s %% is out of range; left out", metric, slot.value)
                continue
            values[metric] = value
        return values
