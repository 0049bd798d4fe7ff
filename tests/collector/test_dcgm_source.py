"""DcgmSource on real dcgm-exporter scrapes (Datadog fixture, profiling captures), on lines built from dcgm-exporter's
default counters CSV, and on a hand-written DCGM 4.6 fixture with cycle counters."""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import httpx
import pytest

from collector.contract import metric_names as m
from collector.contract.dcgm_fields import CYCLE_COUNTERS, FIELDS, IGNORED, SM_CYCLES_ELAPSED
from collector.contract.sample import Sample
from collector.contract.wire import GpuReading, reading_dict
from collector.sources.dcgm import DcgmSource

MIB = 2**20
FIXTURES = Path(__file__).parents[1] / "fixtures"
T4_460 = "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"
T4_470 = "GPU-9ef1b6d0-3643-5dd7-b823-c0ec20dcf2d5"


def _source(text: str, status: int = 200) -> DcgmSource:
    client = httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(status, text=text)))
    return DcgmSource("http://127.0.0.1:9400/metrics", client=client)


def _by_uuid(samples: list[Sample]) -> dict[str, Sample]:
    return {s.labels["uuid"]: s for s in samples}


def test_datadog_fixture(shared_data: Path) -> None:
    """The fixture merges two real T4 scrapes; its unlabelled block has dummy values (SOURCE.md) and is ignored,
    as are series without a GPU identity; its A10G line carries hand-edited Kubernetes labels."""
    samples = _by_uuid(_source((shared_data / "datadog-dcgm-fixture" / "metrics.txt").read_text()).collect())
    assert sorted(samples) == sorted(["GPU-abc", T4_460, T4_470])
    t4 = samples[T4_460]
    assert t4.labels == {"gpu": "0", "uuid": T4_460, "model": "Tesla T4", "mig_profile": "", "parent_uuid": ""}
    assert t4.values == {
        m.GPU_UP: 1.0,
        m.GPU_SM_CLOCK: 300e6,  # DCGM_FI_DEV_SM_CLOCK 300 (MHz)
        m.GPU_MEMORY_CLOCK: 405e6,
        m.GPU_TEMPERATURE: 25.0,
        m.GPU_POWER: 8.969,  # W
        m.GPU_ENERGY: 128996.013,  # DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION 128996013 (mJ), a counter
        m.GPU_UTILIZATION: 0.0,
        m.GPU_MEMORY_UTILIZATION: 0.0,
        m.GPU_MEMORY_USED: 0.0,
        m.GPU_MEMORY_TOTAL: 15109 * MIB,  # no FB_TOTAL in this scrape: FB_USED 0 + FB_FREE 15109 MiB
    }
    assert samples[T4_470].values == {m.GPU_UP: 1.0, m.GPU_MEMORY_TOTAL: 15109 * MIB, m.GPU_CLOCKS_EVENT_REASONS: 1.0}
    assert samples["GPU-abc"].job_id == "ray-llm/ray-1111111", "namespace/pod when there is no hpc_job"
    assert t4.job_id is None


