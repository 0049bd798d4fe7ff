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

Per-process utilisation (nvmlDeviceGetProcessUtilization) comes from the ``<state> :: pmon`` section
(``nvidia-smi pmon -c 5``: five rounds, one line per compute process, columns gpu index, pid, type, ``sm`` and
``mem`` in %, ...; ``-`` where the process had no sample). In the H100 capture's ``load`` state that is pid 11345
(``gpu_burn``) at sm 99 %, mem 10 % in every round, and the two ``memhog`` pids 11327 and 11328 with ``-``. A
line with a number under ``sm`` becomes one ``nvmlProcessUtilizationSample_t``-like record (``pid``,
``timeStamp``, ``smUtil``, ``memUtil``); a ``-`` line becomes none, as NVML records only processes with non-zero
utilisation. DERIVED: the capture has no NVML timestamps, so the fake takes pmon's rounds as one per second
(pmon's default interval) repeated since the fake was built: record ``k`` (k = 1, 2, ...) is stamped
``loaded_at + k`` seconds (in microseconds) and has the values of round ``(k - 1) mod rounds``; a call returns
the records stamped after ``lastSeenTimeStamp`` and up to the fake's clock, and NVML_ERROR_NOT_FOUND when there
are none. A fake built without a pmon section answers NVML_ERROR_NOT_SUPPORTED. The records carry only the
fields the source reads and the capture gives for such lines: no ``encUtil``/``decUtil``.

GPM (nvmlGpmQueryDeviceSupport, nvmlGpmSampleAlloc/Free, nvmlGpmSampleGet, nvmlGpmMigSampleGet,
nvmlGpmMetricsGet) comes from :class:`tests.support.fake_pynvml_gpm.FakeGpm`, with nvidia-ml-py's structures, metric
ids and return codes. Its values are WRITTEN BY HAND (no public capture of NVML GPM output exists): the tests set
``gpm``; without it the fake's driver has no GPM (NVMLError_FunctionNotFound).

Constants (``NVML_ERROR_*``, ``NVML_TEMPERATURE_GPU``, ``NVML_CLOCK_SM``, ``nvmlMemory_v2``) and the
``NVMLError`` class are the real ones from ``pynvml``, so ``NVMLError(code)`` is the same subclass real NVML
raises. Errors can be injected: ``init_error`` (raised by ``nvmlInit``), ``gpu_errors`` (index -> code raised
by every call on that GPU, handle included), ``call_errors`` ((index, function name) -> code for one call) and
``missing_functions`` (names the "driver" lacks: ``NVML_ERROR_FUNCTION_NOT_FOUND``, as pynvml raises).
"""

from __future__ import annotations

import csv
import ctypes
import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pynvml

from tests.support.fake_pynvml_gpm import FakeGpm, GpmPhase, GpmTarget

CAPTURES = Path("nvidia-smi-captures")
"""The captures' folder, relative to the shared data folder."""

BANNER = re.compile(r"^#{20,}\n", re.MULTILINE)
NOT_SUPPORTED_CELLS = frozenset({"[N/A]", "[Not Supported]"})
MIB = 2**20


def capture_section(path: Path, title: str) -> str | None:
    """The body of the capture section whose title line starts with ``# <title>``, or None."""
    chunks = BANNER.split(path.read_text())
    # chunks: text before the first banner, then (title lines, body) pairs
    for heading, body in zip(chunks[1::2], chunks[2::2], strict=False):
        if heading.startswith(f"# {title}"):
            return body
    return None


def csv_rows(body: str) -> list[dict[str, str]]:
    """nvidia-smi ``--format=csv`` output: per line, field name (unit dropped) -> cell as printed."""
    rows = list(csv.reader(io.StringIO(body.strip()), skipinitialspace=True))
    names = [cell.split(" [", 1)[0] for cell in rows[0]]
    return [dict(zip(names, row, strict=True)) for row in rows[1:]]


def query_gpu_rows(path: Path, state: str) -> list[dict[str, str]]:
    """The ``<state> :: query-gpu`` CSV of a capture: per GPU, field name (unit dropped) -> cell as printed."""
    body = capture_section(path, f"{state} :: query-gpu ")
    if body is None:
        raise ValueError(f"{path}: no '{state} :: query-gpu' section")
    return csv_rows(body)


MIG_LIST_LINE = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[^)]+)\)")
MIG_TABLE_ROW = re.compile(r"^\|\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+\|\s+(\d+)MiB /\s*(\d+)MiB")


