"""DcgmSource on the Datadog dcgm-exporter scrape and on lines built from dcgm-exporter's default counters CSV."""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import httpx
import pytest

from collector.contract import metric_names as m
from collector.contract.dcgm_fields import FIELDS, IGNORED
from collector.contract.sample import Sample
from collector.sources.dcgm import DcgmSource

MIB = 2**20
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