def test_every_default_counter_is_mapped_with_its_scale_or_deliberately_ignored(shared_data: Path) -> None:
    rows = [
        [cell.strip() for cell in row]
        for row in csv.reader((shared_data / "dcgm-exporter-counters" / "default-counters.csv").open())
        if row and not row[0].startswith("#")
    ]
    assert len(rows) == 26
    assert {field for field, _, _ in rows} <= set(FIELDS) | IGNORED, "a default field is neither mapped nor ignored"
    for field, kind, _help in rows:
        if kind == "label" or field not in FIELDS:
            continue
        line = f'# TYPE {field} {kind}\n{field}{{gpu="0",UUID="GPU-1",modelName="NVIDIA H100 80GB HBM3"}} 7\n'
        (sample,) = _source(line).collect()
        expected = FIELDS[field]
        assert sample.values == {m.GPU_UP: 1.0, expected.metric: pytest.approx(7 * expected.scale)}, field
    scales = {field: FIELDS[field].scale for field, _, _ in rows if field in FIELDS}
    assert scales["DCGM_FI_DEV_FB_USED"] == MIB and scales["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == 1e-3
    assert scales["DCGM_FI_DEV_GPU_UTIL"] == 0.01 and scales["DCGM_FI_DEV_SM_CLOCK"] == 1e6


def test_mig_instances_and_hpc_job_labels() -> None:
    identity = 'gpu="0",UUID="GPU-p",modelName="NVIDIA A100-SXM4-40GB"'
    text = (
        f'DCGM_FI_DEV_FB_USED{{{identity},GPU_I_PROFILE="1g.5gb",GPU_I_ID="7",hpc_job="5150"}} 1024\n'
        f'DCGM_FI_DEV_FB_USED{{{identity},GPU_I_PROFILE="3g.20gb",GPU_I_ID="1"}} 2048\n'
        f"DCGM_FI_DEV_CLOCKS_EVENT_REASONS{{{identity}}} 4\n"
    )
    samples = _by_uuid(_source(text).collect())
    assert samples["GPU-p/7"].labels == {"gpu": "0", "uuid": "GPU-p/7", "model": "NVIDIA A100-SXM4-40GB",
                                         "mig_profile": "1g.5gb", "parent_uuid": "GPU-p"}  # fmt: skip
    assert samples["GPU-p/7"].job_id == "5150"
    assert samples["GPU-p/7"].values[m.GPU_MEMORY_USED] == 1024 * MIB
    assert samples["GPU-p/1"].job_id is None
    assert samples["GPU-p"].values == {m.GPU_UP: 1.0, m.GPU_CLOCKS_EVENT_REASONS: 4.0}


def test_a_malformed_line_is_skipped_and_the_other_gpus_read(caplog: pytest.LogCaptureFixture) -> None:
    text = (
        'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-0",modelName="T"} 100.5\n'
        'DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-1",modelName="T"} lots\n'
        'DCGM_FI_DEV_POWER_USAGE{gpu="2",UUID="GPU-2",modelName="T"} 300\n'
    )
    with caplog.at_level(logging.WARNING):
        samples = _by_uuid(_source(text).collect())
    assert {uuid: s.values[m.GPU_POWER] for uuid, s in samples.items()} == {"GPU-0": 100.5, "GPU-2": 300.0}
    assert "line 2: unparsable" in caplog.text


def test_a_failing_sidecar_raises() -> None:
    with pytest.raises(RuntimeError, match="HTTP 503"):
        _source("", status=503).collect()
    with pytest.raises(RuntimeError, match="no DCGM_FI_ series"):
        _source("up 1\n").collect()
    refused = DcgmSource("http://127.0.0.1:9/metrics")
    with pytest.raises(httpx.TransportError):
        refused.collect()


ACTIVITY = (m.GPU_SM_ACTIVE, m.GPU_SM_OCCUPANCY, m.GPU_TENSOR_ACTIVE, m.GPU_DRAM_ACTIVE, m.GPU_FP64_ACTIVE,
            m.GPU_FP32_ACTIVE, m.GPU_FP16_ACTIVE, m.GPU_GRAPHICS_ENGINE_ACTIVE, m.GPU_TENSOR_HMMA_ACTIVE,
            m.GPU_TENSOR_IMMA_ACTIVE, m.GPU_TENSOR_DFMA_ACTIVE)  # fmt: skip
PROFILING = Path("dcgm-profiling-captures")
# Literals copied by hand from the captures (the DCGM_FI_PROF_* lines and DCGM_FI_DEV_GPU_UTIL), so a parser bug
# cannot cancel out against the expectations.
CAPTURED_ACTIVITY: dict[str, tuple[str, dict[str, float]]] = {
    "ericsson-ccd-tesla-t4-busy.prom": (
        "GPU-6d5c0ac5-74d7-3130-46f1-e93ed57f469a",
        {m.GPU_UTILIZATION: 0.91, m.GPU_GRAPHICS_ENGINE_ACTIVE: 0.156205, m.GPU_TENSOR_ACTIVE: 0.005822,
         m.GPU_DRAM_ACTIVE: 0.092781, m.GPU_PCIE_TX: 4791810.0, m.GPU_PCIE_RX: 6935930.0},
    ),
    "nvidia-docs-a100-mig-busy.prom": (
        "GPU-34319582-d595-d1c7-d1d2-179bcfa61660",
        {m.GPU_GRAPHICS_ENGINE_ACTIVE: 0.995630, m.GPU_TENSOR_ACTIVE: 0.929260, m.GPU_DRAM_ACTIVE: 0.690789,
         m.GPU_PCIE_TX: 33011804.0, m.GPU_PCIE_RX: 97863601.0},
    ),
    "kops-nvidia-l4-idle.prom": (
        "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c",
        {m.GPU_UTILIZATION: 0.0, m.GPU_GRAPHICS_ENGINE_ACTIVE: 0.0, m.GPU_TENSOR_ACTIVE: 0.0, m.GPU_DRAM_ACTIVE: 0.0,
         m.GPU_PCIE_TX: 112603.0, m.GPU_PCIE_RX: 17544.0},
    ),
    "upcloud-nvidia-l40s-idle.prom": (
        "GPU-5b4e07f6-3a86-4340-039d-25f2a83cdc43",
        {m.GPU_UTILIZATION: 0.0, m.GPU_GRAPHICS_ENGINE_ACTIVE: 0.0, m.GPU_TENSOR_ACTIVE: 0.0,
         m.GPU_DRAM_ACTIVE: 0.000131, m.GPU_PCIE_TX: 175084.0, m.GPU_PCIE_RX: 19831.0},
    ),
}  # fmt: skip


@pytest.mark.parametrize("capture", sorted(CAPTURED_ACTIVITY))
def test_profiling_captures_give_the_files_values_and_leave_the_rest_absent(shared_data: Path, capture: str) -> None:
    uuid, expected = CAPTURED_ACTIVITY[capture]
    samples = _by_uuid(_source((shared_data / PROFILING / capture).read_text()).collect())

    gpu = samples[uuid]
    assert {key: gpu.values[key] for key in expected} == expected
    # what the capture does not export (SM_ACTIVE, SM_OCCUPANCY and the FP pipes are off in dcgm-exporter's
    # default counters; no sub-pipe or NVLink field) is absent, never 0
    assert [metric for metric in ACTIVITY if metric in gpu.values] == [
        m.GPU_TENSOR_ACTIVE, m.GPU_DRAM_ACTIVE, m.GPU_GRAPHICS_ENGINE_ACTIVE
    ]  # fmt: skip
    assert m.GPU_NVLINK_RX_RATE not in gpu.values
    wire = reading_dict(gpu)
    assert (wire["tensor_active_ratio"], wire["dram_active_ratio"], wire["graphics_engine_active_ratio"]) == (
        expected[m.GPU_TENSOR_ACTIVE], expected[m.GPU_DRAM_ACTIVE], expected[m.GPU_GRAPHICS_ENGINE_ACTIVE]
    )  # fmt: skip
    assert not {"sm_active_ratio", "sm_occupancy_ratio", "fp64_active_ratio", "fp32_active_ratio"} & set(wire)
    GpuReading.model_validate(wire)


def test_t4_busy_by_utilisation_is_nearly_idle_by_its_tensor_cores(shared_data: Path) -> None:
    (t4,) = _source((shared_data / PROFILING / "ericsson-ccd-tesla-t4-busy.prom").read_text()).collect()
    # DCGM_FI_DEV_GPU_UTIL 91 (a kernel ran 91 % of the time) while the tensor pipes were active 0.58 % of cycles
    assert (t4.values[m.GPU_UTILIZATION], t4.values[m.GPU_TENSOR_ACTIVE]) == (0.91, 0.005822)
    assert t4.values[m.GPU_GRAPHICS_ENGINE_ACTIVE] == 0.156205


def test_a100_mig_instance_keeps_its_own_activity(shared_data: Path) -> None:
    samples = _by_uuid(_source((shared_data / PROFILING / "nvidia-docs-a100-mig-busy.prom").read_text()).collect())
    parent = "GPU-34319582-d595-d1c7-d1d2-179bcfa61660"
    instance = samples[f"{parent}/13"]
    assert (instance.labels["mig_profile"], instance.labels["parent_uuid"]) == ("1g.5gb", parent)
    assert instance.values == {m.GPU_UP: 1.0, m.GPU_GRAPHICS_ENGINE_ACTIVE: 0.995687, m.GPU_TENSOR_ACTIVE: 0.930433,
                               m.GPU_DRAM_ACTIVE: 0.800339}  # fmt: skip
    assert samples[parent].values[m.GPU_POWER] == 409.692


CYCLES = FIXTURES / "dcgm"
GPU0 = "GPU-8e1a3f52-0c6b-4d2e-9a7f-31c4b5d6e701"
GPU1 = "GPU-8e1a3f52-0c6b-4d2e-9a7f-31c4b5d6e702"


def _scrapes(*names: str) -> DcgmSource:
    """A source whose sidecar answers each file of ``tests/fixtures/dcgm`` in turn, one per scrape."""
    bodies = iter((CYCLES / name).read_text() for name in names)
    client = httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(200, text=next(bodies))))
    return DcgmSource("http://127.0.0.1:9400/metrics", client=client)


