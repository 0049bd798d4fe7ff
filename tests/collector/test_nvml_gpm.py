"""NvmlSource's NVML GPM readings, through the fake pynvml (real nvidia-smi captures; GPM values written by hand,
as no public GPM capture exists: :mod:`tests.support.fake_pynvml_gpm`)."""

from __future__ import annotations

import logging
from pathlib import Path

import pynvml
import pytest

from collector.contract import metric_names as m
from collector.contract.sample import Sample
from collector.contract.wire import reading_dict
from collector.sources.nvml import NvmlSource
from tests.support.fake_pynvml import CAPTURES, FakeNvml, ManualClock, fake_nvml_from_capture, query_gpu_rows
from tests.support.fake_pynvml_gpm import GpmPhase
from tests.support.fake_pynvml_xml import XML_CAPTURES, xml_gpus

H100 = "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
H200 = "linux-x86_64__nvidia-h200__590.48.01.txt"
H200_MIG = "linux-x86_64__nvidia-h200-mig__590.48.01.txt"
MIB = 2**20
ACTIVITY = (m.GPU_SM_ACTIVE, m.GPU_SM_OCCUPANCY, m.GPU_TENSOR_ACTIVE, m.GPU_TENSOR_HMMA_ACTIVE,
            m.GPU_TENSOR_IMMA_ACTIVE, m.GPU_TENSOR_DFMA_ACTIVE, m.GPU_DRAM_ACTIVE, m.GPU_FP64_ACTIVE,
            m.GPU_FP32_ACTIVE, m.GPU_FP16_ACTIVE, m.GPU_GRAPHICS_ENGINE_ACTIVE, m.GPU_NVLINK_RX_RATE,
            m.GPU_NVLINK_TX_RATE)  # fmt: skip

# Written by hand (NVML's units: percent, MiB/s): a training step's shape, then a light phase from 25 s on.
BUSY = {
    pynvml.NVML_GPM_METRIC_SM_UTIL: 92.0, pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 41.0,
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 68.0, pynvml.NVML_GPM_METRIC_HMMA_TENSOR_UTIL: 66.0,
    pynvml.NVML_GPM_METRIC_IMMA_TENSOR_UTIL: 0.0, pynvml.NVML_GPM_METRIC_DFMA_TENSOR_UTIL: 0.0,
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 35.0, pynvml.NVML_GPM_METRIC_FP64_UTIL: 0.5,
    pynvml.NVML_GPM_METRIC_FP32_UTIL: 18.0, pynvml.NVML_GPM_METRIC_FP16_UTIL: 2.0,
    pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: 99.5, pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 120.0,
    pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 950.0, pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: 24000.0,
    pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: 23500.0,
}  # fmt: skip
LIGHT = {**{metric: 0.0 for metric in BUSY}, pynvml.NVML_GPM_METRIC_SM_UTIL: 12.0,
         pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: 20.0, pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 50.0}  # fmt: skip
BUSY_THEN_LIGHT = [GpmPhase(0, BUSY), GpmPhase(25, LIGHT)]


@pytest.fixture
def captures(shared_data: Path) -> Path:
    return shared_data / CAPTURES


def whole_gpus(samples: list[Sample]) -> list[Sample]:
    return [s for s in samples if s.entity == "gpu" and s.labels["mig_profile"] == ""]


def activity(sample: Sample) -> dict[str, float]:
    return {metric: sample.values[metric] for metric in ACTIVITY if metric in sample.values}


def gpm_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "collector.sources.nvml_gpm"]