@dataclass(frozen=True)
class MigDevice:
    """One MIG device of a capture: ``nvidia-smi -L`` gives profile and UUID, the default table its GPU
    instance id and memory (``used MiB / total MiB``)."""

    parent_index: int
    position: int
    profile: str
    uuid: str
    gpu_instance_id: int
    used_mib: int
    total_mib: int


def mig_devices(path: Path, state: str) -> list[MigDevice]:
    """The capture's MIG devices in ``state`` (none when it has no MIG)."""
    listing = capture_section(path, "capabilities :: list (-L)") or ""
    table = capture_section(path, f"{state} :: nvidia-smi (default table)") or ""
    listed = [match.groups() for line in listing.splitlines() if (match := MIG_LIST_LINE.match(line))]
    rows = {int(r.group(4)): r for line in table.splitlines() if (r := MIG_TABLE_ROW.match(line)) is not None}
    devices = []
    for profile, position, uuid in listed:
        row = rows[int(position)]
        parent, instance, used, total = (int(row.group(n)) for n in (1, 2, 5, 6))
        devices.append(MigDevice(parent, int(position), profile, uuid, instance, used, total))
    return devices


def compute_apps(path: Path, state: str) -> list[dict[str, str]]:
    """The ``<state> :: query-compute-apps`` CSV rows (gpu_uuid, pid, used_gpu_memory, ...); [] if none ran."""
    body = capture_section(path, f"{state} :: query-compute-apps")
    if body is None or not body.strip() or "\n" not in body.strip():
        return []
    return csv_rows(body)


@dataclass(frozen=True)
class PmonLine:
    """One line of ``nvidia-smi pmon``: GPU index, pid, and ``sm``/``mem`` in percent (None where ``-``)."""

    gpu: int
    pid: int
    sm: int | None
    mem: int | None


def pmon_rounds(path: Path, state: str) -> list[list[PmonLine]] | None:
    """The ``<state> :: pmon`` section as its rounds (a round ends where a (gpu, pid) comes again); None if the
    capture has no such section."""
    body = capture_section(path, f"{state} :: pmon")
    if body is None:
        return None
    rounds: list[list[PmonLine]] = [[]]
    for line in body.splitlines():
        cells = line.split()
        if not cells or line.startswith("#") or not cells[1].isdigit():
            continue
        sm, mem = (None if cell == "-" else int(cell) for cell in cells[3:5])
        entry = PmonLine(int(cells[0]), int(cells[1]), sm, mem)
        if any((seen.gpu, seen.pid) == (entry.gpu, entry.pid) for seen in rounds[-1]):
            rounds.append([])
        rounds[-1].append(entry)
    return [r for r in rounds if r]


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


@dataclass(frozen=True)
class FakeMigHandle:
    """What nvmlDeviceGetMigDeviceHandleByIndex returns: the MIG device; ``index`` is its parent's."""

    index: int
    device: MigDevice