def test_dcgm_4_6_cycle_counters_give_the_exact_mean_between_two_scrapes() -> None:
    source = _scrapes("dcgm-4.6-cycles-scrape-1.prom", "dcgm-4.6-cycles-scrape-2.prom")

    first = _by_uuid(source.collect())
    # first scrape: no previous counters, so the 4.6 ratio fields stand (values of scrape 1)
    assert {metric: first[GPU0].values.get(metric) for metric in ACTIVITY} == {
        m.GPU_SM_ACTIVE: 0.931044, m.GPU_SM_OCCUPANCY: 0.402117, m.GPU_TENSOR_ACTIVE: 0.712530,
        m.GPU_DRAM_ACTIVE: 0.331904, m.GPU_FP64_ACTIVE: 0.0, m.GPU_FP32_ACTIVE: 0.187342, m.GPU_FP16_ACTIVE: 0.021155,
        m.GPU_GRAPHICS_ENGINE_ACTIVE: 0.998211, m.GPU_TENSOR_HMMA_ACTIVE: 0.661020, m.GPU_TENSOR_IMMA_ACTIVE: 0.0,
        m.GPU_TENSOR_DFMA_ACTIVE: 0.0,
    }  # fmt: skip

    second = _by_uuid(source.collect())
    elapsed = 3002613600000000 - 3000000000000000
    means = {
        m.GPU_SM_ACTIVE: (2402351457919871 - 2400000000000000) / elapsed,
        m.GPU_TENSOR_ACTIVE: (1201568160000000 - 1200000000000000) / elapsed,
        m.GPU_TENSOR_HMMA_ACTIVE: (1101437480000000 - 1100000000000000) / elapsed,
        m.GPU_TENSOR_IMMA_ACTIVE: 0.0,  # the counter held at 0: a measured zero
        m.GPU_TENSOR_DFMA_ACTIVE: (5013068000000 - 5000000000000) / elapsed,
        m.GPU_FP64_ACTIVE: (10026136000000 - 10000000000000) / elapsed,
        m.GPU_FP32_ACTIVE: (600522720000000 - 600000000000000) / elapsed,
        m.GPU_FP16_ACTIVE: (30052272000000 - 30000000000000) / elapsed,
    }
    assert {metric: second[GPU0].values[metric] for metric in means} == means
    assert means[m.GPU_SM_ACTIVE] == pytest.approx(0.8997007652)  # scrape 2's SM_UTIL_RATIO says 0.95
    assert (means[m.GPU_TENSOR_ACTIVE], means[m.GPU_FP32_ACTIVE]) == (pytest.approx(0.6), pytest.approx(0.2))
    # no cycle counter for these: scrape 2's ratio fields
    assert second[GPU0].values[m.GPU_SM_OCCUPANCY] == 0.415330
    assert second[GPU0].values[m.GPU_DRAM_ACTIVE] == 0.342871
    assert second[GPU0].values[m.GPU_GRAPHICS_ENGINE_ACTIVE] == 0.996870
    wire = reading_dict(second[GPU0])
    assert (
        wire["sm_active_ratio"] == means[m.GPU_SM_ACTIVE] and wire["tensor_active_ratio"] == means[m.GPU_TENSOR_ACTIVE]
    )
    assert not any("hmma" in field or "imma" in field or "dfma" in field for field in wire), "/metrics only"

    # GPU 1 exports counters only: first scrape nothing; second a reset (elapsed went down), nothing either
    for scrape in (first, second):
        assert [metric for metric in ACTIVITY if metric in scrape[GPU1].values] == []
        assert scrape[GPU1].values[m.GPU_UTILIZATION] in (0.87, 0.85)


