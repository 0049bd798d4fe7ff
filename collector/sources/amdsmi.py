"""AMD Instinct GPU readings through AMD SMI (the ``amdsmi`` Python package of ROCm): one :class:`Sample` per device
per cycle, a device being a GPU, an MI250X GCD or an MI300X compute partition, as amdsmi lists them.

Every value is converted to base units here; the amdsmi calls, their units and the conversions are listed on each
reader of :data:`READERS` (units: AMD SMI Python API reference, https://rocm.docs.amd.com/projects/amdsmi/, "Python
library"). What AMD reports once per physical package is marked on the device that reports it
(:class:`collector.contract.sample.Package`, :func:`_mark_packages`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from collector.contract import metric_names as m
from collector.contract.partitions import (
    DIE_PACKAGE_FIELDS,
    PACKAGE_FIELD_METRICS,
    PARTITION_PACKAGE_FIELDS,
    PARTITIONS_PER_MODE,
    partition_name,
)
from collector.contract.sample import Package, Sample, utc_now

log = logging.getLogger(__name__)

STATUS_NOT_SUPPORTED = 2
"""``AMDSMI_STATUS_NOT_SUPPORTED`` (amdsmi.h ``amdsmi_status_t``): the device has no such reading; left out quietly."""
NO_DRIVER_STATUSES = frozenset({4, 18, 34})
"""``amdsmi_init`` answers meaning this host has no usable AMD GPU driver: ``AMDSMI_STATUS_FAIL_LOAD_MODULE`` (4),
``AMDSMI_STATUS_INIT_ERROR`` (18), ``AMDSMI_STATUS_DRIVER_NOT_LOADED`` (34): no readings, not a failure."""
UINT16_ABSENT = 0xFFFF
"""What amdsmi's C structures hold for a 16-bit value the firmware does not report (the Python API turns most of them
into the text ``"N/A"``; older releases pass the number through)."""
UINT64_ABSENT = 0xFFFF_FFFF_FFFF_FFFF
"""The same for a 64-bit value."""
PARTITIONED_MODES = frozenset(mode.upper() for mode in PARTITIONS_PER_MODE)
"""Compute partition modes (amdsmi_get_gpu_compute_partition) that show one MI300-series GPU as several devices."""


def _number(value: Any, absent: int | None = None) -> float | None:
    """``value`` as a float; None for amdsmi's "not reported" forms: ``"N/A"`` (any text), None, or ``absent``."""
    if value is None or isinstance(value, str | bool) or (absent is not None and value == absent):
        return None
    return float(value)


def _percent(value: Any) -> float | None:
    """An amdsmi activity percentage (0..100) as a ratio; None for N/A, 0xFFFF or a value over 100 (which amdsmi's
    own tool shows as N/A)."""
    number = _number(value, UINT16_ABSENT)
    return None if number is None or number > 100 else number / 100


def _activity(amdsmi: Any, handle: Any) -> dict[str, float]:
    """amdsmi_get_gpu_activity: ``gfx_activity`` and ``umc_activity``, percent -> ratio (/100).

    ``gfx_activity`` (graphics and compute engine busy) becomes the utilisation (amd-smi's GFX%, as nvidia-smi's
    utilization.gpu); ``umc_activity`` (unified memory controller busy) the memory utilisation (amd-smi's MEM%, as
    utilization.memory), not ``dram_active_ratio``: that is a DCGM profiling field whose presence marks an hour
    as profiled. ``mm_activity`` (video engines) is not read: nothing bills it.
    """
    usage = amdsmi.amdsmi_get_gpu_activity(handle)
    values = {m.GPU_UTILIZATION: _percent(usage.get("gfx_activity")),
              m.GPU_MEMORY_UTILIZATION: _percent(usage.get("umc_activity"))}  # fmt: skip
    return {name: value for name, value in values.items() if value is not None}


def _power(amdsmi: Any, handle: Any) -> dict[str, float]:
    """amdsmi_get_power_info: ``socket_power`` in watts (the package's; older releases have only
    ``current_socket_power`` on MI300 or ``average_socket_power`` on MI200, read in that order)."""
    info = amdsmi.amdsmi_get_power_info(handle)
    for key in ("socket_power", "current_socket_power", "average_socket_power"):
        watts = _number(info.get(key), UINT16_ABSENT)
        if watts is not None:
            return {m.GPU_POWER: watts}
    return {}


