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

from collector.contract import metric_names as m
from collector.contract.sample import Sample, utc_now
from collector.sources.nvml_gpm import Gpm

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


def _memory_clock(nvml: Any, handle: Any) -> dict[str, float]:
    """nvmlDeviceGetClockInfo with clock type NVML_CLOCK_MEM: current memory clock in MHz -> hertz (x 10^6)."""
    return {m.GPU_MEMORY_CLOCK: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM) * 1e6}


def _violations(nvml: Any, handle: Any) -> dict[str, float]:
    """nvmlDeviceGetViolationStatus for NVML_PERF_POLICY_POWER and _THERMAL: ``.violationTime``, nanoseconds the
    clocks were held below the requested level, cumulative -> seconds (/ 10^9)."""
    power = nvml.nvmlDeviceGetViolationStatus(handle, nvml.NVML_PERF_POLICY_POWER)
    thermal = nvml.nvmlDeviceGetViolationStatus(handle, nvml.NVML_PERF_POLICY_THERMAL)
    return {m.GPU_POWER_VIOLATION: power.violationTime / 1e9, m.GPU_THERMAL_VIOLATION: thermal.violationTime / 1e9}


def _ecc(nvml: Any, handle: Any) -> dict[str, float]:
    """nvmlDeviceGetTotalEccErrors, NVML_VOLATILE_ECC (since the driver was loaded): corrected and uncorrected."""
    corrected = nvml.nvmlDeviceGetTotalEccErrors(handle, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_VOLATILE_ECC)
    uncorrected = nvml.nvmlDeviceGetTotalEccErrors(
        handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
    )
    return {m.GPU_ECC_CORRECTED: float(corrected), m.GPU_ECC_UNCORRECTED: float(uncorrected)}


def _pcie(nvml: Any, handle: Any) -> dict[str, float]:
    """nvmlDeviceGetPcieThroughput NVML_PCIE_UTIL_RX_BYTES / _TX_BYTES: KB/s over a 20 ms sample -> bytes/s (x 1024)."""
    received = nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_RX_BYTES)
    transmitted = nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_TX_BYTES)
    return {m.GPU_PCIE_RX: received * 1024.0, m.GPU_PCIE_TX: transmitted * 1024.0}


def _nvlink(nvml: Any, handle: Any) -> dict[str, float]:
    """nvmlDeviceGetFieldValues NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX/_TX: KiB over all links, cumulative ->
    bytes (x 1024). A field whose own ``nvmlReturn`` is not NVML_SUCCESS (no NVLink) is left out."""
    fields = {
        nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: m.GPU_NVLINK_RX,
        nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: m.GPU_NVLINK_TX,
    }
    values = nvml.nvmlDeviceGetFieldValues(handle, list(fields))
    return {fields[v.fieldId]: v.value.ullVal * 1024.0 for v in values if v.nvmlReturn == nvml.NVML_SUCCESS}


def _remapped_rows(nvml: Any, handle: Any) -> dict[str, float]:
    """nvmlDeviceGetRemappedRows: (correctable rows, uncorrectable rows, remap pending 0/1, remap failed 0/1)."""
    correctable, uncorrectable, pending, failure = nvml.nvmlDeviceGetRemappedRows(handle)
    return {
        m.GPU_REMAPPED_CORRECTABLE: float(correctable),
        m.GPU_REMAPPED_UNCORRECTABLE: float(uncorrectable),
        m.GPU_REMAPPED_PENDING: float(pending),
        m.GPU_REMAPPED_FAILURE: float(failure),
    }


READERS: tuple[Callable[[Any, Any], dict[str, float]], ...] = (
    _utilization,
    _memory,
    _power,
    _energy,
    _temperature,
    _sm_clock,
    _memory_clock,
    _clocks_event_reasons,
    _violations,
    _ecc,
    _pcie,
    _nvlink,
    _remapped_rows,
)
"""Every per-GPU reading; each one's NVML_ERROR_NOT_SUPPORTED leaves only its own series out."""

