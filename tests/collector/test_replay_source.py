"""The replay source: a GPU-less machine plays an nvidia-smi capture (the real captures of
shared/data/nvidia-smi-captures, or `nvidia-smi --query-gpu … --format=csv` output) through `gpu-finops collector
--source replay` into a real service."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from collector.contract import metric_names as m
from collector.sources.replay import ReplaySource, capture_steps, live
from finops.db.models import Gpu, GpuSample, Node
from tests.support.servers import free_port, serve_process

H100 = "nvidia-smi-captures/linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
TOKEN = "replay-token"
HEADER = "index, uuid, name, utilization.gpu [%], memory.used [MiB], power.draw [W]"
IDLE = (0.0, 69.85)
LOAD = (1.0, 631.95)
"""(utilization.gpu as a ratio, power.draw W) of the H100 capture's idle and load query-gpu lines."""


def test_a_real_capture_plays_its_idle_then_its_load_step(shared_data: Path) -> None:
    steps = capture_steps(shared_data / H100)
    assert [[(s.values[m.GPU_UTILIZATION], s.values[m.GPU_POWER]) for s in step] for step in steps] == [[IDLE], [LOAD]]
    (gpu,) = steps[1]
    assert gpu.labels == {"gpu": "0", "uuid": "GPU-00000000-0000-0000-0000-000000000000",
                          "model": "NVIDIA H100 80GB HBM3", "mig_profile": "", "parent_uuid": ""}  # fmt: skip
    assert m.GPU_ENERGY not in gpu.values, "nvidia-smi has no energy counter field"


def test_nvidia_smi_csv_output_repeated_or_looped(tmp_path: Path) -> None:
    lines = ["0, GPU-aaaa, NVIDIA A100-SXM4-80GB, 10 %, 100 MiB, 90.00 W",
             "1, GPU-bbbb, NVIDIA A100-SXM4-80GB, 20 %, 200 MiB, 95.00 W"]  # fmt: skip
    appended = tmp_path / "appended.csv"  # `nvidia-smi --query-gpu=… --format=csv >> FILE`, twice
    appended.write_text(f"{HEADER}\n{lines[0]}\n{lines[1]}\n{HEADER}\n{lines[1]}\n{lines[0]}\n")
    looped = tmp_path / "looped.csv"  # `nvidia-smi --query-gpu=… --format=csv -l 10`: one header
    looped.write_text(f"{HEADER}\n{lines[0]}\n{lines[1]}\n{lines[0]}\n{lines[1]}\n\n")
    for path in (appended, looped):
        steps = capture_steps(path)
        assert [sorted(s.labels["gpu"] for s in step) for step in steps] == [["0", "1"], ["0", "1"]], path.name
        assert steps[0][1].values[m.GPU_MEMORY_USED] == 200 * 2**20
    torn = tmp_path / "torn.csv"
    torn.write_text(f"{HEADER}\n{lines[0]}\n1, GPU-bbbb, NVIDIA A100\n")
    assert [[s.labels["gpu"] for s in step] for step in capture_steps(torn)] == [["0"]], "a torn line is skipped"
    for bad, message in ((tmp_path / "absent.csv", "No such file"), (tmp_path / "empty.csv", "no GPU line")):
        if bad.name == "empty.csv":
            bad.write_text(f"{HEADER}\n")
        with pytest.raises(ValueError, match=message):
            capture_steps(bad)


def test_replayed_readings_are_stamped_when_taken_and_loop(tmp_path: Path) -> None:
    capture = tmp_path / "capture.csv"
    capture.write_text(
        f"{HEADER}\n0, GPU-aaaa, NVIDIA L4, 5 %, 1 MiB, 20.00 W\n0, GPU-aaaa, NVIDIA L4, 50 %, 1 MiB, 60.00 W\n"
    )
    times = iter(datetime(2026, 3, 1, tzinfo=UTC) + timedelta(seconds=10 * i) for i in range(5))
    source = ReplaySource(live(capture_steps(capture), lambda: next(times)))
    played = [source.collect()[0] for _ in range(5)]
    assert [s.values[m.GPU_UTILIZATION] for s in played] == [0.05, 0.5, 0.05, 0.5, 0.05]
    assert [s.timestamp.second for s in played] == [0, 10, 20, 30, 40]
    assert not source.exhausted


@pytest.fixture
def service(database_url: str) -> Iterator[tuple[str, dict[str, str]]]:
    env = {**os.environ, "FINOPS_DATABASE_URL": database_url, "FINOPS_INGEST_TOKEN": TOKEN}
    subprocess.run([sys.executable, "-m", "finops.cli", "db", "upgrade"], env=env, check=True, capture_output=True)
    with serve_process(env) as url:
        yield url, env


def test_the_collector_replays_a_capture_into_the_service(
    shared_data: Path, service: tuple[str, dict[str, str]], sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    url, env = service
    command = [sys.executable, "-m", "finops.cli", "collector", "--service-url", url, "--node", "replay-01",
               "--source", "replay", "--replay-file", str(shared_data / H100), "--interval", "1",
               "--metrics-address", "127.0.0.1", "--metrics-port", str(free_port()),
               "--spool-dir", str(tmp_path / "spool")]  # fmt: skip
    collector = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            with sessions() as session:
                rows = session.execute(
                    select(GpuSample.utilization_ratio, GpuSample.power_watts, GpuSample.energy_joules, Gpu.model)
                    .join(Gpu, Gpu.id == GpuSample.gpu_id)
                    .join(Node, Node.id == Gpu.node_id)
                    .where(Node.hostname == "replay-01")
                ).all()
            if len({(u, p) for u, p, _, _ in rows}) == 2:
                break
            assert collector.poll() is None and time.monotonic() < deadline, rows
            time.sleep(0.2)
    finally:
        collector.terminate()
        _, stderr = collector.communicate(timeout=30)
    assert {(u, p) for u, p, _, _ in rows} == {IDLE, LOAD}
    assert {(energy, model) for _, _, energy, model in rows} == {(None, "NVIDIA H100 80GB HBM3")}
    assert "collecting replay every 1 s" in stderr


def test_replay_without_a_capture_is_a_bad_option() -> None:
    from typer.testing import CliRunner

    from finops.cli import app

    result = CliRunner().invoke(app, ["collector", "--service-url", "http://127.0.0.1:9", "--source", "replay"])
    assert result.exit_code == 2 and "--replay-file" in result.output
