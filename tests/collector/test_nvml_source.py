"""NvmlSource against a fake pynvml replaying real nvidia-smi captures (H100, H200, L40S; idle and load)."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest

from collector.contract import metric_names as m
from collector.contract.sample import Sample
from collector.sources.nvml import NvmlSource
from tests.support.fake_pynvml import CAPTURES, FakeNvml, ManualClock, fake_nvml_from_capture, query_gpu_rows
from tests.support.fake_pynvml_xml import XML_CAPTURES, fake_nvml_from_xml

H100 = "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
H100_MIG = "linux-x86_64__nvidia-h100-mig__590.48.01.txt"
H200 = "linux-x86_64__nvidia-h200__590.48.01.txt"
L40S = "linux-x86_64__nvidia-l40s__595.80.txt"
MIB = 2**20
MASKED_UUID = "GPU-00000000-0000-0000-0000-000000000000"
SECONDS_SINCE_LOAD = 60.0

# Literals copied by hand from the captures' query-gpu rows, so a parser bug shared by the fake and the
# expectations below cannot cancel out.
PINNED: dict[tuple[str, str], tuple[str, dict[str, float]]] = {
    (H100, "load"): (
        "NVIDIA H100 80GB HBM3",
        {
            m.GPU_UTILIZATION: 1.0,
            m.GPU_MEMORY_UTILIZATION: 0.11,
            m.GPU_MEMORY_USED: 19818 * MIB,
            m.GPU_MEMORY_TOTAL: 81559 * MIB,
            m.GPU_POWER: 631.95,
            m.GPU_ENERGY: 631.95 * SECONDS_SINCE_LOAD,
            m.GPU_TEMPERATURE: 59.0,
            m.GPU_SM_CLOCK: 1980e6,
            m.GPU_CLOCKS_EVENT_REASONS: 0.0,
        },
    ),
    (H100, "idle"): (
        "NVIDIA H100 80GB HBM3",
        {m.GPU_UTILIZATION: 0.0, m.GPU_POWER: 69.85, m.GPU_SM_CLOCK: 345e6, m.GPU_CLOCKS_EVENT_REASONS: 1.0},
    ),
    (H200, "load"): (
        "NVIDIA H200",
        {m.GPU_MEMORY_USED: 32362 * MIB, m.GPU_MEMORY_TOTAL: 143771 * MIB, m.GPU_POWER: 627.40, m.GPU_TEMPERATURE: 52},
    ),
    (H200, "idle"): ("NVIDIA H200", {m.GPU_MEMORY_USED: 0.0, m.GPU_POWER: 77.71, m.GPU_TEMPERATURE: 28.0}),
    (L40S, "load"): (
        "NVIDIA L40S",
        {m.GPU_UTILIZATION: 0.09, m.GPU_MEMORY_USED: 1235 * MIB, m.GPU_POWER: 110.23, m.GPU_SM_CLOCK: 2520e6},
    ),
    (L40S, "idle"): ("NVIDIA L40S", {m.GPU_UTILIZATION: 1.0, m.GPU_MEMORY_TOTAL: 46068 * MIB, m.GPU_POWER: 144.97}),
}


@pytest.fixture
def captures(shared_data: Path) -> Path:
    return shared_data / CAPTURES


def number(row: dict[str, str], field: str, unit: str) -> float:
    """A query-gpu cell such as ``631.95 W`` as a number, checking the unit nvidia-smi printed."""
    value, _, printed_unit = row[field].partition(" ")
    assert printed_unit == unit, f"{field}: {row[field]!r}"
    return float(value)


def expected_values(row: dict[str, str], seconds_since_load: float) -> dict[str, float]:
    """What NvmlSource must report for one query-gpu row, in base units."""
    extra: dict[str, float] = {}
    for metric, field, unit, scale in (
        (m.GPU_MEMORY_CLOCK, "clocks.current.memory", "MHz", 1e6),
        (m.GPU_ECC_CORRECTED, "ecc.errors.corrected.volatile.total", "", 1),
        (m.GPU_ECC_UNCORRECTED, "ecc.errors.uncorrected.volatile.total", "", 1),
        (m.GPU_POWER_VIOLATION, "clocks_event_reasons_counters.sw_power_cap", "us", 1e-6),
    ):
        if not row[field].startswith("["):  # [N/A]: the series is absent
            extra[metric] = number(row, field, unit) * scale
    if not row["remapped_rows.correctable"].startswith("["):
        extra[m.GPU_REMAPPED_CORRECTABLE] = number(row, "remapped_rows.correctable", "")
        extra[m.GPU_REMAPPED_UNCORRECTABLE] = number(row, "remapped_rows.uncorrectable", "")
        extra[m.GPU_REMAPPED_PENDING] = float(row["remapped_rows.pending"] == "Yes")
        extra[m.GPU_REMAPPED_FAILURE] = float(row["remapped_rows.failure"] == "Yes")
    thermal = [f"clocks_event_reasons_counters.{r}" for r in ("sw_thermal_slowdown", "hw_thermal_slowdown")]
    if not any(row[f].startswith("[") for f in thermal):
        extra[m.GPU_THERMAL_VIOLATION] = sum(number(row, f, "us") for f in thermal) * 1e-6
    return extra | {
        m.GPU_UP: 1.0,
        m.GPU_UTILIZATION: number(row, "utilization.gpu", "%") / 100,
        m.GPU_MEMORY_UTILIZATION: number(row, "utilization.memory", "%") / 100,
        m.GPU_MEMORY_USED: number(row, "memory.used", "MiB") * MIB,
        m.GPU_MEMORY_TOTAL: number(row, "memory.total", "MiB") * MIB,
        m.GPU_POWER: number(row, "power.draw", "W"),
        m.GPU_ENERGY: number(row, "power.draw", "W") * seconds_since_load,
        m.GPU_TEMPERATURE: number(row, "temperature.gpu", ""),
        m.GPU_SM_CLOCK: number(row, "clocks.current.sm", "MHz") * 1e6,
        m.GPU_CLOCKS_EVENT_REASONS: float(int(row["clocks_event_reasons.active"], 16)),
    }


def whole_gpus(samples: list[Sample]) -> list[Sample]:
    """The samples of whole GPUs (not MIG instances, not processes)."""
    return [s for s in samples if s.entity == "gpu" and s.labels["mig_profile"] == ""]


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "collector.sources.nvml" and r.levelno >= logging.WARNING
    ]


def one_gpu_each(captures: Path, clock: ManualClock) -> FakeNvml:
    """A three-GPU fake: GPU 0 is the H100, 1 the H200, 2 the L40S, all under load."""
    return FakeNvml([query_gpu_rows(captures / name, "load")[0] for name in (H100, H200, L40S)], clock)


@pytest.mark.parametrize(("capture", "state"), sorted(PINNED))
def test_values_are_the_capture_in_base_units(captures: Path, capture: str, state: str) -> None:
    clock = ManualClock()
    fake = fake_nvml_from_capture(captures / capture, state, clock)
    source = NvmlSource(nvml=fake, clock=clock)
    clock.advance(SECONDS_SINCE_LOAD)

    [sample] = whole_gpus(source.collect())

    [row] = query_gpu_rows(captures / capture, state)
    model, pinned = PINNED[(capture, state)]
    assert (sample.entity, sample.job_id) == ("gpu", None)
    assert sample.labels == {"gpu": "0", "uuid": MASKED_UUID, "model": model, "mig_profile": "", "parent_uuid": ""}
    assert sample.values == pytest.approx(expected_values(row, SECONDS_SINCE_LOAD), rel=1e-12)
    assert {key: sample.values[key] for key in pinned} == pytest.approx(pinned, rel=1e-12)
    assert sample.timestamp == clock.now and sample.timestamp.utcoffset() == timedelta(0)


def test_energy_counter_grows_with_the_power_over_time(captures: Path) -> None:
    clock = ManualClock()
    source = NvmlSource(nvml=fake_nvml_from_capture(captures / H100, "load", clock), clock=clock)
    clock.advance(10)
    first = source.collect()[0].values[m.GPU_ENERGY]
    clock.advance(30)
    second = source.collect()[0].values[m.GPU_ENERGY]
    assert first == pytest.approx(631.95 * 10)
    assert second - first == pytest.approx(631.95 * 30)


def test_mig_capture_utilization_not_supported_is_absent(captures: Path, caplog: pytest.LogCaptureFixture) -> None:
    # With MIG enabled, nvidia-smi prints utilization as [N/A]: NVML answers NOT_SUPPORTED for the whole GPU.
    clock = ManualClock()
    [row] = query_gpu_rows(captures / H100_MIG, "load")
    assert (row["utilization.gpu"], row["utilization.memory"]) == ("[N/A]", "[N/A]")

    samples = NvmlSource(nvml=fake_nvml_from_capture(captures / H100_MIG, "load", clock), clock=clock).collect()
    [sample] = whole_gpus(samples)

    assert m.GPU_UTILIZATION not in sample.values
    assert m.GPU_MEMORY_UTILIZATION not in sample.values
    assert sample.values[m.GPU_MEMORY_USED] == 11125 * MIB
    assert sample.values[m.GPU_POWER] == pytest.approx(433.78)
    assert sample.values[m.GPU_SM_CLOCK] == 1980e6
    assert warnings(caplog) == []


def test_one_not_supported_field_is_absent_and_the_others_are_read(captures: Path) -> None:
    clock = ManualClock()
    fake = fake_nvml_from_capture(captures / L40S, "load", clock)
    fake.call_errors[(0, "nvmlDeviceGetPowerUsage")] = pynvml.NVML_ERROR_NOT_SUPPORTED

    [sample] = whole_gpus(NvmlSource(nvml=fake, clock=clock).collect())

    [row] = query_gpu_rows(captures / L40S, "load")
    expected = expected_values(row, 0.0)
    del expected[m.GPU_POWER]
    assert sample.values == pytest.approx(expected)


def test_other_field_error_leaves_the_field_out_with_a_warning(
    captures: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    fake = fake_nvml_from_capture(captures / H200, "load", clock)
    fake.call_errors[(0, "nvmlDeviceGetTotalEnergyConsumption")] = pynvml.NVML_ERROR_NO_PERMISSION

    [sample] = whole_gpus(NvmlSource(nvml=fake, clock=clock).collect())

    assert m.GPU_ENERGY not in sample.values
    assert sample.values[m.GPU_POWER] == pytest.approx(627.40)
    [message] = warnings(caplog)
    assert "GPU 0" in message and "energy" in message and "Insufficient Permissions" in message


def test_old_driver_fallbacks_for_clocks_reasons_and_memory(captures: Path) -> None:
    # Drivers before R535 lack nvmlDeviceGetCurrentClocksEventReasons; very old ones nvmlDeviceGetMemoryInfo_v2.
    clock = ManualClock()
    fake = fake_nvml_from_capture(captures / H100, "idle", clock)
    fake.missing_functions = {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetMemoryInfo_v2"}

    [sample] = whole_gpus(NvmlSource(nvml=fake, clock=clock).collect())

    [row] = query_gpu_rows(captures / H100, "idle")
    assert sample.values[m.GPU_CLOCKS_EVENT_REASONS] == 1.0  # 0x...01, nvmlClocksEventReasonGpuIdle
    # the v1 struct counts driver-reserved memory as used
    reserved = number(row, "memory.reserved", "MiB") * MIB
    assert sample.values[m.GPU_MEMORY_USED] == number(row, "memory.used", "MiB") * MIB + reserved
    assert sample.values[m.GPU_MEMORY_TOTAL] == 81559 * MIB


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED])
def test_no_driver_gives_no_data_one_warning_and_init_is_retried(
    captures: Path, caplog: pytest.LogCaptureFixture, code: int
) -> None:
    caplog.set_level(logging.DEBUG, logger="collector.sources.nvml")
    clock = ManualClock()
    fake = fake_nvml_from_capture(captures / H100, "load", clock)
    fake.init_error = code
    source = NvmlSource(nvml=fake, clock=clock)

    assert source.collect() == []
    assert source.collect() == []
    [message] = warnings(caplog)
    assert message.startswith(f"NVML unavailable ({pynvml.NVMLError(code)})")

    fake.init_error = None
    [sample] = whole_gpus(source.collect())
    assert sample.labels["model"] == "NVIDIA H100 80GB HBM3"
    assert len(warnings(caplog)) == 1


def test_other_init_error_is_raised(captures: Path) -> None:
    clock = ManualClock()
    fake = fake_nvml_from_capture(captures / H100, "load", clock)
    fake.init_error = pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH
    with pytest.raises(pynvml.NVMLError) as raised:
        NvmlSource(nvml=fake, clock=clock).collect()
    assert raised.value.value == pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_UNKNOWN, pynvml.NVML_ERROR_TIMEOUT])
def test_lost_gpu_reports_gpu_up_0_the_others_are_read_and_nvml_is_reinitialised(
    captures: Path, caplog: pytest.LogCaptureFixture, code: int
) -> None:
    clock = ManualClock()
    fake = one_gpu_each(captures, clock)
    source = NvmlSource(nvml=fake, clock=clock)
    assert len(whole_gpus(source.collect())) == 3
    fake.gpu_errors[1] = code

    samples = whole_gpus(source.collect())

    assert [(s.labels["gpu"], s.labels["model"], s.values[m.GPU_UP]) for s in samples] == [
        ("0", "NVIDIA H100 80GB HBM3", 1.0),
        ("1", "NVIDIA H200", 0.0),  # labels as last seen at that index
        ("2", "NVIDIA L40S", 1.0),
    ]
    assert samples[1].values == {m.GPU_UP: 0.0}
    assert samples[0].values[m.GPU_POWER] == pytest.approx(631.95)
    assert samples[2].values[m.GPU_POWER] == pytest.approx(110.23)
    [message] = warnings(caplog)
    assert "GPU 1 did not answer" in message and str(pynvml.NVMLError(code)) in message
    del fake.gpu_errors[1]
    shutdowns: list[bool] = []
    shutdown = fake.nvmlShutdown
    fake.nvmlShutdown = lambda: shutdowns.append(True) or shutdown()  # type: ignore[method-assign]
    recovered = whole_gpus(source.collect())
    assert shutdowns == [True], "the next cycle shuts NVML down and initialises it afresh"
    assert fake.initialised and [s.values[m.GPU_UP] for s in recovered] == [1.0, 1.0, 1.0]


def test_a_gpu_lost_before_it_was_ever_read_has_empty_identity_labels(captures: Path) -> None:
    clock = ManualClock()
    fake = one_gpu_each(captures, clock)
    fake.gpu_errors[2] = pynvml.NVML_ERROR_GPU_IS_LOST
    lost = whole_gpus(NvmlSource(nvml=fake, clock=clock).collect())[2]
    assert (lost.labels, lost.values) == (
        {"gpu": "2", "uuid": "", "model": "", "mig_profile": "", "parent_uuid": ""},
        {m.GPU_UP: 0.0},
    )


def test_fatal_error_in_the_middle_of_a_gpu_marks_the_whole_gpu_down(
    captures: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    fake = one_gpu_each(captures, clock)
    fake.call_errors[(1, "nvmlDeviceGetTemperature")] = pynvml.NVML_ERROR_GPU_IS_LOST

    samples = whole_gpus(NvmlSource(nvml=fake, clock=clock).collect())

    assert [(s.labels["gpu"], s.values[m.GPU_UP]) for s in samples] == [("0", 1.0), ("1", 0.0), ("2", 1.0)]
    assert samples[1].values == {m.GPU_UP: 0.0}, "no half-read GPU"
    [message] = warnings(caplog)
    assert "GPU 1 did not answer" in message and "GPU is lost" in message


def test_mig_instances_are_gpus_with_profile_and_parent(captures: Path) -> None:
    clock = ManualClock()
    samples = NvmlSource(nvml=fake_nvml_from_capture(captures / H100_MIG, "load", clock), clock=clock).collect()
    instances = [s for s in samples if s.entity == "gpu" and s.labels["mig_profile"]]
    # nvidia-smi -L: 3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb; default table "11091MiB / 40448MiB", "17MiB / 20096MiB"...
    assert [(s.labels["mig_profile"], s.labels["uuid"]) for s in instances] == [
        ("3g.40gb", "MIG-00000000-0000-0000-0000-000000000000"),
        ("2g.20gb", "MIG-00000001-0000-0000-0000-000000000001"),
        ("1g.10gb", "MIG-00000002-0000-0000-0000-000000000002"),
        ("1g.10gb", "MIG-00000003-0000-0000-0000-000000000003"),
    ]
    assert all(s.labels["parent_uuid"] == MASKED_UUID and s.labels["gpu"] == "0" for s in instances)
    assert instances[0].values == {m.GPU_UP: 1.0, m.GPU_MEMORY_USED: 11091 * MIB, m.GPU_MEMORY_TOTAL: 40448 * MIB}
    assert instances[1].values[m.GPU_MEMORY_USED] == 17 * MIB
    assert m.GPU_UTILIZATION not in instances[0].values, "NVML has no utilisation per MIG device"


def test_running_compute_processes_with_their_memory(captures: Path) -> None:
    clock = ManualClock()
    samples = NvmlSource(nvml=fake_nvml_from_capture(captures / H100_MIG, "load", clock), clock=clock).collect()
    processes = [s for s in samples if s.entity == "gpu_process"]
    # query-compute-apps: 21180 2296 MiB, 21181 1272 MiB, 21198 7484 MiB, all on the parent GPU's UUID
    assert [(s.labels, s.values) for s in processes] == [
        ({"gpu": "0", "uuid": MASKED_UUID, "pid": "21180"}, {m.GPU_PROCESS_MEMORY_USED: 2296 * MIB}),
        ({"gpu": "0", "uuid": MASKED_UUID, "pid": "21181"}, {m.GPU_PROCESS_MEMORY_USED: 1272 * MIB}),
        ({"gpu": "0", "uuid": MASKED_UUID, "pid": "21198"}, {m.GPU_PROCESS_MEMORY_USED: 7484 * MIB}),
    ]
    idle = NvmlSource(nvml=fake_nvml_from_capture(captures / L40S, "idle", clock), clock=clock).collect()
    assert [s for s in idle if s.entity == "gpu_process"] == [], "no compute apps ran in the idle capture"


def test_l40s_power_cap_throttle_time_and_memory_clock(captures: Path) -> None:
    clock = ManualClock()
    [sample] = whole_gpus(
        NvmlSource(nvml=fake_nvml_from_capture(captures / L40S, "load", clock), clock=clock).collect()
    )
    # clocks_event_reasons_counters.sw_power_cap "204642816 us"; clocks.current.memory "9001 MHz"
    assert sample.values[m.GPU_POWER_VIOLATION] == pytest.approx(204.642816)
    assert sample.values[m.GPU_MEMORY_CLOCK] == 9001e6
    assert sample.values[m.GPU_REMAPPED_PENDING] == 0.0
    assert m.GPU_PCIE_RX not in sample.values and m.GPU_NVLINK_RX not in sample.values, "not in the capture"


def test_real_pynvml_on_a_host_without_nvidia_driver(caplog: pytest.LogCaptureFixture) -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        if exc.value not in (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED):
            raise
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this host has an NVIDIA driver")

    source = NvmlSource()

    assert source.collect() == []
    assert source.collect() == []
    [message] = warnings(caplog)
    assert message.startswith("NVML unavailable")


def _xml_samples(shared_data: Path, name: str) -> list[Sample]:
    clock = ManualClock()
    return NvmlSource(fake_nvml_from_xml(shared_data / XML_CAPTURES / name, clock), clock).collect()


def test_a100_mig_xml(shared_data: Path) -> None:
    samples = _xml_samples(shared_data, "a100-sxm4-v12.xml")
    (gpu,) = whole_gpus(samples)
    parent = "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert gpu.labels["uuid"] == parent and gpu.labels["model"] == "NVIDIA A100-SXM4-80GB"
    # <power_draw>67.03 W</power_draw>, <gpu_temp>27 C</gpu_temp>, <sm_clock>1275 MHz</sm_clock>,
    # <tx_util>4000 KB/s</tx_util>, <rx_util>0 KB/s</rx_util>, <gpu_util>N/A</gpu_util> (MIG mode)
    assert gpu.values[m.GPU_POWER] == pytest.approx(67.03)
    assert gpu.values[m.GPU_TEMPERATURE] == 27.0
    assert gpu.values[m.GPU_SM_CLOCK] == 1275e6
    assert (gpu.values[m.GPU_PCIE_TX], gpu.values[m.GPU_PCIE_RX]) == (4000 * 1024, 0.0)
    assert m.GPU_UTILIZATION not in gpu.values
    instances = [s for s in samples if s.entity == "gpu" and s.labels["mig_profile"]]
    assert len(instances) == 4 and {s.labels["parent_uuid"] for s in instances} == {parent}
    # each <mig_device>: 14 SMs, <total>19968 MiB</total>, <used>12 MiB</used>
    assert {s.labels["mig_profile"] for s in instances} == {"1g.20gb"}
    assert instances[0].values == {m.GPU_UP: 1.0, m.GPU_MEMORY_USED: 12 * MIB, m.GPU_MEMORY_TOTAL: 19968 * MIB}


def test_a10g_and_t4_xml(shared_data: Path) -> None:
    (a10g,) = whole_gpus(_xml_samples(shared_data, "a10g.xml"))
    assert a10g.labels["uuid"] == "GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94"
    assert (a10g.values[m.GPU_POWER], a10g.values[m.GPU_TEMPERATURE]) == (pytest.approx(25.58), 17.0)
    assert a10g.values[m.GPU_REMAPPED_PENDING] == 0.0  # <remapped_row_pending>No</remapped_row_pending>
    t4_samples = _xml_samples(shared_data, "tesla-t4.xml")
    (t4,) = whole_gpus(t4_samples)
    assert (t4.values[m.GPU_POWER], t4.values[m.GPU_TEMPERATURE]) == (pytest.approx(26.78), 40.0)
    # processes: Xorg (type G, left out: not a compute process) and pid 5762, type C, 1005 MiB
    assert [(s.labels["pid"], s.values) for s in t4_samples if s.entity == "gpu_process"] == [
        ("5762", {m.GPU_PROCESS_MEMORY_USED: 1005 * MIB})
    ]


def test_h200_mig_compute_instances_share_their_gpu_instance(captures: Path) -> None:
    clock = ManualClock()
    fake = fake_nvml_from_capture(captures / "linux-x86_64__nvidia-h200-mig__590.48.01.txt", "load", clock)
    instances = [s for s in NvmlSource(fake, clock).collect() if s.entity == "gpu" and s.labels["mig_profile"]]
    # nvidia-smi -L: compute instances 1c.3g.71gb and 2c.3g.71gb of one 3g.71gb GPU instance; 2g.35gb; 1g.18gb x2
    assert [s.labels["mig_profile"] for s in instances] == ["1c.3g.71gb", "2c.3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"]
    assert instances[0].values[m.GPU_MEMORY_TOTAL] == instances[1].values[m.GPU_MEMORY_TOTAL] == 71424 * MIB


def test_nvlink_counters_are_summed_kib_in_bytes_and_absent_without_nvlink(captures: Path) -> None:
    clock = ManualClock()
    fake = fake_nvml_from_capture(captures / H100, "load", clock)
    (without,) = whole_gpus(NvmlSource(fake, clock).collect())
    assert m.GPU_NVLINK_RX not in without.values, "every field NOT_SUPPORTED: no NVLink series"

    def field_values(handle: object, field_ids: list[int]) -> list[SimpleNamespace]:
        kib = {pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: 1_500, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: 2_500}
        return [SimpleNamespace(fieldId=f, nvmlReturn=pynvml.NVML_SUCCESS, value=SimpleNamespace(ullVal=kib[f]))
                for f in field_ids]  # fmt: skip

    fake.nvmlDeviceGetFieldValues = field_values  # type: ignore[method-assign]
    (with_nvlink,) = whole_gpus(NvmlSource(fake, clock).collect())
    assert (with_nvlink.values[m.GPU_NVLINK_RX], with_nvlink.values[m.GPU_NVLINK_TX]) == (1_500 * 1024, 2_500 * 1024)


def _process_sm(samples: list[Sample]) -> dict[str, float | None]:
    """pid -> its SM utilisation ratio, None where the key is absent."""
    return {s.labels["pid"]: s.values.get(m.GPU_PROCESS_SM_UTILIZATION) for s in samples if s.entity == "gpu_process"}


def test_per_process_sm_utilisation_from_the_h100_pmon(captures: Path) -> None:
    clock = ManualClock()
    fake = fake_nvml_from_capture(captures / H100, "load", clock)
    source = NvmlSource(fake, clock)
    # no sample period has passed since the fake's "driver load": NOT_FOUND, which tells nothing
    assert _process_sm(source.collect()) == {"11327": None, "11328": None, "11345": None}
    clock.advance(10)
    # load :: pmon: 11345 gpu_burn "99" under sm in every round; memhog 11327 and 11328 "-" (no sample: 0)
    assert _process_sm(source.collect()) == {"11327": 0.0, "11328": 0.0, "11345": 0.99}
    # read again at once: nothing since the last timestamp seen (NOT_FOUND), not the same samples twice
    assert _process_sm(source.collect()) == {"11327": None, "11328": None, "11345": None}
    clock.advance(3)
    assert _process_sm(source.collect())["11345"] == 0.99


def test_process_sm_utilisation_is_the_mean_of_the_new_samples(captures: Path) -> None:
    clock = ManualClock()
    fake = fake_nvml_from_capture(captures / H100, "load", clock)
    asked: list[int] = []
    answers = [
        [SimpleNamespace(pid=11345, timeStamp=5_000_000, smUtil=90), SimpleNamespace(pid=11345, timeStamp=6_000_000,
         smUtil=40), SimpleNamespace(pid=11327, timeStamp=6_000_000, smUtil=3)],
        [SimpleNamespace(pid=11345, timeStamp=6_000_000, smUtil=100), SimpleNamespace(pid=11345, timeStamp=7_000_000,
         smUtil=20)],
    ]  # fmt: skip

    def process_utilization(handle: object, last_seen: int) -> list[SimpleNamespace]:
        asked.append(last_seen)
        return answers[len(asked) - 1]

    fake.nvmlDeviceGetProcessUtilization = process_utilization  # type: ignore[method-assign]
    source = NvmlSource(fake, clock)
    assert _process_sm(source.collect()) == {"11327": 0.03, "11328": 0.0, "11345": 0.65}
    assert _process_sm(source.collect()) == {"11327": 0.0, "11328": 0.0, "11345": 0.2}, "the 6 s sample was seen"
    assert asked == [0, 6_000_000]


@pytest.mark.parametrize(
    ("code", "warned"),
    [(pynvml.NVML_ERROR_NOT_SUPPORTED, False), (pynvml.NVML_SUCCESS, False), (pynvml.NVML_ERROR_NO_PERMISSION, True)],
)
def test_process_sm_utilisation_left_out_when_nvml_cannot_tell(
    captures: Path, caplog: pytest.LogCaptureFixture, code: int, warned: bool
) -> None:
    clock = ManualClock()
    fake = fake_nvml_from_capture(captures / H100, "load", clock)
    fake.call_errors[(0, "nvmlDeviceGetProcessUtilization")] = code
    clock.advance(10)
    samples = NvmlSource(fake, clock).collect()
    processes = [s for s in samples if s.entity == "gpu_process"]
    assert len(processes) == 3 and all(list(s.values) == [m.GPU_PROCESS_MEMORY_USED] for s in processes)
    assert len(warnings(caplog)) == int(warned)


def test_no_process_sm_utilisation_on_a_mig_gpu(captures: Path) -> None:
    clock = ManualClock()
    fake = fake_nvml_from_capture(captures / H100_MIG, "load", clock)
    calls: list[int] = []
    fake.nvmlDeviceGetProcessUtilization = lambda handle, last: calls.append(last) or []  # type: ignore[method-assign]
    clock.advance(10)
    samples = NvmlSource(fake, clock).collect()
    assert _process_sm(samples) == {"21180": None, "21181": None, "21198": None}
    assert calls == [], "records name no MIG instance: not asked"
