"""GPU readings through NVML (nvidia-ml-py's ``pynvml``): one :class:`Sample` per GPU per cycle.

Every value is converted to base units here; the NVML calls, their units and the conversions are listed on
:class:`NvmlSource`. Units are those of the NVML API reference (https://docs.nvidia.com/deploy/nvml-api/,
"Device Queries").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from collector import metric_names as m
from collector.sample import Sample, utc_now

log = logging.getLogger(__name__)

FATAL_GPU_ERRORS = ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_UNKNOWN", "NVML_ERROR_TIMEOUT")
"""NVML errors that end the reading of one GPU for this cycle (the other GPUs are still read)."""

NO_DRIVER_ERRORS = ("NVML_ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_DRIVER_NOT_LOADED")
"""``nvmlInit`` errors meaning this host has no NVIDIA driver: no GPU readings, not a failure."""


def _utilization(nvml: Any, handle: Any) -> dict[str, float]:
    """nvmlDeviceGetUtilizationRates: ``.gpu`` and ``.memory`` in percent of the sample period -> ratio (/100)."""
    rates = nvml.nvmlDeviceGetUtilizationRates(handle)
    return {m.GPU_UTILIZATION: rates.gpu / 100, m.GPU_MEMORY_UTILIZATION: rates.memory / 100}


def _memory(nvml: Any, handle: Any) -> dict[str, float]:
    """nvmlDeviceGetMemoryInfo, version ``nvmlMemory_v2``: ``.total`` and ``.used`` in bytes.

    The v2 ``used`` excludes the memory reserved by driver and firmware, as nvidia-smi's ``memory.used`` does.
    A driver without the v2 call (NVML_ERROR_FUNCTION_NOT_FOUND) gets the v1 call, whose ``used`` includes it.
    """
    try:
        info = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
    except nvml.NVMLError as exc:
        if exc.value != nvml.NVML_ERROR_FUNCTION_NOT_FOUND:
            raise
        info = nvml.nvmlDeviceGetMemoryInfo(handle)
    return {m.GPU_MEMORY_USED: float(info.used), m.GPU_MEMORY_TOTAL: float(info.total)}


def _power(nvml: Any, handle: Any) -> dict[str, float]:
    """nvmlDeviceGetPowerUsage: board power in milliwatts (1 s average on Ampere and newer) -> watts (/1000)."""
    return {m.GPU_POWER: nvml.nvmlDeviceGetPowerUsage(handle) / 1000}


def _energy(nvml: Any, handle: Any) -> dict[str, float]:
    """nvmlDeviceGetTotalEnergyConsumption: millijoules since the driver was last reloaded -> joules (/1000)."""
    return {m.GPU_ENERGY: nvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000}


def _temperature(nvml: Any, handle: Any) -> dict[str, float]:
    """nvmlDeviceGetTemperature with sensor NVML_TEMPERATURE_GPU: GPU core temperature, degrees Celsius."""
    return {m.GPU_TEMPERATURE: float(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))}


def _sm_clock(nvml: Any, handle: Any) -> dict[str, float]:
    """nvmlDeviceGetClockInfo with clock type NVML_CLOCK_SM: current SM clock in MHz -> hertz (x 10^6)."""
    return {m.GPU_SM_CLOCK: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM) * 1e6}


def _clocks_event_reasons(nvml: Any, handle: Any) -> dict[str, float]:
    """nvmlDeviceGetCurrentClocksEventReasons: bitmask of ``nvmlClocksEventReason*`` bits, as a float.

    Drivers before R535 lack that call (NVML_ERROR_FUNCTION_NOT_FOUND); they answer its former name,
    nvmlDeviceGetCurrentClocksThrottleReasons, which returns the same bits.
    """
    try:
        reasons = nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
    except nvml.NVMLError as exc:
        if exc.value != nvml.NVML_ERROR_FUNCTION_NOT_FOUND:
            raise
        reasons = nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
    return {m.GPU_CLOCKS_EVENT_REASONS: float(reasons)}


READERS: tuple[Callable[[Any, Any], dict[str, float]], ...] = (
    _utilization,
    _memory,
    _power,
    _energy,
    _temperature,
    _sm_clock,
    _clocks_event_reasons,
)


class NvmlSource:
    """Reads every GPU NVML sees: one ``entity="gpu"`` :class:`Sample` per GPU per ``collect``.

    Labels: ``gpu`` (NVML index, nvmlDeviceGetHandleByIndex), ``uuid`` (nvmlDeviceGetUUID), ``model``
    (nvmlDeviceGetName). Values, with the NVML call and unit conversion (NVML API reference):

    - utilization ratios: nvmlDeviceGetUtilizationRates ``.gpu`` / ``.memory``, percent / 100;
    - memory used and total: nvmlDeviceGetMemoryInfo (v2 struct), bytes, unconverted;
    - power: nvmlDeviceGetPowerUsage returns milliwatts, / 1000 -> watts;
    - energy counter: nvmlDeviceGetTotalEnergyConsumption returns millijoules since driver load, / 1000 -> joules;
    - temperature: nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU), degrees Celsius, unconverted;
    - SM clock: nvmlDeviceGetClockInfo(NVML_CLOCK_SM) returns MHz, x 10^6 -> hertz;
    - clocks-event reasons: nvmlDeviceGetCurrentClocksEventReasons (before R535:
      nvmlDeviceGetCurrentClocksThrottleReasons), bitmask as a float.

    Errors: a call answering NVML_ERROR_NOT_SUPPORTED leaves its keys out (never 0); any other error of one
    call leaves its keys out with a warning. NVML_ERROR_GPU_IS_LOST, _UNKNOWN or _TIMEOUT, or any error
    reading a GPU's handle, UUID or name, skips that GPU for the cycle with a warning; the other GPUs are
    still read. If ``nvmlInit`` finds no NVIDIA library or driver, ``collect`` returns ``[]``, logs one
    warning (repeats are DEBUG) and tries ``nvmlInit`` again on the next ``collect``; other ``nvmlInit``
    errors are raised. NVML is initialised once and kept initialised.

    Args:
        nvml: the ``pynvml`` module, or a stand-in with the same names (tests); default: ``import pynvml``.
        clock: the time of a reading, timezone-aware UTC; one timestamp per ``collect`` for all GPUs.
    """

    name = "nvml"

    def __init__(self, nvml: Any = None, clock: Callable[[], datetime] = utc_now) -> None:
        if nvml is None:
            import pynvml

            nvml = pynvml
        self._nvml = nvml
        self._clock = clock
        self._fatal_gpu_errors = {getattr(nvml, name) for name in FATAL_GPU_ERRORS}
        self._no_driver_errors = {getattr(nvml, name) for name in NO_DRIVER_ERRORS}
        self._initialised = False
        self._no_driver_logged = False

    def collect(self) -> list[Sample]:
        """One sample per readable GPU; ``[]`` when this host has no NVIDIA driver (see the class docstring)."""
        if not self._initialised and not self._initialise():
            return []
        timestamp = self._clock()
        samples = (self._read_gpu(index, timestamp) for index in range(self._nvml.nvmlDeviceGetCount()))
        return [sample for sample in samples if sample is not None]

    def _initialise(self) -> bool:
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            if exc.value not in self._no_driver_errors:
                raise
            level = logging.DEBUG if self._no_driver_logged else logging.WARNING
            log.log(level, "NVML unavailable (%s): no NVIDIA driver, so no GPU readings; retrying every cycle", exc)
            self._no_driver_logged = True
            return False
        self._initialised = True
        return True

    def _read_gpu(self, index: int, timestamp: datetime) -> Sample | None:
        nvml = self._nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid, model = nvml.nvmlDeviceGetUUID(handle), nvml.nvmlDeviceGetName(handle)
            labels = {"gpu": str(index), "uuid": uuid, "model": model}
            values: dict[str, float] = {}
            for read in READERS:
                values.update(self._read_field(read, handle, index))
        except nvml.NVMLError as exc:
            log.warning("NVML GPU %d skipped this cycle: %s (NVML error %d)", index, exc, exc.value)
            return None
        return Sample(entity="gpu", labels=labels, values=values, timestamp=timestamp)

    def _read_field(self, read: Callable[[Any, Any], dict[str, float]], handle: Any, index: int) -> dict[str, float]:
        """``read``'s values; ``{}`` if NVML cannot give them; raises the errors that end the GPU's reading."""
        nvml = self._nvml
        try:
            return read(nvml, handle)
        except nvml.NVMLError as exc:
            if exc.value in self._fatal_gpu_errors:
                raise
            if exc.value != nvml.NVML_ERROR_NOT_SUPPORTED:
                field = read.__name__.removeprefix("_")
                log.warning("NVML GPU %d: %s left out: %s (NVML error %d)", index, field, exc, exc.value)
            return {}
