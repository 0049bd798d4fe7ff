"""A stand-in for the ``amdsmi`` Python package (AMD SMI, ROCm) whose devices answer as AMD's library does.

The API follows amdsmi 7.0.2's ``amdsmi_interface.py`` and ``amdsmi_exception.py`` (PyPI wheel ``amdsmi``): the
function names and arguments, the dictionaries they return and their keys, the enums the source passes
(``AmdSmiInitFlags``, ``AmdSmiTemperatureType``, ``AmdSmiTemperatureMetric``, ``AmdSmiMemoryType``, ``AmdSmiClkType``,
with the values of ``amdsmi_wrapper``), and the exceptions: ``AmdSmiException`` and its subclass
``AmdSmiLibraryException(err_code)`` with ``get_error_code()``. "Not reported" takes the forms the real library
gives: ``amdsmi_get_gpu_activity`` and ``amdsmi_get_power_info`` turn a 0xFFFF field into the text ``"N/A"``, other
calls raise ``AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)`` (2). ``energy_key`` picks the energy count's
shape: ``"energy_accumulator"`` (ROCm 6.4 and later) or ``"power"`` (ROCm 6.2 and older).

Where the values come from (each device builder below says which of its values are which):

- MI250X: ``rocm-smi`` on an 8-GCD MI250X node posted in wandb/wandb pull request 5449 (2023-07-10): GCDs 0, 2, 4, 6
  at 91.0, 97.0, 89.0, 95.0 W average power with a 560 W cap, GCDs 1, 3, 5, 7 at N/A (power on one die per package),
  temperatures 47, 46, 46, 46, 47, 46, 45, 39 °C, SCLK 800 MHz, MCLK 1600 MHz, VRAM% 0, GPU% 0.
- MI300X: ROCm/device-metrics-exporter issue 139 (2025-06-03), ``rocm-smi`` on an idle MI300X: junction 39.0 °C,
  socket power 182.0 W, GPU% 0 to 1 %.
- MI210: ROCm/device-metrics-exporter issue 135 (2025-05-30), ``amd-smi monitor``: 48 W, GPU_T 44 °C, MEM_T 53 °C,
  GFX_CLK 1700 MHz, GFX% 12 %, MEM% 0 %, VRAM 0.6 / 64.0 GB.
- WRITTEN BY HAND (no public paste has them): UUIDs, board serials, energy accumulators, the counter resolution
  (15.259 µJ, the value amd-smi prints for MI200 and MI300), VRAM totals (64 GiB per MI250X GCD and MI210, 192 GiB
  per MI300X from AMD's datasheets, split equally over partitions), VRAM used, the MI300X clocks, ECC counts,
  processes and their memory, and the CPX partitions' answers (partition 0 carries the GPU's activity, power and
  energy; the others answer N/A or NOT_SUPPORTED, as AMD documents).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

STATUS_NOT_SUPPORTED = 2  # amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED
STATUS_TIMEOUT = 8  # amdsmi_wrapper.AMDSMI_STATUS_TIMEOUT
STATUS_DRIVER_NOT_LOADED = 34  # amdsmi_wrapper.AMDSMI_STATUS_DRIVER_NOT_LOADED
GIB = 2**30
RESOLUTION_UJ = 15.259


class AmdSmiException(Exception):
    """amdsmi_exception.AmdSmiException: the base of the library's exceptions."""


class AmdSmiLibraryException(AmdSmiException):
    """amdsmi_exception.AmdSmiLibraryException: a status other than success, ``err_code`` its absolute value."""

    def __init__(self, err_code: int) -> None:
        super().__init__(abs(err_code))
        self.err_code = abs(err_code)

    def get_error_code(self) -> int:
        return self.err_code


class AmdSmiInitFlags(IntEnum):
    INIT_AMD_GPUS = 2


class AmdSmiTemperatureType(IntEnum):
    EDGE = 0
    HOTSPOT = 1
    VRAM = 2


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = 0


class AmdSmiMemoryType(IntEnum):
    VRAM = 0


class AmdSmiClkType(IntEnum):
    GFX = 0
    MEM = 4