def _energy(amdsmi: Any, handle: Any) -> dict[str, float]:
    """amdsmi_get_energy_count: ``energy_accumulator`` x ``counter_resolution`` (microjoules per count) -> joules
    (/10^6). ROCm 6.2 and older name the accumulator ``power`` (renamed in ROCm 6.3, which has both; AMD SMI
    changelog), so that key is read when the other is absent."""
    count = amdsmi.amdsmi_get_energy_count(handle)
    accumulator = count.get("energy_accumulator", count.get("power"))
    ticks = _number(accumulator, UINT64_ABSENT)
    resolution = _number(count.get("counter_resolution"))
    if ticks is None or resolution is None:
        return {}
    return {m.GPU_ENERGY: ticks * resolution / 1e6}


def _temperature(amdsmi: Any, handle: Any) -> dict[str, float]:
    """amdsmi_get_temp_metric(HOTSPOT, CURRENT): junction temperature, degrees Celsius; the EDGE sensor when the
    hotspot is not supported (MI300X has no edge sensor, MI200 both)."""
    metric = amdsmi.AmdSmiTemperatureMetric.CURRENT
    try:
        celsius = amdsmi.amdsmi_get_temp_metric(handle, amdsmi.AmdSmiTemperatureType.HOTSPOT, metric)
    except amdsmi.AmdSmiLibraryException as exc:
        if not _not_supported(exc):
            raise
        celsius = amdsmi.amdsmi_get_temp_metric(handle, amdsmi.AmdSmiTemperatureType.EDGE, metric)
    value = _number(celsius, UINT16_ABSENT)
    return {} if value is None else {m.GPU_TEMPERATURE: value}


def _memory(amdsmi: Any, handle: Any) -> dict[str, float]:
    """amdsmi_get_gpu_memory_total and _usage with AmdSmiMemoryType.VRAM: device memory in bytes (a partition's own
    share of the HBM in NPS4/NPS8 memory modes)."""
    vram = amdsmi.AmdSmiMemoryType.VRAM
    total = _number(amdsmi.amdsmi_get_gpu_memory_total(handle, vram), UINT64_ABSENT)
    used = _number(amdsmi.amdsmi_get_gpu_memory_usage(handle, vram), UINT64_ABSENT)
    values = {m.GPU_MEMORY_TOTAL: total, m.GPU_MEMORY_USED: used}
    return {name: value for name, value in values.items() if value is not None}


def _clock(amdsmi: Any, handle: Any, clock: Any) -> float | None:
    """amdsmi_get_clock_info(``clock``): ``clk``, the current clock in MHz -> hertz (x 10^6); None for N/A."""
    megahertz = _number(amdsmi.amdsmi_get_clock_info(handle, clock).get("clk"), 0xFFFF_FFFF)
    return None if megahertz is None else megahertz * 1e6


def _gfx_clock(amdsmi: Any, handle: Any) -> dict[str, float]:
    """The GFX clock (AmdSmiClkType.GFX), the counterpart of NVIDIA's SM clock, in hertz."""
    hertz = _clock(amdsmi, handle, amdsmi.AmdSmiClkType.GFX)
    return {} if hertz is None else {m.GPU_SM_CLOCK: hertz}


def _memory_clock(amdsmi: Any, handle: Any) -> dict[str, float]:
    """The memory clock (AmdSmiClkType.MEM, the HBM's UCLK), in hertz."""
    hertz = _clock(amdsmi, handle, amdsmi.AmdSmiClkType.MEM)
    return {} if hertz is None else {m.GPU_MEMORY_CLOCK: hertz}


def _throttle(amdsmi: Any, handle: Any) -> dict[str, float]:
    """amdsmi_get_gpu_metrics_info: ``throttle_status``, the firmware's throttle bitmask (0: not throttled). Its bits
    are AMD's, not NVML's clocks-event reasons, so it is exposed on /metrics only, never as
    ``clocks_event_reasons``."""
    status = _number(amdsmi.amdsmi_get_gpu_metrics_info(handle).get("throttle_status"), 0xFFFF_FFFF)
    return {} if status is None else {m.GPU_THROTTLE_STATUS: status}