def test_first_cycle_has_no_activity_the_next_ones_the_means_since_the_cycle_before(captures: Path) -> None:
    clock = ManualClock()
    fake = fake_nvml_from_capture(captures / H100, "load", clock)
    fake.gpm = {0: BUSY_THEN_LIGHT}
    source = NvmlSource(fake, clock)

    clock.advance(5)
    [first] = whole_gpus(source.collect())
    assert activity(first) == {}, "one sample is no interval: absent, never 0"
    assert m.GPU_PCIE_RX not in first.values and first.values[m.GPU_POWER] == pytest.approx(631.95)

    clock.advance(10)  # [5 s, 15 s]: all busy
    [second] = whole_gpus(source.collect())
    assert activity(second) == pytest.approx({
        m.GPU_SM_ACTIVE: 0.92, m.GPU_SM_OCCUPANCY: 0.41, m.GPU_TENSOR_ACTIVE: 0.68, m.GPU_TENSOR_HMMA_ACTIVE: 0.66,
        m.GPU_TENSOR_IMMA_ACTIVE: 0.0, m.GPU_TENSOR_DFMA_ACTIVE: 0.0, m.GPU_DRAM_ACTIVE: 0.35,
        m.GPU_FP64_ACTIVE: 0.005, m.GPU_FP32_ACTIVE: 0.18, m.GPU_FP16_ACTIVE: 0.02, m.GPU_GRAPHICS_ENGINE_ACTIVE: 0.995,
        m.GPU_NVLINK_TX_RATE: 24000.0 * MIB, m.GPU_NVLINK_RX_RATE: 23500.0 * MIB,
    })  # fmt: skip
    assert (second.values[m.GPU_PCIE_TX], second.values[m.GPU_PCIE_RX]) == (120.0 * MIB, 950.0 * MIB)

    clock.advance(20)  # [15 s, 35 s]: 10 s busy, 10 s light
    [third] = whole_gpus(source.collect())
    assert third.values[m.GPU_SM_ACTIVE] == pytest.approx((0.92 + 0.12) / 2)
    assert third.values[m.GPU_TENSOR_ACTIVE] == pytest.approx(0.34)
    assert third.values[m.GPU_PCIE_RX] == pytest.approx((950.0 + 50.0) / 2 * MIB)

    wire = reading_dict(third)
    assert wire["sm_active_ratio"] == third.values[m.GPU_SM_ACTIVE]
    assert wire["graphics_engine_active_ratio"] == pytest.approx((0.995 + 0.2) / 2)
    assert not any("hmma" in field or "nvlink" in field for field in wire), "sub-pipes and NVLink: /metrics only"


def test_gpus_without_gpm_have_no_activity_and_are_named_once_with_the_reason(
    shared_data: Path, captures: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="collector.sources.nvml_gpm")
    clock = ManualClock()
    [a100], _, _ = xml_gpus(shared_data / XML_CAPTURES / "a100-sxm4-v12.xml")
    [h100] = query_gpu_rows(captures / H100, "load")
    [h200] = query_gpu_rows(captures / H200, "load")
    fake = FakeNvml([h100, a100, h200], clock)
    fake.gpm = {0: BUSY_THEN_LIGHT, 1: BUSY_THEN_LIGHT, 2: BUSY_THEN_LIGHT}
    fake.call_errors[(2, "nvmlGpmQueryDeviceSupport")] = pynvml.NVML_ERROR_NOT_SUPPORTED  # as under some vGPUs
    sampled: list[int] = []
    sample_get = fake.nvmlGpmSampleGet
    fake.nvmlGpmSampleGet = lambda handle, sample: sampled.append(handle.index) or sample_get(handle, sample)  # type: ignore[method-assign]
    source = NvmlSource(fake, clock)

    for _ in range(3):
        clock.advance(10)
        gpus = whole_gpus(source.collect())

    assert [bool(activity(gpu)) for gpu in gpus] == [True, False, False]
    assert set(sampled) == {0}, "no sample is taken of a GPU without GPM"
    [record] = gpm_records(caplog)
    assert record.levelno == logging.INFO
    message = record.getMessage()
    assert "GPU 1 (NVIDIA A100-SXM4-80GB): unsupported architecture (GPM needs Hopper or newer)" in message
    assert "GPU 2 (NVIDIA H200): NVMLError_NotSupported" in message and "GPU 0" not in message
    with pytest.raises(pynvml.NVMLError_NotSupported):  # the fake's A100 refuses a GPM sample, as NVML does
        fake.nvmlGpmSampleGet(fake.nvmlDeviceGetHandleByIndex(1), fake.nvmlGpmSampleAlloc())


def test_a_driver_without_gpm_is_named_once(captures: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="collector.sources.nvml_gpm")
    clock = ManualClock()
    fake = fake_nvml_from_capture(captures / H100, "load", clock)  # no gpm: nvmlGpm* are not in its library
    source = NvmlSource(fake, clock)
    for _ in range(2):
        clock.advance(10)
        [gpu] = whole_gpus(source.collect())
    assert activity(gpu) == {}
    [record] = gpm_records(caplog)
    assert "GPU 0 (NVIDIA H100 80GB HBM3): the driver has no GPM (NVMLError_FunctionNotFound)" in record.getMessage()


