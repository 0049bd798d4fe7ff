"""A stand-in for the ``pynvml`` module whose GPUs answer with the values of real nvidia-smi captures.

The captures are ``../shared/data/nvidia-smi-captures/*.txt`` (see its SOURCE.md), read in place: raw
nvidia-smi output cut into sections by ``####`` banner lines, each titled ``# <state> :: <name>``. The
``<state> :: query-gpu`` section is ``--query-gpu=… --format=csv``: a header of field names with units in
brackets (``memory.used [MiB]``) and one row per GPU with values like ``19818 MiB``, ``631.95 W``, ``100 %``,
``0x0000000000000001``, ``[N/A]``.

Each NVML call answers from one query-gpu field, converted to the unit NVML itself uses; a field the
capture shows as ``[N/A]`` or ``[Not Supported]`` raises ``NVMLError(NVML_ERROR_NOT_SUPPORTED)``:

==========================================  ==================================================================
NVML call                                   capture field -> NVML value
==========================================  ==================================================================
nvmlDeviceGetName / nvmlDeviceGetUUID       ``name`` / ``uuid``
nvmlDeviceGetUtilizationRates               ``utilization.gpu``, ``utilization.memory`` (%) -> ``.gpu``, ``.memory``
nvmlDeviceGetMemoryInfo                     ``memory.total``/``.reserved``/``.used``/``.free`` (MiB) -> bytes;
                                            v1 ``used`` = used + reserved, v2 has both apart
nvmlDeviceGetPowerUsage                     ``power.draw`` (W) -> mW
nvmlDeviceGetTotalEnergyConsumption         DERIVED, see below (mJ)
nvmlDeviceGetTemperature(GPU)               ``temperature.gpu`` (°C)
nvmlDeviceGetClockInfo(SM)                  ``clocks.current.sm`` (MHz)
nvmlDeviceGetCurrentClocksEventReasons      ``clocks_event_reasons.active`` (hex bitmask) -> int
(and ...ClocksThrottleReasons)
==========================================  ==================================================================

The captures hold no energy counter, so the fake derives one: the captured ``power.draw`` is taken as constant
since the fake was built (its "driver load"), and the energy is that power integrated over the fake's clock,
``power_mW x elapsed_seconds`` millijoules (``NOT_SUPPORTED`` where the power is).

Constants (``NVML_ERROR_*``, ``NVML_TEMPERATURE_GPU``, ``NVML_CLOCK_SM``, ``nvmlMemory_v2``) and the
``NVMLError`` class are the real ones from ``pynvml``, so ``NVMLError(code)`` is the same subclass real NVML
raises. Errors can be injected: ``init_error`` (raised by ``nvmlInit``), ``gpu_errors`` (index -> code raised
by every call on that GPU, handle included), ``call_errors`` ((index, function name) -> code for one call) and
``missing_functions`` (names the "driver" lacks: ``NVML_ERROR_FUNCTION_NOT_FOUND``, as pynvml raises).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pynvml

CAPTURES = Path("nvidia-smi-captures")
"""The captures' folder, relative to the shared data folder."""

BANNER = re.compile(r"^#{20,}\n", re.MULTILINE)
NOT_SUPPORTED_CELLS = frozenset({"[N/A]", "[Not Supported]"})
MIB = 2**20


def query_gpu_rows(path: Path, state: str) -> list[dict[str, str]]:
    """The ``<state> :: query-gpu`` CSV of a capture: per GPU, field name (unit dropped) -> cell as printed."""
    chunks = BANNER.split(path.read_text())
    # chunks: text before the first banner, then (title lines, body) pairs
    for title, body in zip(chunks[1::2], chunks[2::2], strict=False):
        if title.startswith(f"# {state} :: query-gpu "):
            rows = list(csv.reader(io.StringIO(body.strip()), skipinitialspace=True))
            names = [cell.split(" [", 1)[0] for cell in rows[0]]
            return [dict(zip(names, row, strict=True)) for row in rows[1:]]
    raise ValueError(f"{path}: no '{state} :: query-gpu' section")


class ManualClock:
    """A clock the test moves by hand: returns ``now``, timezone-aware UTC."""

    def __init__(self, start: datetime = datetime(2026, 7, 14, 8, 12, 38, tzinfo=UTC)) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@dataclass(frozen=True)
class FakeHandle:
    """What nvmlDeviceGetHandleByIndex returns: the GPU's index."""

    index: int


