"""Service and collector as real processes and sockets, then the CLI, checked against tests/support/scenario.py."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import orjson
import pytest

from collector.agent import Agent
from collector.exposition import LatestSamples
from collector.shipper import Shipper
from collector.sources.replay import ReplaySource
from finops.pricing.catalog import PricingModel, load_catalog
from tests.support import scenario
from tests.support.servers import serve_process

TOKEN = "end-to-end-token"


def _cli(env: dict[str, str], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "finops.cli", *args], input=stdin, capture_output=True, text=True, env=env, check=True
    )


@pytest.fixture
def service(database_url: str) -> Iterator[tuple[str, dict[str, str]]]:
    """``gpu-finops serve`` as a child process on 127.0.0.1, after ``gpu-finops db upgrade``."""
    env = {**os.environ, "FINOPS_DATABASE_URL": database_url, "FINOPS_INGEST_TOKEN": TOKEN}
    _cli(env, "db", "upgrade")
    with serve_process(env) as url:
        yield url, env


def test_slice_through_collector_service_and_cli(service: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    url, env = service
    t0 = scenario.start_hour()
    readings = scenario.samples(t0)
    steps = [readings[i : i + 60] for i in range(0, len(readings), 60)]  # 30 minutes of 2 GPUs per POST
    source = ReplaySource(steps)
    agent = Agent([source], LatestSamples(), Shipper(url, TOKEN, scenario.NODE).ship)
    shipped = 0
    while not source.exhausted:
        shipped += agent.cycle()
    assert shipped == 240
    # At-least-once delivery: the same readings again store nothing new.
    assert Shipper(url, TOKEN, scenario.NODE).ship(readings[:60]) == 60

    log = tmp_path / "sacct.txt"
    log.write_text("\n".join(scenario.sacct_lines(t0)) + "\n")
    assert "imported 2 GPU jobs" in _cli(env, "import", "sacct", str(log)).stdout
    _cli(env, "team", "map", "acct-a", "alpha")
    _cli(env, "rollup")
    end = t0 + timedelta(hours=2)
    report = orjson.loads(
        _cli(env, "report", "--start", t0.isoformat(), "--end", end.isoformat(), "--format", "json").stdout
    )
    rows = {row["team"]: row for row in report}
    r = load_catalog().rate(scenario.MODEL, PricingModel.ON_DEMAND, t0)
    cents = Decimal("0.01")
    assert rows["alpha"]["allocated_cost"] == str((Decimal("1.5") * r).quantize(cents))
    assert rows["alpha"]["used_cost"] == str(r.quantize(cents))
    assert rows["alpha"]["idle_cost"] == str((r / 2).quantize(cents))
    assert rows["__unmapped__"]["used_cost"] == str((Decimal("0.75") * r).quantize(cents))
    assert rows["__unallocated__"]["allocated_cost"] == str(r.quantize(cents))
    assert sum(Decimal(row["allocated_cost"]) for row in report) == (4 * r).quantize(cents)
    assert [rows[t]["allocated_gpu_hours"] for t in ("alpha", "__unmapped__", "__unallocated__")] == [1.5, 1.5, 1.0]
    assert rows["alpha"]["used_gpu_hours"] == 1.0 and rows["alpha"]["idle_gpu_hours"] == 0.5
    assert sum(row["energy_kwh"] for row in report) == pytest.approx(2 * 1.19)
    assert all(row["currency"] == "USD" for row in report)