def _ecc(amdsmi: Any, handle: Any) -> dict[str, float]:
    """amdsmi_get_gpu_total_ecc_count: ``correctable_count`` and ``uncorrectable_count`` over all RAS blocks (AMD's
    counts persist in the RAS EEPROM, so they need not restart at zero when the driver is loaded)."""
    counts = amdsmi.amdsmi_get_gpu_total_ecc_count(handle)
    values = {m.GPU_ECC_CORRECTED: _number(counts.get("correctable_count"), UINT64_ABSENT),
              m.GPU_ECC_UNCORRECTED: _number(counts.get("uncorrectable_count"), UINT64_ABSENT)}  # fmt: skip
    return {name: value for name, value in values.items() if value is not None}


READERS: tuple[Callable[[Any, Any], dict[str, float]], ...] = (
    _activity,
    _power,
    _energy,
    _temperature,
    _memory,
    _gfx_clock,
    _memory_clock,
    _throttle,
    _ecc,
)
"""Every per-device reading; each one's AMDSMI_STATUS_NOT_SUPPORTED or N/A leaves only its own series out."""


@dataclass(slots=True)
class _Device:
    """One device read this cycle: its sample's parts, and what tells its package (board serial, compute partition
    mode, partition id; None when amdsmi cannot tell)."""

    handle: Any
    labels: dict[str, str]
    values: dict[str, float]
    serial: str | None = None
    mode: str | None = None
    partition: int | None = None
    package: Package | None = None


def _mark_packages(devices: list[_Device]) -> None:
    """Group the devices of one physical package and mark which reports what for all of it.

    A package is the devices with the same board serial (amdsmi_get_gpu_board_info ``product_serial``), when more
    than one device has it. Every device of a package gets a :class:`Package` naming it and their number. Then:

    - a GPU in a partitioned compute mode (:data:`PARTITIONED_MODES`): partition 0 reports
      :data:`PARTITION_PACKAGE_FIELDS` for the package; the other partitions' values of them are dropped (AMD
      reports them once per GPU; a copy on every partition would be counted once per partition). No device with
      partition id 0: none reports them.
    - otherwise (two dies, MI250X/MI250): a die reading 0 or N/A for power or energy does not report it; if exactly
      one die reports it, that die reports :data:`DIE_PACKAGE_FIELDS` for the package; if each die reports its own,
      nothing is package-wide.
    """
    by_serial: dict[str, list[_Device]] = {}
    for device in devices:
        if device.serial is not None:
            by_serial.setdefault(device.serial, []).append(device)
    for serial, members in by_serial.items():
        if len(members) < 2:
            continue
        reporter: _Device | None
        fields: tuple[str, ...]
        if any(member.mode in PARTITIONED_MODES for member in members):
            fields = PARTITION_PACKAGE_FIELDS
            reporter = next((member for member in members if member.partition == 0), None)
            if reporter is None:
                log.warning("amdsmi package %s: no partition 0 among its devices; package readings left out", serial)
        else:
            fields = DIE_PACKAGE_FIELDS
            for member in members:
                for name in fields:
                    if member.values.get(PACKAGE_FIELD_METRICS[name]) == 0:
                        del member.values[PACKAGE_FIELD_METRICS[name]]
            reporting = [member for member in members if any(PACKAGE_FIELD_METRICS[f] in member.values for f in fields)]
            reporter = reporting[0] if len(reporting) == 1 else None
            if len(reporting) > 1:
                fields = ()
        for member in members:
            if member is reporter:
                member.package = Package(serial, len(members), fields)
                continue
            for name in fields:
                member.values.pop(PACKAGE_FIELD_METRICS[name], None)
            member.package = Package(serial, len(members))