class FakeNvml:
    """The module-like fake: GPU ``i`` answers from ``gpus[i]`` (a :func:`query_gpu_rows` row)."""

    NVMLError = pynvml.NVMLError
    NVML_ERROR_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_FUNCTION_NOT_FOUND = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    NVML_ERROR_LIBRARY_NOT_FOUND = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    NVML_ERROR_DRIVER_NOT_LOADED = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    NVML_ERROR_GPU_IS_LOST = pynvml.NVML_ERROR_GPU_IS_LOST
    NVML_ERROR_UNKNOWN = pynvml.NVML_ERROR_UNKNOWN
    NVML_ERROR_TIMEOUT = pynvml.NVML_ERROR_TIMEOUT
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    nvmlMemory_v2 = pynvml.nvmlMemory_v2

    def __init__(self, gpus: list[dict[str, str]], clock: Callable[[], datetime]) -> None:
        self.gpus = gpus
        self.clock = clock
        self.loaded_at = clock()
        self.initialised = False
        self.init_error: int | None = None
        self.gpu_errors: dict[int, int] = {}
        self.call_errors: dict[tuple[int, str], int] = {}
        self.missing_functions: set[str] = set()

    # --- library ---------------------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self._check_initialised()
        self.initialised = False

    def nvmlDeviceGetCount(self) -> int:
        self._check_initialised()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._check_initialised()
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._check_injected(index, "nvmlDeviceGetHandleByIndex")
        return FakeHandle(index)

    # --- device queries --------------------------------------------------------------------------------------

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        return self._cell(handle, "nvmlDeviceGetName", "name")

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        return self._cell(handle, "nvmlDeviceGetUUID", "uuid")

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> SimpleNamespace:
        function = "nvmlDeviceGetUtilizationRates"
        gpu = self._number(handle, function, "utilization.gpu", "%")
        memory = self._number(handle, function, "utilization.memory", "%")
        return SimpleNamespace(gpu=int(gpu), memory=int(memory))

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle, version: int | None = None) -> SimpleNamespace:
        function = "nvmlDeviceGetMemoryInfo_v2" if version else "nvmlDeviceGetMemoryInfo"
        total, reserved, used, free = (
            int(self._number(handle, function, f"memory.{part}", "MiB")) * MIB
            for part in ("total", "reserved", "used", "free")
        )
        if version:
            return SimpleNamespace(version=version, total=total, reserved=reserved, used=used, free=free)
        return SimpleNamespace(total=total, used=used + reserved, free=free)

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        return self._milliwatts(handle, "nvmlDeviceGetPowerUsage")

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeHandle) -> int:
        milliwatts = self._milliwatts(handle, "nvmlDeviceGetTotalEnergyConsumption")
        return round(milliwatts * (self.clock() - self.loaded_at).total_seconds())

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(self._number(handle, "nvmlDeviceGetTemperature", "temperature.gpu", ""))

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, clock_type: int) -> int:
        if clock_type != pynvml.NVML_CLOCK_SM:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(self._number(handle, "nvmlDeviceGetClockInfo", "clocks.current.sm", "MHz"))

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeHandle) -> int:
        return int(self._cell(handle, "nvmlDeviceGetCurrentClocksEventReasons", "clocks_event_reasons.active"), 16)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeHandle) -> int:
        return int(self._cell(handle, "nvmlDeviceGetCurrentClocksThrottleReasons", "clocks_event_reasons.active"), 16)

    # --- helpers ---------------------------------------------------------------------------------------------

    def _check_initialised(self) -> None:
        if not self.initialised:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    def _check_injected(self, index: int, function: str) -> None:
        if function in self.missing_functions:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        code = self.gpu_errors.get(index, self.call_errors.get((index, function)))
        if code is not None:
            raise pynvml.NVMLError(code)

    def _cell(self, handle: FakeHandle, function: str, field: str) -> str:
        """The capture's cell for ``field`` of this GPU, after the injected errors and NOT_SUPPORTED cells."""
        self._check_initialised()
        self._check_injected(handle.index, function)
        cell = self.gpus[handle.index][field]
        if cell in NOT_SUPPORTED_CELLS:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return cell

    def _number(self, handle: FakeHandle, function: str, field: str, unit: str) -> float:
        """The cell as a number; the unit nvidia-smi prints after it must be ``unit`` ("" for none)."""
        number, _, printed_unit = self._cell(handle, function, field).partition(" ")
        if printed_unit != unit:
            raise ValueError(f"{field}: unit {printed_unit!r}, expected {unit!r}")
        return float(number)

    def _milliwatts(self, handle: FakeHandle, function: str) -> int:
        return round(self._number(handle, function, "power.draw", "W") * 1000)


def fake_nvml_from_capture(path: Path, state: str, clock: Callable[[], datetime]) -> FakeNvml:
    """A fake ``pynvml`` whose GPUs are the ``state`` (``idle`` or ``load``) query-gpu rows of capture ``path``."""
    return FakeNvml(query_gpu_rows(path, state), clock)