def test_mig_instances_get_their_gpu_instance_means(captures: Path) -> None:
    clock = ManualClock()
    fake = fake_nvml_from_capture(captures / H200_MIG, "load", clock)
    fake.gpm = {
        (0, 2): [GpmPhase(0, {pynvml.NVML_GPM_METRIC_SM_UTIL: 80.0, pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 50.0})],
        (0, 3): [GpmPhase(0, {pynvml.NVML_GPM_METRIC_SM_UTIL: 10.0, pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 0.0})],
    }  # GPU instances 9 and 10, and the whole GPU, have no value: each metric answers NOT_SUPPORTED
    instances_sampled: list[int] = []
    mig_sample_get = fake.nvmlGpmMigSampleGet

    def counting(handle: object, gpu_instance_id: int, sample: object) -> object:
        instances_sampled.append(gpu_instance_id)
        return mig_sample_get(handle, gpu_instance_id, sample)  # type: ignore[arg-type]

    fake.nvmlGpmMigSampleGet = counting  # type: ignore[method-assign]
    source = NvmlSource(fake, clock)
    clock.advance(10)
    source.collect()
    clock.advance(10)
    samples = source.collect()

    instances = {s.labels["mig_profile"]: s for s in samples if s.entity == "gpu" and s.labels["mig_profile"]}
    # nvidia-smi -L: compute instances 1c.3g.71gb and 2c.3g.71gb share GPU instance 2; 2g.35gb is GPU instance 3
    assert activity(instances["1c.3g.71gb"]) == {m.GPU_SM_ACTIVE: 0.8, m.GPU_TENSOR_ACTIVE: 0.5}
    assert activity(instances["2c.3g.71gb"]) == {m.GPU_SM_ACTIVE: 0.8, m.GPU_TENSOR_ACTIVE: 0.5}
    assert activity(instances["2g.35gb"]) == {m.GPU_SM_ACTIVE: 0.1, m.GPU_TENSOR_ACTIVE: 0.0}
    assert activity(instances["1g.18gb"]) == {}
    assert activity(whole_gpus(samples)[0]) == {}
    assert sorted(instances_sampled) == [2, 2, 3, 3, 9, 9, 10, 10], "each GPU instance once per cycle"


def test_a_failed_sample_is_left_out_and_the_gpu_starts_afresh(
    captures: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    fake = fake_nvml_from_capture(captures / H100, "load", clock)
    fake.gpm = {0: BUSY_THEN_LIGHT}
    source = NvmlSource(fake, clock)
    source.collect()
    fake.call_errors[(0, "nvmlGpmSampleGet")] = pynvml.NVML_ERROR_NO_PERMISSION
    clock.advance(5)
    [failed] = whole_gpus(source.collect())
    assert activity(failed) == {} and failed.values[m.GPU_UP] == 1.0
    [warning] = [r.getMessage() for r in gpm_records(caplog) if r.levelno == logging.WARNING]
    assert "GPU 0" in warning and "NVMLError_NoPermission" in warning
    del fake.call_errors[(0, "nvmlGpmSampleGet")]
    clock.advance(5)
    assert activity(whole_gpus(source.collect())[0]) == {}, "the sample before the failure is not used"
    clock.advance(5)
    assert whole_gpus(source.collect())[0].values[m.GPU_SM_ACTIVE] == pytest.approx(0.92)


def test_samples_are_freed_on_close_and_before_nvml_is_reinitialised(captures: Path) -> None:
    clock = ManualClock()
    fake = fake_nvml_from_capture(captures / H100, "load", clock)
    fake.gpm = {0: BUSY_THEN_LIGHT}
    source = NvmlSource(fake, clock)
    source.collect()
    assert len(fake.gpm_samples) == 2, "two samples per GPU, reused"
    clock.advance(5)
    source.collect()
    assert len(fake.gpm_samples) == 2

    fake.gpu_errors[0] = pynvml.NVML_ERROR_GPU_IS_LOST
    source.collect()
    del fake.gpu_errors[0]
    clock.advance(5)
    [after] = whole_gpus(source.collect())  # NVML shut down (samples freed first) and initialised again
    assert activity(after) == {}, "no sample survives re-initialisation"
    assert len(fake.gpm_samples) == 2
    clock.advance(5)
    assert whole_gpus(source.collect())[0].values[m.GPU_SM_ACTIVE] == pytest.approx(0.92)

    source.close()
    assert fake.gpm_samples == {} and not fake.initialised