class FakeNvml(FakeGpm):
    """The module-like fake: GPU ``i`` answers from ``gpus[i]`` (a :func:`query_gpu_rows` row)."""

    NVMLError = pynvml.NVMLError
    nvmlMemory_v2 = pynvml.nvmlMemory_v2
    c_nvmlGpmMetricsGet_t = pynvml.c_nvmlGpmMetricsGet_t

    def __getattr__(self, name: str) -> int:
        """The real ``NVML_*`` constants (error codes, clock types, policies, field ids)."""
        if name.startswith("NVML_"):
            return int(getattr(pynvml, name))
        raise AttributeError(name)

    def __init__(
        self,
        gpus: list[dict[str, str]],
        clock: Callable[[], datetime],
        mig: list[MigDevice] | None = None,
        processes: list[dict[str, str]] | None = None,
        pmon: list[list[PmonLine]] | None = None,
    ) -> None:
        self.gpus = gpus
        self.mig = mig or []
        self.processes = processes or []
        self.pmon = pmon
        self.clock = clock
        self.loaded_at = clock()
        self.initialised = False
        self.init_error: int | None = None
        self.gpu_errors: dict[int, int] = {}
        self.call_errors: dict[tuple[int, str], int] = {}
        self.missing_functions: set[str] = set()
        self.gpm: dict[GpmTarget, list[GpmPhase]] | None = None
        self.gpm_samples: dict[int, tuple[ctypes.c_uint64, tuple[GpmTarget, float] | None]] = {}

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

    def nvmlDeviceGetName(self, handle: FakeHandle | FakeMigHandle) -> str:
        name = self._cell(handle, "nvmlDeviceGetName", "name")
        return f"{name} MIG {handle.device.profile}" if isinstance(handle, FakeMigHandle) else name

    def nvmlDeviceGetUUID(self, handle: FakeHandle | FakeMigHandle) -> str:
        if isinstance(handle, FakeMigHandle):
            return handle.device.uuid
        return self._cell(handle, "nvmlDeviceGetUUID", "uuid")

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle | FakeMigHandle) -> SimpleNamespace:
        function = "nvmlDeviceGetUtilizationRates"
        if isinstance(handle, FakeMigHandle):  # NVML has no utilisation per MIG device
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        gpu = self._number(handle, function, "utilization.gpu", "%")
        memory = self._number(handle, function, "utilization.memory", "%")
        return SimpleNamespace(gpu=int(gpu), memory=int(memory))

    def nvmlDeviceGetMemoryInfo(
        self, handle: FakeHandle | FakeMigHandle, version: int | None = None
    ) -> SimpleNamespace:
        function = "nvmlDeviceGetMemoryInfo_v2" if version else "nvmlDeviceGetMemoryInfo"
        if isinstance(handle, FakeMigHandle):
            device = handle.device
            used, total = device.used_mib * MIB, device.total_mib * MIB
            return SimpleNamespace(version=version, total=total, reserved=0, used=used, free=total - used)
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
        field = {pynvml.NVML_CLOCK_SM: "clocks.current.sm", pynvml.NVML_CLOCK_MEM: "clocks.current.memory"}
        if clock_type not in field:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(self._number(handle, "nvmlDeviceGetClockInfo", field[clock_type], "MHz"))

    def nvmlDeviceGetViolationStatus(self, handle: FakeHandle, policy: int) -> SimpleNamespace:
        """DERIVED: power -> ``clocks_event_reasons_counters.sw_power_cap``; thermal -> the sum of
        ``….sw_thermal_slowdown`` and ``….hw_thermal_slowdown`` (microseconds in the capture, ns here)."""
        reasons = {
            pynvml.NVML_PERF_POLICY_POWER: ("sw_power_cap",),
            pynvml.NVML_PERF_POLICY_THERMAL: ("sw_thermal_slowdown", "hw_thermal_slowdown"),
        }[policy]
        fields = [f"clocks_event_reasons_counters.{reason}" for reason in reasons]
        microseconds = sum(self._number(handle, "nvmlDeviceGetViolationStatus", f, "us") for f in fields)
        return SimpleNamespace(referenceTime=0, violationTime=int(microseconds * 1000))

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeHandle, error_type: int, counter_type: int) -> int:
        if counter_type != pynvml.NVML_VOLATILE_ECC:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        kind = "corrected" if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else "uncorrected"
        return int(self._number(handle, "nvmlDeviceGetTotalEccErrors", f"ecc.errors.{kind}.volatile.total", ""))

    def nvmlDeviceGetRemappedRows(self, handle: FakeHandle) -> tuple[int, int, int, int]:
        function = "nvmlDeviceGetRemappedRows"
        correctable = int(self._number(handle, function, "remapped_rows.correctable", ""))
        uncorrectable = int(self._number(handle, function, "remapped_rows.uncorrectable", ""))
        pending, failure = (self._cell(handle, function, f"remapped_rows.{f}") for f in ("pending", "failure"))
        return correctable, uncorrectable, int(pending == "Yes"), int(failure == "Yes")

    def nvmlDeviceGetPcieThroughput(self, handle: FakeHandle, counter: int) -> int:
        """KB/s from the row's ``pci.rx_util``/``pci.tx_util`` (XML captures); query-gpu captures have no such
        field: not supported."""
        field = "pci.rx_util" if counter == pynvml.NVML_PCIE_UTIL_RX_BYTES else "pci.tx_util"
        return int(self._number(handle, "nvmlDeviceGetPcieThroughput", field, "KB/s"))

    def nvmlDeviceGetFieldValues(self, handle: FakeHandle, field_ids: list[int]) -> list[SimpleNamespace]:
        """NVLink throughput is absent from the captures: every field answers NOT_SUPPORTED, as on a GPU without
        NVLink."""
        self._check_initialised()
        self._check_injected(handle.index, "nvmlDeviceGetFieldValues")
        unsupported = pynvml.NVML_ERROR_NOT_SUPPORTED
        return [SimpleNamespace(fieldId=f, nvmlReturn=unsupported, value=SimpleNamespace(ullVal=0)) for f in field_ids]

    def nvmlDeviceGetMigMode(self, handle: FakeHandle) -> tuple[int, int]:
        mode = self._cell(handle, "nvmlDeviceGetMigMode", "mig.mode.current")
        enabled = int(mode == "Enabled")
        return enabled, enabled

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeHandle) -> int:
        self._check_injected(handle.index, "nvmlDeviceGetMaxMigDeviceCount")
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeHandle, position: int) -> FakeMigHandle:
        self._check_injected(handle.index, "nvmlDeviceGetMigDeviceHandleByIndex")
        for device in self.mig:
            if device.parent_index == handle.index and device.position == position:
                return FakeMigHandle(handle.index, device)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetGpuInstanceId(self, handle: FakeMigHandle) -> int:
        return handle.device.gpu_instance_id

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[SimpleNamespace]:
        """The capture's compute apps on this GPU (by UUID); ``usedGpuMemory`` in bytes; ``gpuInstanceId`` where
        the capture gives one (XML), else None."""
        uuid = self._cell(handle, "nvmlDeviceGetComputeRunningProcesses", "uuid")
        return [
            SimpleNamespace(
                pid=int(p["pid"]),
                usedGpuMemory=int(p["used_gpu_memory"].split()[0]) * MIB,
                gpuInstanceId=int(p["gpu_instance_id"]) if p.get("gpu_instance_id", "").isdigit() else None,
            )
            for p in self.processes
            if p["gpu_uuid"] == uuid
        ]

    def nvmlDeviceGetProcessUtilization(self, handle: FakeHandle, timeStamp: int) -> list[SimpleNamespace]:
        """The pmon records of this GPU stamped after ``timeStamp`` (microseconds) and up to now (module docstring)."""
        self._check_initialised()
        self._check_injected(handle.index, "nvmlDeviceGetProcessUtilization")
        if not self.pmon:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        start = round(self.loaded_at.timestamp() * 1_000_000)
        newest = (round(self.clock().timestamp() * 1_000_000) - start) // 1_000_000
        first = max(1, (timeStamp - start) // 1_000_000 + 1)
        records = [
            SimpleNamespace(pid=line.pid, timeStamp=start + k * 1_000_000, smUtil=line.sm, memUtil=line.mem or 0)
            for k in range(first, newest + 1)
            for line in self.pmon[(k - 1) % len(self.pmon)]
            if line.gpu == handle.index and line.sm is not None
        ]
        if not records:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return records

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

    def _cell(self, handle: FakeHandle | FakeMigHandle, function: str, field: str) -> str:
        """The capture's cell for ``field`` of this GPU, after the injected errors; a field the capture does not
        have, or shows as ``[N/A]``/``[Not Supported]``, raises NOT_SUPPORTED."""
        self._check_initialised()
        self._check_injected(handle.index, function)
        cell = self.gpus[handle.index].get(field, "[N/A]")
        if cell in NOT_SUPPORTED_CELLS:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return cell

    def _number(self, handle: FakeHandle | FakeMigHandle, function: str, field: str, unit: str) -> float:
        """The cell as a number; the unit nvidia-smi prints after it must be ``unit`` ("" for none)."""
        number, _, printed_unit = self._cell(handle, function, field).partition(" ")
        if printed_unit != unit:
            raise ValueError(f"{field}: unit {printed_unit!r}, expected {unit!r}")
        return float(number)

    def _milliwatts(self, handle: FakeHandle, function: str) -> int:
        return round(self._number(handle, function, "power.draw", "W") * 1000)


def fake_nvml_from_capture(path: Path, state: str, clock: Callable[[], datetime]) -> FakeNvml:
    """A fake ``pynvml`` whose GPUs are the ``state`` (``idle`` or ``load``) query-gpu rows of capture ``path``,
    with its MIG devices, compute processes and their pmon utilisation."""
    rows, processes = query_gpu_rows(path, state), compute_apps(path, state)
    return FakeNvml(rows, clock, mig_devices(path, state), processes, pmon_rounds(path, state))
