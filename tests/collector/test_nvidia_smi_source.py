"""NvidiaSmiSource: a stand-in nvidia-smi answering from the real captures; same values as the nvml source."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from collector.contract import metric_names as m
from collector.sources.nvidia_smi import NvidiaSmiSource
from collector.sources.nvml import NvmlSource
from tests.support.fake_pynvml import CAPTURES, ManualClock, fake_nvml_from_capture

FAKE = Path(__file__).parents[1] / "fixtures" / "nvidia_smi" / "fake_nvidia_smi.py"
CAPTURE_NAMES = {
    "H100": "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt",
    "H200": "linux-x86_64__nvidia-h200__590.48.01.txt",
    "L40S": "linux-x86_64__nvidia-l40s__595.80.txt",
    "H100 MIG": "linux-x86_64__nvidia-h100-mig__590.48.01.txt",
}


@pytest.fixture
def command(tmp_path: Path) -> Path:
    """An executable ``nvidia-smi`` running the stand-in with this interpreter."""
    path = tmp_path / "nvidia-smi"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    path.chmod(0o755)
    return path


@pytest.fixture
def fake_env() -> Iterator[dict[str, str]]:
    """The stand-in's settings, applied to this process's environment (the subprocess inherits them)."""
    settings: dict[str, str] = {}
    saved = dict(os.environ)
    yield settings
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def sources() -> Iterator[Callable[..., NvidiaSmiSource]]:
    """Makes :class:`NvidiaSmiSource` instances (its arguments) and stops their timer threads, which the first
    ``collect`` starts, when the test ends: none goes on running nvidia-smi after its test."""
    made: list[NvidiaSmiSource] = []

    def make(*args: Any, **kwargs: Any) -> NvidiaSmiSource:
        made.append(NvidiaSmiSource(*args, **kwargs))
        return made[-1]

    yield make
    for source in made:
        source.stop()


def _configure(settings: dict[str, str], shared_data: Path, capture: str, state: str, **extra: str) -> None:
    settings.update(FAKE_NVIDIA_SMI_CAPTURE=str(shared_data / CAPTURES / CAPTURE_NAMES[capture]),
                    FAKE_NVIDIA_SMI_STATE=state, **extra)  # fmt: skip
    os.environ.update(settings)


@pytest.mark.parametrize("capture", ["H100", "H200", "L40S", "H100 MIG"])
@pytest.mark.parametrize("state", ["idle", "load"])
def test_values_equal_the_nvml_sources_for_the_same_capture(
    shared_data: Path,
    command: Path,
    fake_env: dict[str, str],
    sources: Callable[..., NvidiaSmiSource],
    capture: str,
    state: str,
) -> None:
    _configure(fake_env, shared_data, capture, state)
    source = sources(str(command))
    source.run_once()
    (smi,) = source.collect()
    clock = ManualClock()
    nvml = NvmlSource(fake_nvml_from_capture(shared_data / CAPTURES / CAPTURE_NAMES[capture], state, clock), clock)
    (whole,) = [s for s in nvml.collect() if s.entity == "gpu" and s.labels["mig_profile"] == ""]
    assert smi.labels == whole.labels
    nvml_values = {k: v for k, v in whole.values.items() if k != m.GPU_ENERGY}  # nvidia-smi has no energy field
    assert smi.values == pytest.approx(nvml_values, rel=1e-12)
    assert m.GPU_POWER in smi.values and m.GPU_UP in smi.values


def test_a_field_an_older_driver_rejects_is_dropped_and_the_rest_read(
    shared_data: Path,
    command: Path,
    fake_env: dict[str, str],
    sources: Callable[..., NvidiaSmiSource],
    caplog: pytest.LogCaptureFixture,
) -> None:
    _configure(fake_env, shared_data, "L40S", "load",
               FAKE_NVIDIA_SMI_UNKNOWN="clocks_event_reasons_counters.sw_power_cap")  # fmt: skip
    source = sources(str(command))
    with caplog.at_level(logging.WARNING):
        source.run_once()
    (sample,) = source.collect()
    assert m.GPU_POWER_VIOLATION not in sample.values
    assert sample.values[m.GPU_POWER] == pytest.approx(110.23)
    assert "does not know the field clocks_event_reasons_counters.sw_power_cap" in caplog.text


def test_a_timeout_fails_the_source_and_a_later_run_recovers(
    shared_data: Path, command: Path, fake_env: dict[str, str], sources: Callable[..., NvidiaSmiSource]
) -> None:
    _configure(fake_env, shared_data, "H100", "load", FAKE_NVIDIA_SMI_SLEEP="3")
    source = sources(str(command), timeout_seconds=0.5)
    source.run_once()
    with pytest.raises(RuntimeError, match=r"timed out after 0\.5 s"):
        source.collect()
    os.environ["FAKE_NVIDIA_SMI_SLEEP"] = "0"
    source.run_once()
    assert [s.labels["model"] for s in source.collect()] == ["NVIDIA H100 80GB HBM3"]


def test_a_garbled_line_is_skipped_with_its_line_number(
    shared_data: Path,
    command: Path,
    fake_env: dict[str, str],
    sources: Callable[..., NvidiaSmiSource],
    caplog: pytest.LogCaptureFixture,
) -> None:
    _configure(fake_env, shared_data, "H200", "load", FAKE_NVIDIA_SMI_GARBLE="1")
    source = sources(str(command))
    with caplog.at_level(logging.WARNING):
        source.run_once()
    assert [s.labels["model"] for s in source.collect()] == ["NVIDIA H200"]
    assert "line 3: 2 fields" in caplog.text


def test_timer_thread_runs_on_its_own_and_a_missing_command_is_no_data(
    shared_data: Path, command: Path, fake_env: dict[str, str], sources: Callable[..., NvidiaSmiSource], tmp_path: Path
) -> None:
    _configure(fake_env, shared_data, "H100", "idle")
    source = sources(str(command), interval_seconds=60)
    try:
        (sample,) = source.collect()  # the first collect starts the thread and waits for its first run
        assert sample.values[m.GPU_UTILIZATION] == 0.0
    finally:
        source.stop()
    assert sources(str(tmp_path / "no-such-nvidia-smi")).collect() == []