def test_a_reset_counter_gives_no_mean_until_the_scrape_after() -> None:
    source = _scrapes("dcgm-4.6-cycles-scrape-2.prom", "dcgm-4.6-cycles-scrape-1.prom", "dcgm-4.6-cycles-scrape-2.prom")
    source.collect()
    went_down = _by_uuid(source.collect())[GPU0]
    # every counter went down: no means, so the ratio fields of that scrape stand
    assert went_down.values[m.GPU_SM_ACTIVE] == 0.931044 and went_down.values[m.GPU_TENSOR_ACTIVE] == 0.712530
    again = _by_uuid(source.collect())[GPU0]
    assert again.values[m.GPU_SM_ACTIVE] == pytest.approx(0.8997007652)


def test_the_table_names_every_field_once() -> None:
    cycle_fields = {*CYCLE_COUNTERS, SM_CYCLES_ELAPSED}
    assert not set(FIELDS) & IGNORED and not cycle_fields & IGNORED and not cycle_fields & set(FIELDS)
    # DCGM 4.6's new names map to the same metric as the names they replace (dcgm_fields.h keeps them as aliases)
    renamed = {"GR_ENGINE_ACTIVE": "GR_ENGINE_UTIL_RATIO", "SM_ACTIVE": "SM_UTIL_RATIO",
               "SM_OCCUPANCY": "SM_OCCUPANCY_RATIO", "PIPE_TENSOR_ACTIVE": "TENSOR_UTIL_RATIO",
               "DRAM_ACTIVE": "DRAM_UTIL_RATIO", "PIPE_FP64_ACTIVE": "FP64_UTIL_RATIO",
               "PIPE_FP32_ACTIVE": "FP32_UTIL_RATIO", "PIPE_FP16_ACTIVE": "FP16_UTIL_RATIO",
               "PIPE_TENSOR_HMMA_ACTIVE": "HMMA_UTIL_RATIO", "PIPE_TENSOR_IMMA_ACTIVE": "IMMA_UTIL_RATIO",
               "PIPE_TENSOR_DFMA_ACTIVE": "DFMA_UTIL_RATIO"}  # fmt: skip
    for old, new in renamed.items():
        assert FIELDS[f"DCGM_FI_PROF_{old}"] == FIELDS[f"DCGM_FI_PROF_{new}"], old
