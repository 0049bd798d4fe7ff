"""NVML GPM for the fake ``pynvml`` (:class:`tests.support.fake_pynvml.FakeNvml`), following nvidia-ml-py's API.

nvmlGpmQueryDeviceSupport answers a ``c_nvmlGpmSupport_t``, nvmlGpmSampleAlloc a ``c_nvmlGpmSample_t`` pointer (to
a buffer the fake keeps), nvmlGpmMetricsGet fills the caller's ``c_nvmlGpmMetricsGet_t``: the real ctypes structures
of ``pynvml``, metric ids ``NVML_GPM_METRIC_*``. A metric the fake has no value for answers its own ``nvmlReturn``
NVML_ERROR_NOT_SUPPORTED; a structure of another version NVML_ERROR_ARGUMENT_VERSION_MISMATCH; an unknown or unfilled
sample NVML_ERROR_INVALID_ARGUMENT. A GPU is Hopper or newer when its name says H100, H200, GH200, B200 and the like
(:data:`HOPPER_OR_NEWER`); any other (an A100) answers ``isSupportedDevice`` 0 and NVMLError_NotSupported to a
sample.

WRITTEN BY HAND: no public capture of NVML GPM output exists, so the values are the tests' own. ``gpm`` holds, per
GPU index, or (GPU index, GPU instance id) for a MIG GPU instance, a list of :class:`GpmPhase`: each metric's value
(percent, MiB/s) from the phase's ``start`` (seconds since the fake was built) until the next phase.
nvmlGpmMetricsGet answers the time-weighted mean of those values between the two samples' times on the fake's
clock. ``gpm`` None: the fake's driver has no GPM; every nvmlGpm* function raises NVMLError_FunctionNotFound.
Errors injected into the fake (``gpu_errors``, ``call_errors``) apply to the per-GPU GPM functions too.
"""

from __future__ import annotations

import ctypes
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pynvml

if TYPE_CHECKING:
    from tests.support.fake_pynvml import FakeHandle

HOPPER_OR_NEWER = re.compile(r"\bG?[HB]\d{3}\b")
"""GPU names of the Hopper and Blackwell data-center GPUs (H100, H200, GH200, B200, GB200)."""


@dataclass(frozen=True)
class GpmPhase:
    """WRITTEN BY HAND (module docstring): NVML GPM metric id -> value (NVML's unit: percent, MiB/s), holding from
    ``start`` seconds after the fake was built until the next phase."""

    start: float
    values: dict[int, float]


GpmTarget = int | tuple[int, int]
"""A GPU index, or (GPU index, GPU instance id) for a MIG GPU instance."""


def gpm_mean(phases: list[GpmPhase], metric_id: int, first: float, second: float) -> float | None:
    """The time-weighted mean of ``metric_id`` over [first, second] seconds (its value at ``first`` when they are
    equal); None when a phase lacks the metric."""
    if any(metric_id not in phase.values for phase in phases):
        return None
    ends = [phase.start for phase in phases[1:]] + [math.inf]
    if second <= first:
        return next(p.values[metric_id] for p, end in zip(phases, ends, strict=True) if p.start <= first < end)
    total = sum(
        max(0.0, min(end, second) - max(phase.start, first)) * phase.values[metric_id]
        for phase, end in zip(phases, ends, strict=True)
    )
    return total / (second - first)


class FakeGpm:
    """The GPM functions of :class:`tests.support.fake_pynvml.FakeNvml` (a mixin: it reads the fake's GPUs, MIG
    devices, clock and injected errors)."""

    gpus: list[dict[str, str]]
    mig: list[Any]
    clock: Callable[[], datetime]
    loaded_at: datetime
    gpm: dict[GpmTarget, list[GpmPhase]] | None
    gpm_samples: dict[int, tuple[ctypes.c_uint64, tuple[GpmTarget, float] | None]]
    """Allocated GPM samples: address -> (its buffer, (what it sampled, when) once filled)."""

    _check_initialised: Callable[[], None]
    _check_injected: Callable[[int, str], None]

    def nvmlGpmQueryDeviceSupport(self, handle: FakeHandle) -> pynvml.c_nvmlGpmSupport_t:
        self._check_gpm(handle.index, "nvmlGpmQueryDeviceSupport")
        hopper = HOPPER_OR_NEWER.search(self.gpus[handle.index]["name"]) is not None
        return pynvml.c_nvmlGpmSupport_t(version=pynvml.NVML_GPM_SUPPORT_VERSION, isSupportedDevice=int(hopper))

    def nvmlGpmSampleAlloc(self) -> object:
        self._check_gpm(None, "nvmlGpmSampleAlloc")
        buffer = ctypes.c_uint64()
        self.gpm_samples[ctypes.addressof(buffer)] = (buffer, None)
        return ctypes.cast(ctypes.pointer(buffer), pynvml.c_nvmlGpmSample_t)

    def nvmlGpmSampleFree(self, sample: object) -> None:
        self._check_gpm(None, "nvmlGpmSampleFree")
        self.gpm_samples.pop(self._gpm_address(sample))

    def nvmlGpmSampleGet(self, handle: FakeHandle, sample: object) -> object:
        return self._gpm_sample(handle, handle.index, sample, "nvmlGpmSampleGet")

    def nvmlGpmMigSampleGet(self, handle: FakeHandle, gpu_instance_id: int, sample: object) -> object:
        if not any(d.parent_index == handle.index and d.gpu_instance_id == gpu_instance_id for d in self.mig):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._gpm_sample(handle, (handle.index, gpu_instance_id), sample, "nvmlGpmMigSampleGet")

    def nvmlGpmMetricsGet(self, request: pynvml.c_nvmlGpmMetricsGet_t) -> pynvml.c_nvmlGpmMetricsGet_t:
        self._check_gpm(None, "nvmlGpmMetricsGet")
        if request.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        first, second = (self.gpm_samples[self._gpm_address(s)][1] for s in (request.sample1, request.sample2))
        if first is None or second is None or first[0] != second[0] or request.numMetrics > len(request.metrics):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        phases = (self.gpm or {}).get(first[0], [])
        for slot in request.metrics[: request.numMetrics]:
            value = gpm_mean(phases, slot.metricId, first[1], second[1]) if phases else None
            slot.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED if value is None else pynvml.NVML_SUCCESS
            slot.value = value or 0.0
        return request

    def _gpm_sample(self, handle: FakeHandle, target: GpmTarget, sample: object, function: str) -> object:
        self._check_gpm(handle.index, function)
        if not self.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        address = self._gpm_address(sample)
        self.gpm_samples[address] = (self.gpm_samples[address][0], (target, self._seconds_since_load()))
        return sample

    def _gpm_address(self, sample: object) -> int:
        address = ctypes.cast(sample, ctypes.c_void_p).value  # type: ignore[call-overload]
        if address not in self.gpm_samples:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(address)

    def _check_gpm(self, index: int | None, function: str) -> None:
        self._check_initialised()
        if self.gpm is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        if index is not None:
            self._check_injected(index, function)

    def _seconds_since_load(self) -> float:
        return (self.clock() - self.loaded_at).total_seconds()