NA = "N/A"


@dataclass
class FakeDevice:
    """One device as amdsmi lists it. A value of None makes its call raise NOT_SUPPORTED; ``"N/A"`` is returned as
    the library returns it. ``errors`` maps a function name to the status it raises; ``lost`` makes every call raise
    AMDSMI_STATUS_TIMEOUT (8)."""

    uuid: str
    market_name: str
    serial: str
    gfx_activity: int | str = 0
    umc_activity: int | str = 0
    socket_power: int | str | None = NA
    energy_accumulator: int | None = None
    temperatures: dict[AmdSmiTemperatureType, int] = field(default_factory=dict)
    vram_total: int | None = None
    vram_used: int | None = None
    clocks: dict[AmdSmiClkType, int] = field(default_factory=dict)
    throttle_status: int | str = NA
    ecc: tuple[int, int] | None = (0, 0)
    compute_partition: str | None = None
    partition_id: int | str = 0
    processes: list[tuple[int, int]] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    lost: bool = False


class FakeAmdSmi:
    """The ``amdsmi`` module over ``devices`` (handles are their positions). ``init_error``: the status
    ``amdsmi_init`` raises; ``energy_key``: the energy count's accumulator key; ``calls``: names of the calls made."""

    AmdSmiException = AmdSmiException
    AmdSmiLibraryException = AmdSmiLibraryException
    AmdSmiInitFlags = AmdSmiInitFlags
    AmdSmiTemperatureType = AmdSmiTemperatureType
    AmdSmiTemperatureMetric = AmdSmiTemperatureMetric
    AmdSmiMemoryType = AmdSmiMemoryType
    AmdSmiClkType = AmdSmiClkType

    def __init__(self, devices: list[FakeDevice], energy_key: str = "energy_accumulator") -> None:
        self.devices = devices
        self.energy_key = energy_key
        self.init_error: int | None = None
        self.initialised = False
        self.calls: list[str] = []

    def _device(self, handle: int, call: str) -> FakeDevice:
        if not self.initialised:
            raise AmdSmiLibraryException(32)  # AMDSMI_STATUS_NOT_INIT
        self.calls.append(call)
        device = self.devices[handle]
        if device.lost:
            raise AmdSmiLibraryException(STATUS_TIMEOUT)
        if call in device.errors:
            raise AmdSmiLibraryException(device.errors[call])
        return device

    @staticmethod
    def _supported(value: Any) -> Any:
        if value is None:
            raise AmdSmiLibraryException(STATUS_NOT_SUPPORTED)
        return value

    def amdsmi_init(self, flag: AmdSmiInitFlags = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
        if self.init_error is not None:
            raise AmdSmiLibraryException(self.init_error)
        self.initialised = True

    def amdsmi_shut_down(self) -> None:
        self.initialised = False

    def amdsmi_get_processor_handles(self) -> list[int]:
        if not self.initialised:
            raise AmdSmiLibraryException(32)
        return list(range(len(self.devices)))

    def amdsmi_get_gpu_device_uuid(self, handle: int) -> str:
        return self._device(handle, "amdsmi_get_gpu_device_uuid").uuid

    def amdsmi_get_gpu_asic_info(self, handle: int) -> dict[str, Any]:
        device = self._device(handle, "amdsmi_get_gpu_asic_info")
        return {
            "market_name": device.market_name, "vendor_id": "0x1002", "vendor_name": "Advanced Micro Devices Inc.",
            "asic_serial": NA, "oam_id": NA, "num_compute_units": NA, "target_graphics_version": "gfx942",
        }  # fmt: skip

    def amdsmi_get_gpu_board_info(self, handle: int) -> dict[str, Any]:
        device = self._device(handle, "amdsmi_get_gpu_board_info")
        return {"model_number": NA, "product_serial": device.serial or NA, "fru_id": NA, "product_name": NA,
                "manufacturer_name": NA}  # fmt: skip

    def amdsmi_get_gpu_compute_partition(self, handle: int) -> str:
        return self._supported(self._device(handle, "amdsmi_get_gpu_compute_partition").compute_partition)

    def amdsmi_get_gpu_kfd_info(self, handle: int) -> dict[str, Any]:
        device = self._device(handle, "amdsmi_get_gpu_kfd_info")
        return {"kfd_id": 1000 + handle, "node_id": 2 + handle, "current_partition_id": device.partition_id}

    def amdsmi_get_gpu_activity(self, handle: int) -> dict[str, Any]:
        device = self._device(handle, "amdsmi_get_gpu_activity")
        raw = {"gfx_activity": device.gfx_activity, "umc_activity": device.umc_activity, "mm_activity": NA}
        return {key: NA if value == 0xFFFF else value for key, value in raw.items()}

    def amdsmi_get_power_info(self, handle: int) -> dict[str, Any]:
        device = self._device(handle, "amdsmi_get_power_info")
        power = self._supported(device.socket_power)
        raw = {"socket_power": power, "current_socket_power": power, "average_socket_power": NA,
               "gfx_voltage": NA, "soc_voltage": NA, "mem_voltage": NA, "power_limit": 750}  # fmt: skip
        return {key: NA if value == 0xFFFF else value for key, value in raw.items()}

    def amdsmi_get_energy_count(self, handle: int) -> dict[str, Any]:
        device = self._device(handle, "amdsmi_get_energy_count")
        accumulator = self._supported(device.energy_accumulator)
        return {self.energy_key: accumulator, "counter_resolution": RESOLUTION_UJ, "timestamp": 1_000_000 + handle}

    def amdsmi_get_temp_metric(
        self, handle: int, sensor: AmdSmiTemperatureType, metric: AmdSmiTemperatureMetric
    ) -> int:
        return self._supported(self._device(handle, "amdsmi_get_temp_metric").temperatures.get(sensor))

    def amdsmi_get_gpu_memory_total(self, handle: int, memory: AmdSmiMemoryType) -> int:
        return self._supported(self._device(handle, "amdsmi_get_gpu_memory_total").vram_total)

    def amdsmi_get_gpu_memory_usage(self, handle: int, memory: AmdSmiMemoryType) -> int:
        return self._supported(self._device(handle, "amdsmi_get_gpu_memory_usage").vram_used)

    def amdsmi_get_clock_info(self, handle: int, clock: AmdSmiClkType) -> dict[str, Any]:
        megahertz = self._supported(self._device(handle, "amdsmi_get_clock_info").clocks.get(clock))
        return {"clk": megahertz, "min_clk": NA, "max_clk": NA, "clk_locked": False, "clk_deep_sleep": NA}

    def amdsmi_get_gpu_metrics_info(self, handle: int) -> dict[str, Any]:
        device = self._device(handle, "amdsmi_get_gpu_metrics_info")
        return {"throttle_status": device.throttle_status, "average_gfx_activity": NA, "energy_accumulator": NA}

    def amdsmi_get_gpu_total_ecc_count(self, handle: int) -> dict[str, Any]:
        corrected, uncorrected = self._supported(self._device(handle, "amdsmi_get_gpu_total_ecc_count").ecc)
        return {"correctable_count": corrected, "uncorrectable_count": uncorrected, "deferred_count": 0}

    def amdsmi_get_gpu_process_list(self, handle: int) -> list[dict[str, Any]]:
        device = self._device(handle, "amdsmi_get_gpu_process_list")
        return [
            {"name": "python3", "pid": pid, "mem": vram, "engine_usage": {"gfx": 0, "enc": 0},
             "memory_usage": {"gtt_mem": 0, "cpu_mem": 0, "vram_mem": vram}, "cu_occupancy": NA}
            for pid, vram in device.processes
        ]  # fmt: skip


def mi300x_spx() -> FakeDevice:
    """One MI300X in SPX mode. From issue 139: junction 39 °C, 182 W, GFX 1 %. By hand: the rest."""
    return FakeDevice(
        uuid="4cff74b5-0000-1000-80e4-ba4b16fd1c1e", market_name="AMD Instinct MI300X", serial="PCB052715-0071",
        gfx_activity=1, umc_activity=0, socket_power=182, energy_accumulator=9_830_400_000,
        temperatures={AmdSmiTemperatureType.HOTSPOT: 39}, vram_total=192 * GIB, vram_used=283_115_520,
        clocks={AmdSmiClkType.GFX: 132, AmdSmiClkType.MEM: 900}, throttle_status=NA, compute_partition="SPX",
        partition_id=0, processes=[(48211, 40 * GIB)],
    )  # fmt: skip


def mi300x_cpx(serial: str = "PCB052715-0072") -> list[FakeDevice]:
    """One MI300X in CPX mode: 8 partitions, each 24 GiB of the HBM. Partition 0 carries the GPU's activity (by hand:
    50 % GFX, 20 % UMC), power (issue 139's 182 W) and energy; partitions 1-7 answer N/A for activity and power and
    NOT_SUPPORTED for energy. Temperature: issue 139's 39 °C on every partition. By hand: the rest."""
    return [
        FakeDevice(
            uuid=f"{index:x}cff74b5-0000-1000-80e4-ba4b16fd1c2e",
            market_name="AMD Instinct MI300X",
            serial=serial,
            gfx_activity=50 if index == 0 else 0xFFFF,
            umc_activity=20 if index == 0 else 0xFFFF,
            socket_power=182 if index == 0 else 0xFFFF,
            energy_accumulator=9_830_400_000 if index == 0 else None,
            temperatures={AmdSmiTemperatureType.HOTSPOT: 39},
            vram_total=24 * GIB,
            vram_used=index * GIB,
            clocks={AmdSmiClkType.GFX: 2100, AmdSmiClkType.MEM: 1300},
            compute_partition="CPX",
            partition_id=index,
        )
        for index in range(8)
    ]


MI250X_POWER = (91, None, 97, None, 89, None, 95, None)
"""wandb/wandb pull request 5449's rocm-smi: average power per GCD, None where it printed N/A."""
MI250X_TEMPERATURE = (47, 46, 46, 46, 47, 46, 45, 39)


def mi250x(gcds: int = 8, secondary_power: int | str = NA) -> list[FakeDevice]:
    """``gcds`` MI250X GCDs, two per package (serial by hand), with the power, edge temperature and clocks of wandb
    PR 5449's paste; the secondary GCD of each package reads ``secondary_power`` for its power (``"N/A"`` as ROCm
    6.0.2 and later, 0 as older amdgpu) and 0 for its energy (amdgpu's aldebaran_ppt.c). By hand: energy
    accumulators, VRAM used, ECC."""
    devices = []
    for index in range(gcds):
        watts = MI250X_POWER[index]
        devices.append(
            FakeDevice(
                uuid=f"GPU-{index:x}f1182f2988c0a4c",
                market_name="AMD Instinct MI250X/MI250",
                serial=f"PCB046982-{index // 2:04d}",
                gfx_activity=0,
                umc_activity=0,
                socket_power=secondary_power if watts is None else watts,
                energy_accumulator=0 if watts is None else 5_242_880_000 + index,
                temperatures={AmdSmiTemperatureType.EDGE: MI250X_TEMPERATURE[index]},
                vram_total=64 * GIB,
                vram_used=11_206_656,
                clocks={AmdSmiClkType.GFX: 800, AmdSmiClkType.MEM: 1600},
                throttle_status=0,
                compute_partition=None,
                partition_id=NA,
            )
        )
    return devices


def mi210() -> FakeDevice:
    """One MI210 (issue 135's amd-smi monitor: 48 W, 44 °C edge, 1700 MHz, GFX 12 %, MEM 0 %, 0.6 of 64 GB)."""
    return FakeDevice(
        uuid="GPU-9b2a6c1d3e4f5a60", market_name="AMD Instinct MI210", serial="PCB040021-0001", gfx_activity=12,
        umc_activity=0, socket_power=48, energy_accumulator=1_310_720_000,
        temperatures={AmdSmiTemperatureType.EDGE: 44}, vram_total=64 * GIB, vram_used=600_000_000,
        clocks={AmdSmiClkType.GFX: 1700}, compute_partition=None, partition_id=NA,
    )  # fmt: skip