class AmdSmiSource:
    """Reads every AMD GPU device AMD SMI sees: per device one ``entity="gpu"`` :class:`Sample` and one
    ``entity="gpu_process"`` sample per process using it.

    Labels as :class:`collector.sources.nvml.NvmlSource`'s, so both sources' series share their /metrics families:
    ``gpu`` (position in amdsmi_get_processor_handles), ``uuid`` (amdsmi_get_gpu_device_uuid), ``model``
    (amdsmi_get_gpu_asic_info ``market_name``; for a compute partition of an MI300-series GPU in DPX, TPX, QPX or CPX
    mode (amdsmi_get_gpu_compute_partition), :func:`collector.contract.partitions.partition_name`, e.g. ``AMD Instinct
    MI300X (CPX partition 1/8)``, which the service prices at that share of the GPU), ``mig_profile`` and
    ``parent_uuid`` empty. Values: see each reader of :data:`READERS`; every device that answered carries
    ``gpufinops_gpu_up`` = 1.

    Packages: an MI250X shows as two devices (GCDs), an MI300-series GPU in DPX, TPX, QPX or CPX mode as 2, 3, 4 or 8
    (compute partitions). Each such device's sample carries :attr:`Sample.package` (:func:`_mark_packages`); what the
    hardware reports once per package stays on the one device that reports it, marked as the package's, and the service
    splits it over the package's devices (:mod:`finops.ingest.package_split`). The collector must see every device of a
    package (run it on the host, not in a job's container), or the shares are wrong.

    Processes (amdsmi_get_gpu_process_list): labels ``gpu``, ``uuid`` and ``pid``; value the process's VRAM in bytes
    (``memory_usage.vram_mem``; ``mem`` in releases without it). The job mapper reads the PIDs. AMD gives no
    per-process utilisation that matches NVML's ``smUtil``, so a device shared by several jobs has no per-job share.

    Errors: AMDSMI_STATUS_NOT_SUPPORTED leaves a reading's keys out (never 0), any other error of one call leaves
    them out with a warning. An error reading a device's UUID or ASIC information makes its sample
    ``gpufinops_gpu_up`` = 0 alone (labels as last seen at its position), with a warning; the other devices are
    still read. If ``amdsmi_init`` finds no AMD driver (:data:`NO_DRIVER_STATUSES`), ``collect`` returns ``[]``, logs
    one warning (repeats are DEBUG) and tries again on the next ``collect``; other ``amdsmi_init`` errors are raised.

    Args:
        amdsmi: the ``amdsmi`` module, or a stand-in with the same names (tests); default: ``import amdsmi``.
        clock: the time of a reading, timezone-aware UTC; one timestamp per ``collect`` for all devices.

    Raises:
        ValueError: ``amdsmi`` is not installed, or cannot load ROCm's ``libamd_smi.so`` (install the ``amd``
            extra and ROCm's amd-smi-lib; docs/collector.md).
    """

    name = "amdsmi"

    def __init__(self, amdsmi: Any = None, clock: Callable[[], datetime] = utc_now) -> None:
        if amdsmi is None:
            try:
                import amdsmi as library
            except (ImportError, OSError) as exc:
                raise ValueError(
                    f"the amdsmi source needs AMD SMI: pip install 'gpu-finops[amd]' and ROCm's amd-smi-lib ({exc})"
                ) from exc
            amdsmi = library
        self._amdsmi = amdsmi
        self._clock = clock
        self._initialised = False
        self._no_driver_logged = False
        self._known: dict[int, dict[str, str]] = {}
        self._serials: dict[int, str] = {}

    def collect(self) -> list[Sample]:
        """Samples of every device and process; ``[]`` when this host has no AMD GPU driver."""
        if not self._initialised and not self._initialise():
            return []
        timestamp = self._clock()
        devices: list[_Device] = []
        for index, handle in enumerate(self._amdsmi.amdsmi_get_processor_handles()):
            devices.append(self._read_device(index, handle) or self._lost(index, handle))
        _mark_packages(devices)
        samples = [Sample("gpu", d.labels, d.values, timestamp, package=d.package) for d in devices]
        for device in devices:
            if device.values[m.GPU_UP]:
                samples.extend(self._processes(device.handle, device.labels, timestamp))
        return samples

    def close(self) -> None:
        """Shut AMD SMI down (when the collector stops)."""
        if self._initialised:
            try:
                self._amdsmi.amdsmi_shut_down()
            except self._amdsmi.AmdSmiException as exc:
                log.debug("amdsmi_shut_down: %s", exc)
            self._initialised = False

    def _initialise(self) -> bool:
        amdsmi = self._amdsmi
        try:
            amdsmi.amdsmi_init(amdsmi.AmdSmiInitFlags.INIT_AMD_GPUS)
        except amdsmi.AmdSmiLibraryException as exc:
            if exc.get_error_code() not in NO_DRIVER_STATUSES:
                raise
            level = logging.DEBUG if self._no_driver_logged else logging.WARNING
            log.log(level, "AMD SMI unavailable (%s): no AMD GPU driver, so no readings; retrying every cycle", exc)
            self._no_driver_logged = True
            return False
        self._initialised = True
        return True

    def _lost(self, index: int, handle: Any) -> _Device:
        """A device that did not answer: ``gpufinops_gpu_up`` = 0 with the labels and board serial last seen at its
        position (the serial keeps it in its package, so that its partner's 0 is not taken for a reading)."""
        labels = {**self._known.get(index, {"uuid": "", "model": ""}), "gpu": str(index)}
        labels.update(mig_profile="", parent_uuid="")
        return _Device(handle, labels, {m.GPU_UP: 0.0}, serial=self._serials.get(index))

    def _read_device(self, index: int, handle: Any) -> _Device | None:
        amdsmi = self._amdsmi
        try:
            uuid = amdsmi.amdsmi_get_gpu_device_uuid(handle)
            model = amdsmi.amdsmi_get_gpu_asic_info(handle)["market_name"]
        except amdsmi.AmdSmiException as exc:
            log.warning("amdsmi device %d did not answer: %s; gpu_up 0", index, exc)
            return None
        mode = self._optional(lambda: amdsmi.amdsmi_get_gpu_compute_partition(handle))
        mode = mode if isinstance(mode, str) and mode else None
        model = partition_name(model, mode or "")
        labels = {"gpu": str(index), "uuid": uuid, "model": model, "mig_profile": "", "parent_uuid": ""}
        self._known[index] = labels
        values: dict[str, float] = {m.GPU_UP: 1.0}
        for read in READERS:
            values.update(self._read_field(read, handle, index))
        device = _Device(handle, labels, values, mode=mode)
        serial = self._optional(lambda: amdsmi.amdsmi_get_gpu_board_info(handle)["product_serial"])
        device.serial = serial if isinstance(serial, str) and serial not in ("", "N/A") else None
        if device.serial is not None:
            self._serials[index] = device.serial
        partition = self._optional(lambda: amdsmi.amdsmi_get_gpu_kfd_info(handle)["current_partition_id"])
        device.partition = partition if isinstance(partition, int) and not isinstance(partition, bool) else None
        return device

    def _optional(self, call: Callable[[], Any]) -> Any:
        """``call()``, or None when amdsmi cannot answer it (a release or device without it)."""
        try:
            return call()
        except (self._amdsmi.AmdSmiException, KeyError, AttributeError):
            return None

    def _processes(self, handle: Any, device: dict[str, str], timestamp: datetime) -> list[Sample]:
        amdsmi = self._amdsmi
        try:
            processes = amdsmi.amdsmi_get_gpu_process_list(handle)
        except amdsmi.AmdSmiException as exc:
            if not _not_supported(exc):
                log.warning("amdsmi device %s: processes unreadable: %s", device["gpu"], exc)
            return []
        samples = []
        for process in processes:
            vram = process.get("memory_usage", {}).get("vram_mem", process.get("mem"))
            used = _number(vram, UINT64_ABSENT)
            values = {} if used is None else {m.GPU_PROCESS_MEMORY_USED: used}
            labels = {"gpu": device["gpu"], "uuid": device["uuid"], "pid": str(process["pid"])}
            samples.append(Sample(entity="gpu_process", labels=labels, values=values, timestamp=timestamp))
        return samples

    def _read_field(self, read: Callable[[Any, Any], dict[str, float]], handle: Any, index: int) -> dict[str, float]:
        """``read``'s values; ``{}`` if amdsmi cannot give them (a warning unless NOT_SUPPORTED)."""
        try:
            return read(self._amdsmi, handle)
        except self._amdsmi.AmdSmiException as exc:
            if not _not_supported(exc):
                log.warning("amdsmi device %d: %s left out: %s", index, read.__name__.removeprefix("_"), exc)
            return {}


def _not_supported(exc: Exception) -> bool:
    """Whether an amdsmi exception is AMDSMI_STATUS_NOT_SUPPORTED (only library exceptions carry a status)."""
    return getattr(exc, "err_code", None) == STATUS_NOT_SUPPORTED