MIG_READERS: tuple[Callable[[Any, Any], dict[str, float]], ...] = (_utilization, _memory)
"""What a MIG device handle answers (device-wide series such as power belong to the parent GPU)."""


class NvmlSource:
    """Reads every GPU NVML sees: per GPU one ``entity="gpu"`` :class:`Sample`, one per MIG instance, and one
    ``entity="gpu_process"`` sample per running compute process.

    GPU labels: ``gpu`` (NVML index, nvmlDeviceGetHandleByIndex), ``uuid`` (nvmlDeviceGetUUID), ``model``
    (nvmlDeviceGetName), ``mig_profile`` and ``parent_uuid`` (empty for a whole GPU). Values, with the NVML call
    and unit conversion (NVML API reference), are listed on each reader in :data:`READERS`; every GPU that
    answered carries ``gpufinops_gpu_up`` = 1.

    Hardware activity (Hopper or newer): NVML GPM (:class:`collector.sources.nvml_gpm.Gpm`) gives SM activity
    and occupancy, tensor (any, HMMA, IMMA, DFMA), DRAM, FP64/FP32/FP16 and graphics-engine activity, PCIe and
    NVLink rates, each the mean since the previous cycle (absent in the first); the GPM PCIe rates replace
    nvmlDeviceGetPcieThroughput's 20 ms sample. GPUs without GPM are named once, at INFO, with the reason.

    MIG: when nvmlDeviceGetMigMode is enabled, each nvmlDeviceGetMigDeviceHandleByIndex device is a GPU sample
    with its own ``MIG-`` UUID, ``mig_profile`` from its name (``"NVIDIA H100 80GB HBM3 MIG 1g.10gb"`` ->
    ``1g.10gb``), ``parent_uuid``, the :data:`MIG_READERS` series and the GPM means of its GPU instance
    (nvmlGpmMigSampleGet with nvmlDeviceGetGpuInstanceId; compute instances of one GPU instance share them).

    Processes (nvmlDeviceGetComputeRunningProcesses): labels ``gpu``, ``uuid`` (the MIG instance's UUID when the
    process's ``gpuInstanceId`` names one, else the GPU's) and ``pid``; values the process's device memory in
    bytes, absent when NVML cannot tell (``usedGpuMemory`` None), and its SM utilisation as a ratio
    (``gpufinops_gpu_process_sm_utilization_ratio``, see :meth:`_process_sm_utilization`). The job mapper reads
    the PIDs.

    Errors: a call answering NVML_ERROR_NOT_SUPPORTED leaves its keys out (never 0); any other error of one call
    leaves its keys out with a warning. NVML_ERROR_GPU_IS_LOST, _UNKNOWN or _TIMEOUT, or an error reading a GPU's
    handle, UUID or name, turns that GPU's sample into ``gpufinops_gpu_up`` = 0 alone (labels as last seen at its
    index) with a warning; the other GPUs are still read, and the next ``collect`` re-initialises NVML
    (nvmlShutdown, nvmlInit) first. If ``nvmlInit`` finds no NVIDIA library or driver, ``collect`` returns ``[]``,
    logs one warning (repeats are DEBUG) and tries again on the next ``collect``; other ``nvmlInit`` errors are
    raised.

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
        self._reinitialise = False
        self._known: dict[int, dict[str, str]] = {}
        self._last_seen: dict[str, int] = {}
        self._gpm = Gpm(nvml, self._fatal_gpu_errors)

    def collect(self) -> list[Sample]:
        """Samples of every GPU, MIG instance and compute process; ``[]`` when this host has no NVIDIA driver."""
        if self._reinitialise:
            self._shutdown()
        if not self._initialised and not self._initialise():
            return []
        timestamp = self._clock()
        samples: list[Sample] = []
        for index in range(self._nvml.nvmlDeviceGetCount()):
            samples.extend(self._read_gpu(index, timestamp))
        self._gpm.log_unsupported()
        return samples

    def close(self) -> None:
        """Free the GPM samples and shut NVML down (when the collector stops)."""
        if self._initialised:
            self._shutdown()

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

    def _shutdown(self) -> None:
        """Before re-initialising after a lost GPU, and on :meth:`close`: free the GPM samples, then nvmlShutdown
        (its own failure is only logged)."""
        self._gpm.close()
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as exc:
            log.debug("nvmlShutdown: %s", exc)
        self._initialised = False
        self._reinitialise = False

    def _read_gpu(self, index: int, timestamp: datetime) -> list[Sample]:
        nvml = self._nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid, model = nvml.nvmlDeviceGetUUID(handle), nvml.nvmlDeviceGetName(handle)
            labels = {"gpu": str(index), "uuid": uuid, "model": model, "mig_profile": "", "parent_uuid": ""}
            self._known[index] = labels
            values: dict[str, float] = {m.GPU_UP: 1.0}
            for read in READERS:
                values.update(self._read_field(read, handle, index))
            values.update(self._gpm.gpu(handle, labels))
        except nvml.NVMLError as exc:
            log.warning("NVML GPU %d did not answer: %s (NVML error %d); gpu_up 0", index, exc, exc.value)
            if exc.value in self._fatal_gpu_errors:
                self._reinitialise = True
            known = self._known.get(index, {"uuid": "", "model": ""})
            labels = {**known, "gpu": str(index), "mig_profile": "", "parent_uuid": ""}
            return [Sample(entity="gpu", labels=labels, values={m.GPU_UP: 0.0}, timestamp=timestamp)]
        instances = self._mig_instances(handle, labels, timestamp)
        samples = [Sample(entity="gpu", labels=labels, values=values, timestamp=timestamp)]
        samples.extend(sample for sample, _ in instances)
        by_instance = {instance: sample.labels["uuid"] for sample, instance in instances if instance is not None}
        samples.extend(self._processes(handle, labels, by_instance, bool(instances), timestamp))
        return samples

    def _mig_instances(
        self, handle: Any, parent: dict[str, str], timestamp: datetime
    ) -> list[tuple[Sample, int | None]]:
        """Each MIG device of the GPU as (sample, GPU instance id or None)."""
        nvml = self._nvml
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
            if current != nvml.NVML_DEVICE_MIG_ENABLE:
                return []
            count = nvml.nvmlDeviceGetMaxMigDeviceCount(handle)
        except nvml.NVMLError as exc:
            if exc.value != nvml.NVML_ERROR_NOT_SUPPORTED:
                log.warning("NVML GPU %s: MIG mode unreadable: %s", parent["gpu"], exc)
            return []
        samples: list[tuple[Sample, int | None]] = []
        activity: dict[int, dict[str, float]] = {}  # GPU instance id -> its GPM means, read once per cycle
        for position in range(count):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, position)
                uuid, name = nvml.nvmlDeviceGetUUID(mig), nvml.nvmlDeviceGetName(mig)
            except nvml.NVMLError as exc:
                if exc.value != nvml.NVML_ERROR_NOT_FOUND:
                    log.warning("NVML GPU %s MIG device %d unreadable: %s", parent["gpu"], position, exc)
                continue
            profile = name.rpartition(" MIG ")[2] if " MIG " in name else ""
            labels = {**parent, "uuid": uuid, "mig_profile": profile, "parent_uuid": parent["uuid"]}
            values: dict[str, float] = {m.GPU_UP: 1.0}
            for read in MIG_READERS:
                values.update(self._read_field(read, mig, int(parent["gpu"])))
            instance = self._gpu_instance_id(mig)
            if instance is not None:
                if instance not in activity:
                    activity[instance] = self._gpm.gpu_instance(handle, parent, instance)
                values.update(activity[instance])
            sample = Sample(entity="gpu", labels=labels, values=values, timestamp=timestamp)
            samples.append((sample, instance))
        return samples

    def _gpu_instance_id(self, mig: Any) -> int | None:
        try:
            return int(self._nvml.nvmlDeviceGetGpuInstanceId(mig))
        except self._nvml.NVMLError:
            return None

    def _processes(
        self, handle: Any, parent: dict[str, str], by_instance: dict[int, str], mig: bool, timestamp: datetime
    ) -> list[Sample]:
        nvml = self._nvml
        try:
            processes = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except nvml.NVMLError as exc:
            if exc.value != nvml.NVML_ERROR_NOT_SUPPORTED:
                log.warning("NVML GPU %s: processes unreadable: %s", parent["gpu"], exc)
            return []
        sm_utilization = None if mig or not processes else self._process_sm_utilization(handle, parent)
        samples = []
        for process in processes:
            instance = getattr(process, "gpuInstanceId", None)
            uuid = by_instance.get(instance, parent["uuid"]) if isinstance(instance, int) else parent["uuid"]
            used = getattr(process, "usedGpuMemory", None)
            values = {} if used is None else {m.GPU_PROCESS_MEMORY_USED: float(used)}
            if sm_utilization is not None:
                values[m.GPU_PROCESS_SM_UTILIZATION] = sm_utilization.get(int(process.pid), 0.0)
            labels = {"gpu": parent["gpu"], "uuid": uuid, "pid": str(process.pid)}
            samples.append(Sample(entity="gpu_process", labels=labels, values=values, timestamp=timestamp))
        return samples

    def _process_sm_utilization(self, handle: Any, gpu: dict[str, str]) -> dict[int, float] | None:
        """PID -> the mean ``smUtil`` / 100 of its samples since the previous read of this GPU; None if NVML
        cannot tell.

        nvmlDeviceGetProcessUtilization(handle, lastSeenTimeStamp) returns ``nvmlProcessUtilizationSample_t``
        records {``pid``, ``timeStamp`` (CPU time, microseconds since the epoch), ``smUtil``, ``memUtil``,
        ``encUtil``, ``decUtil``}; ``smUtil`` is the percent of the sample period a kernel of the process ran
        (NVML API reference, nvmlProcessUtilizationSample_t). NVML keeps one record per process that had non-zero
        utilisation in a sample period, so a running process absent from an answer that holds samples ran no
        kernel in those periods: the caller gives it 0 (nvidia-smi pmon prints ``-``). ``lastSeenTimeStamp`` is
        the newest ``timeStamp`` of this GPU's previous answer (0 at first: every sample the driver still buffers).
        NVML_ERROR_NOT_FOUND (no sample since then) gives None: it cannot tell an idle GPU from a read that came
        before the driver's next sample period, and 0 for a busy process would be wrong; so does pynvml's
        ``NVMLError(NVML_SUCCESS)``, which it raises when the driver answers the size query with no samples.
        NVML_ERROR_NOT_SUPPORTED gives None quietly, any other error None with a warning.

        The mean is over the process's own samples, so a process that ran in only some sample periods counts at
        its level in those (the driver keeps no record of the others).

        Not read on a MIG-enabled GPU: its records name no MIG instance, and the MIG capture's load shows no
        per-process sample (``pmon``: ``-``) for a process running kernels.
        """
        nvml = self._nvml
        uuid = gpu["uuid"]
        last_seen = self._last_seen.get(uuid, 0)
        try:
            records = nvml.nvmlDeviceGetProcessUtilization(handle, last_seen)
        except nvml.NVMLError as exc:
            if exc.value not in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_NOT_FOUND, nvml.NVML_SUCCESS):
                log.warning("NVML GPU %s: process utilisation left out: %s (NVML error %d)", gpu["gpu"], exc,
                            exc.value)  # fmt: skip
            return None
        totals: dict[int, tuple[float, int]] = {}
        newest = last_seen
        for record in records:
            stamp = int(record.timeStamp)
            if stamp <= last_seen:
                continue
            newest = max(newest, stamp)
            total, count = totals.get(int(record.pid), (0.0, 0))
            totals[int(record.pid)] = (total + float(record.smUtil), count + 1)
        self._last_seen[uuid] = newest
        if not totals:  # only samples already seen: as NOT_FOUND
            return None
        return {pid: total / count / 100 for pid, (total, count) in totals.items()}

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
