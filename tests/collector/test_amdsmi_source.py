"""The amdsmi source against a stand-in for AMD SMI's Python package (tests/support/fake_amdsmi.py says which values
come from real pastes and which are written by hand): readings in base units, N/A never 0, what a package reports
once marked on the device that reports it, one device's failure not stopping the others."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest

from collector.contract import metric_names as m
from collector.contract.sample import Package
from collector.contract.wire import IngestBatch, batch_dict, columnar
from collector.node import NodeConfig, build_source
from collector.sources.amdsmi import DIE_PACKAGE_FIELDS, PARTITION_PACKAGE_FIELDS, AmdSmiSource
from tests.support.fake_amdsmi import (
    GIB,
    NA,
    RESOLUTION_UJ,
    STATUS_DRIVER_NOT_LOADED,
    STATUS_NOT_SUPPORTED,
    FakeAmdSmi,
    mi210,
    mi250x,
    mi300x_cpx,
    mi300x_spx,
)

NOW = datetime(2026, 11, 22, 7, 0, tzinfo=UTC)


def _source(fake: FakeAmdSmi) -> AmdSmiSource:
    return AmdSmiSource(fake, clock=lambda: NOW)


def _gpus(source: AmdSmiSource) -> list:
    return [s for s in source.collect() if s.entity == "gpu"]


def test_mi300x_spx_reads_every_value_in_base_units() -> None:
    fake = FakeAmdSmi([mi300x_spx()])
    samples = _source(fake).collect()
    (gpu,) = [s for s in samples if s.entity == "gpu"]
    assert gpu.labels == {"gpu": "0", "uuid": "4cff74b5-0000-1000-80e4-ba4b16fd1c1e", "model": "AMD Instinct MI300X",
                          "mig_profile": "", "parent_uuid": ""}  # fmt: skip
    assert gpu.values == {
        m.GPU_UP: 1.0,
        m.GPU_UTILIZATION: 0.01,
        m.GPU_MEMORY_UTILIZATION: 0.0,
        m.GPU_POWER: 182.0,
        m.GPU_ENERGY: pytest.approx(9_830_400_000 * RESOLUTION_UJ / 1e6),
        m.GPU_TEMPERATURE: 39.0,
        m.GPU_MEMORY_TOTAL: 192.0 * GIB,
        m.GPU_MEMORY_USED: 283_115_520.0,
        m.GPU_SM_CLOCK: 132e6,
        m.GPU_MEMORY_CLOCK: 900e6,
        m.GPU_ECC_CORRECTED: 0.0,
        m.GPU_ECC_UNCORRECTED: 0.0,
    }  # throttle_status N/A: left out
    assert gpu.package is None  # a whole GPU
    (process,) = [s for s in samples if s.entity == "gpu_process"]
    assert process.labels == {"gpu": "0", "uuid": gpu.labels["uuid"], "pid": "48211"}
    assert process.values == {m.GPU_PROCESS_MEMORY_USED: 40.0 * GIB}


def test_mi300x_cpx_reports_activity_power_and_energy_for_the_gpu_on_partition_0_only() -> None:
    gpus = _gpus(_source(FakeAmdSmi(mi300x_cpx())))
    assert len(gpus) == 8
    first, *others = gpus
    assert first.package == Package("PCB052715-0072", 8, PARTITION_PACKAGE_FIELDS)
    assert first.values[m.GPU_POWER] == 182.0 and first.values[m.GPU_UTILIZATION] == 0.5
    assert first.values[m.GPU_MEMORY_UTILIZATION] == 0.2 and m.GPU_ENERGY in first.values
    for other in others:
        assert other.package == Package("PCB052715-0072", 8)
        assert not {m.GPU_POWER, m.GPU_ENERGY, m.GPU_UTILIZATION, m.GPU_MEMORY_UTILIZATION} & other.values.keys()
        assert other.values[m.GPU_MEMORY_TOTAL] == 24.0 * GIB  # its own slice of the HBM
        assert other.values[m.GPU_TEMPERATURE] == 39.0


def test_copies_of_the_gpu_value_on_other_partitions_are_dropped() -> None:
    devices = mi300x_cpx()
    for device in devices[1:]:  # a driver answering the GPU's values on every partition
        device.gfx_activity, device.socket_power, device.energy_accumulator = 50, 182, 9_830_400_000
    gpus = _gpus(_source(FakeAmdSmi(devices)))
    assert [m.GPU_POWER in g.values for g in gpus] == [True] + [False] * 7
    assert sum(g.values.get(m.GPU_ENERGY, 0.0) for g in gpus) == pytest.approx(9_830_400_000 * RESOLUTION_UJ / 1e6)


@pytest.mark.parametrize("secondary_power", [NA, 0], ids=["rocm-6.0.2-n/a", "older-amdgpu-zero"])
def test_mi250x_reports_power_and_energy_on_one_die_of_each_package(secondary_power: int | str) -> None:
    gpus = _gpus(_source(FakeAmdSmi(mi250x(secondary_power=secondary_power))))
    assert [g.values.get(m.GPU_POWER) for g in gpus] == [91.0, None, 97.0, None, 89.0, None, 95.0, None]
    assert [m.GPU_ENERGY in g.values for g in gpus] == [True, False] * 4  # the secondary's 0 is "not reported"
    assert [g.package for g in gpus[:2]] == [Package("PCB046982-0000", 2, DIE_PACKAGE_FIELDS),
                                              Package("PCB046982-0000", 2)]  # fmt: skip
    assert [g.values[m.GPU_TEMPERATURE] for g in gpus] == [47.0, 46.0, 46.0, 46.0, 47.0, 46.0, 45.0, 39.0]
    assert all(g.values[m.GPU_UTILIZATION] == 0.0 for g in gpus)  # activity is each die's own
    assert gpus[0].values[m.GPU_SM_CLOCK] == 800e6 and gpus[0].values[m.GPU_MEMORY_CLOCK] == 1600e6


def test_dies_that_each_report_their_own_power_keep_it() -> None:
    devices = mi250x(gcds=2, secondary_power=90)
    devices[1].energy_accumulator = 7
    gpus = _gpus(_source(FakeAmdSmi(devices)))
    assert [g.values[m.GPU_POWER] for g in gpus] == [91.0, 90.0]
    assert [g.package for g in gpus] == [Package("PCB046982-0000", 2)] * 2  # nothing package-wide


def test_not_reported_values_are_absent_never_zero() -> None:
    device = mi210()
    device.gfx_activity, device.umc_activity, device.socket_power = 0xFFFF, NA, NA
    device.energy_accumulator, device.temperatures, device.ecc, device.clocks = None, {}, None, {}
    (gpu,) = _gpus(_source(FakeAmdSmi([device])))
    assert gpu.values == {m.GPU_UP: 1.0, m.GPU_MEMORY_TOTAL: 64.0 * GIB, m.GPU_MEMORY_USED: 600_000_000.0}


def test_mi210_reads_edge_temperature_when_the_hotspot_is_not_supported() -> None:
    (gpu,) = _gpus(_source(FakeAmdSmi([mi210()])))
    assert gpu.values[m.GPU_TEMPERATURE] == 44.0
    assert gpu.values[m.GPU_UTILIZATION] == 0.12 and gpu.values[m.GPU_POWER] == 48.0
    assert gpu.values[m.GPU_SM_CLOCK] == 1700e6 and m.GPU_MEMORY_CLOCK not in gpu.values


def test_rocm_6_2_energy_count_names_the_accumulator_power() -> None:
    (gpu,) = _gpus(_source(FakeAmdSmi([mi210()], energy_key="power")))
    assert gpu.values[m.GPU_ENERGY] == pytest.approx(1_310_720_000 * RESOLUTION_UJ / 1e6)


def test_energy_counter_reset_is_passed_on_as_read() -> None:
    device = mi210()
    source = _source(FakeAmdSmi([device]))
    before = _gpus(source)[0].values[m.GPU_ENERGY]
    device.energy_accumulator = 1000  # the driver reloaded: the accumulator restarts
    after = _gpus(source)[0].values[m.GPU_ENERGY]
    assert after == pytest.approx(1000 * RESOLUTION_UJ / 1e6)
    assert after < before  # the service's metering reads the drop as a reset


def test_a_device_that_does_not_answer_is_down_and_the_others_are_read(caplog: pytest.LogCaptureFixture) -> None:
    devices = mi250x(gcds=4)
    fake = FakeAmdSmi(devices)
    source = _source(fake)
    source.collect()
    devices[2].lost = True
    with caplog.at_level(logging.WARNING):
        gpus = _gpus(source)
    by_index = {g.labels["gpu"]: g for g in gpus}
    assert by_index["2"].values == {m.GPU_UP: 0.0} and by_index["2"].labels["uuid"] == devices[2].uuid
    assert [by_index[i].values[m.GPU_UP] for i in "013"] == [1.0, 1.0, 1.0]
    assert by_index["0"].values[m.GPU_POWER] == 91.0
    # the lost die stays in its package: its partner's 0 J is still "not reported", and no die reports for it
    assert by_index["3"].package == Package("PCB046982-0001", 2) and m.GPU_ENERGY not in by_index["3"].values
    assert "amdsmi device 2 did not answer" in caplog.text


def test_one_call_failing_leaves_only_its_values_out(caplog: pytest.LogCaptureFixture) -> None:
    device = mi210()
    device.errors = {"amdsmi_get_power_info": 8, "amdsmi_get_gpu_total_ecc_count": STATUS_NOT_SUPPORTED}
    with caplog.at_level(logging.WARNING):
        (gpu,) = _gpus(_source(FakeAmdSmi([device])))
    assert m.GPU_POWER not in gpu.values and m.GPU_ECC_CORRECTED not in gpu.values
    assert gpu.values[m.GPU_UTILIZATION] == 0.12
    assert "power left out" in caplog.text and "ecc" not in caplog.text  # NOT_SUPPORTED is quiet


def test_no_driver_gives_no_readings_and_retries(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeAmdSmi([mi210()])
    fake.init_error = STATUS_DRIVER_NOT_LOADED
    source = _source(fake)
    with caplog.at_level(logging.WARNING):
        assert source.collect() == [] and source.collect() == []
    assert caplog.text.count("no AMD GPU driver") == 1
    fake.init_error = None
    assert len(_gpus(source)) == 1
    source.close()
    assert not fake.initialised


def test_the_batch_names_each_package_and_validates() -> None:
    samples = _source(FakeAmdSmi(mi300x_cpx() + mi250x(gcds=2))).collect()
    batch = IngestBatch.model_validate({"node": "amd-01", **columnar(batch_dict(samples))})
    info = {gpu.index: gpu for gpu in batch.gpus}
    assert info[0].package_id == "PCB052715-0072" and info[0].package_devices == 8
    assert info[0].package_fields == list(PARTITION_PACKAGE_FIELDS)
    assert info[1].package_fields is None and info[1].package_devices == 8
    assert info[8].package_fields == list(DIE_PACKAGE_FIELDS) and info[9].package_id == "PCB046982-0000"


def test_the_collector_names_the_extra_when_amdsmi_is_missing(tmp_path: Path) -> None:
    try:
        import amdsmi  # noqa: F401
    except (ImportError, OSError):
        pass
    else:
        pytest.skip("amdsmi is installed here")
    with pytest.raises(ValueError, match=r"gpu-finops\[amd\]"):
        build_source("amdsmi", NodeConfig(service_url="http://x", token="", node="n", spool_dir=tmp_path))
