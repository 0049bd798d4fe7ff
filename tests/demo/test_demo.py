"""The demo's derivations and the demo command itself on a slice of the real Helios week."""

from __future__ import annotations

import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from finops.db.engine import make_engine, session_factory
from finops.db.models import Allocation, Gpu, GpuSample, IdleEpisode, Job, Node, NodeIoHour
from finops.demo.allocation import GPUS_PER_NODE, TeamSeries, derive_jobs, node_segments
from finops.demo.helios import HELIOS_TEAMS, load_helios
from finops.demo.workload import Trace, sacct_lines
from finops.jobs.slurm_import import import_sacct
from finops.pricing.catalog import PricingModel, load_catalog
from finops.timeutil import utc_now


def _held(jobs: list, team: str, minute: int) -> int:  # type: ignore[type-arg]
    return sum(j.gpu_count for j in jobs if j.team == team and j.start <= minute and (j.end is None or minute < j.end))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=24), min_size=1, max_size=80))
def test_derived_jobs_hold_exactly_the_counted_gpus(counts: list[int]) -> None:
    jobs = derive_jobs([TeamSeries("t", 24, counts)])
    assert all(_held(jobs, "t", minute) == count for minute, count in enumerate(counts))
    for job in jobs:
        # One node per job, or whole nodes only, so sacct's per-node GPU count is unambiguous.
        assert len(job.nodes) == 1 or job.gpu_count == GPUS_PER_NODE * len(job.nodes)


def test_node_segments_split_at_node_boundaries() -> None:
    assert node_segments(5, 30) == [(5, 8), (8, 24), (24, 30)]
    assert node_segments(3, 6) == [(3, 6)]
    assert node_segments(8, 16) == [(8, 16)]


def test_helios_loads_the_six_vcs(shared_data: Path) -> None:
    series = load_helios(shared_data / "helios-earth-vc-allocation")
    assert [s.team for s in series] == list(HELIOS_TEAMS)
    assert sum(s.quota for s in series) == 512
    assert {len(s.running) for s in series} == {10080}
    # From SOURCE.md's sample of vcpDC: a 56-GPU quota.
    assert series[0].quota == 56


def test_first_fit_placement_puts_jobs_on_their_derived_gpus(sessions, shared_data: Path) -> None:  # type: ignore[no-untyped-def]
    series = [
        TeamSeries(s.team, s.quota, s.running[:600]) for s in load_helios(shared_data / "helios-earth-vc-allocation")
    ]
    jobs = derive_jobs(series)
    start = utc_now().replace(second=0, microsecond=0)
    trace = Trace(jobs, [], start, 600)
    with sessions.begin() as session:
        result = import_sacct(session, sacct_lines(trace), source="derived")
        assert result.errors == [] and result.jobs == len(jobs)
        placed: dict[str, set[tuple[str, int]]] = {}
        for job_id, host, index in session.execute(
            select(Job.job_id, Node.hostname, Gpu.gpu_index)
            .join(Allocation, Allocation.job_pk == Job.id)
            .join(Gpu, Gpu.id == Allocation.gpu_id)
            .join(Node, Node.id == Gpu.node_id)
        ):
            placed.setdefault(job_id, set()).add((host, index))
    assert placed == {str(job.job_number): set(job.gpus) for job in jobs}


def _demo(
    tmp_path: Path, *args: str, shared: str | None = None, database_url: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FINOPS_DATA_DIR": str(tmp_path / "data")}
    if shared is not None:
        env["FINOPS_SHARED_DATA"] = shared
    database = ["--database-url", database_url] if database_url else []
    return subprocess.run(
        [sys.executable, "-m", "finops.cli", "demo", "--headless", *database, *args],
        capture_output=True, text=True, env=env, check=True, timeout=600,
    )  # fmt: skip


def test_demo_on_a_helios_slice_keeps_allocation_and_conserves_cost(
    tmp_path: Path, shared_data: Path, database_url: str
) -> None:
    minutes = 150
    trace_dir = shared_data / "helios-earth-vc-allocation"
    out = tmp_path / "r.json"
    trace = f"helios:{trace_dir}"
    run = _demo(
        tmp_path, "--trace", trace, "--minutes", str(minutes), "--report-json", str(out), database_url=database_url
    )
    assert "real Helios" in run.stdout and "DERIVED" in run.stdout
    # Each derived profile names the real capture it came from, and the one paragraph says what else is derived.
    assert "'tensor-core training': DERIVED from the capture nvidia-docs-a100-mig-busy.prom" in run.stdout
    assert "'kernel-busy, inefficient': DERIVED from the capture ericsson-ccd-tesla-t4-busy.prom" in run.stdout
    assert "not measured" in run.stdout and "InfiniBand" in run.stdout
    rows = {row["team"]: row for row in orjson.loads(out.read_bytes())}
    held = {series.team: 60 * sum(series.running[:minutes]) for series in load_helios(trace_dir)}
    # A team with no GPU held in the slice has no ledger rows, hence no report row.
    assert set(rows) == {team for team, seconds in held.items() if seconds} | {"__unallocated__"}
    for team, seconds in held.items():
        assert rows.get(team, {"allocated_gpu_seconds": 0})["allocated_gpu_seconds"] == seconds
    gpu_seconds = 512 * minutes * 60
    assert sum(row["allocated_gpu_seconds"] for row in rows.values()) == gpu_seconds
    rate = load_catalog().rate("NVIDIA H100 80GB HBM3", PricingModel.ON_DEMAND, utc_now())
    capacity = (rate * gpu_seconds / 3600).quantize(Decimal("0.01"))
    assert sum(Decimal(row["allocated_cost"]) for row in rows.values()) == capacity
    engine = make_engine(database_url)
    try:
        with session_factory(engine)() as session:
            # Both measured and unmeasured hardware activity reached the service, through the real ingest.
            readings = session.execute(
                select(func.count(GpuSample.sm_active_ratio), func.count(), func.max(GpuSample.tensor_active_ratio))
            ).one()
            reasons = set(session.scalars(select(IdleEpisode.reason).distinct()))
            kinds = set(session.scalars(select(NodeIoHour.kind).distinct()))
    finally:
        engine.dispose()
    assert 0 < readings[0] < readings[1] and readings[2] > 0.8
    # The slice's idle jobs reading Lustre and waiting on InfiniBand are judged so (finops.analysis.waste).
    assert {"waiting_on_storage", "waiting_on_network"} <= reasons
    assert {"lustre_read", "infiniband_received"} <= kinds


def test_demo_without_shared_data_says_it_is_synthetic_and_every_command_it_names_works(tmp_path: Path) -> None:
    run = _demo(tmp_path, "--minutes", "30", shared=str(tmp_path / "absent"))
    assert "SYNTHETIC" in run.stdout
    assert "nominal" in run.stdout
    assert "GPU activity is not measured" in run.stdout  # no captures: no activity field, never an invented one
    assert "TOTAL" in run.stdout
    # The demo ends by naming its database and the commands that explore it: each works as printed.
    explore = run.stdout.split("To explore it with the other commands, in this shell:\n")[1].splitlines()
    assert explore[0].startswith("  export FINOPS_DATABASE_URL=sqlite:///") and "demo.sqlite" in explore[0]
    env = {**os.environ, "FINOPS_DATA_DIR": str(tmp_path / "data")}
    env["FINOPS_DATABASE_URL"] = explore[0].split("=", 1)[1]
    commands = [line.split("#")[0].split()[1:] for line in explore[1:]]
    assert commands[0][0] == "report" and commands[0][-2:] == ["--by", "job"]
    for command in commands:
        if command[0] == "dashboard":
            continue  # serves until stopped: tests/dashboards start it
        done = subprocess.run(
            [sys.executable, "-m", "finops.cli", *command], capture_output=True, text=True, env=env, timeout=300
        )
        assert done.returncode == 0 and "Traceback" not in done.stderr, (command, done.stdout, done.stderr)
        assert done.stdout.strip(), command
    by_job = subprocess.run(
        [sys.executable, "-m", "finops.cli", *commands[0], "--format", "json"],
        capture_output=True, text=True, env=env, timeout=300, check=True,
    )  # fmt: skip
    rows = [row for row in orjson.loads(by_job.stdout) if row["job"] != "__unallocated__"]
    assert rows and all(row["name"] and row["team"] and row["user"] and row["start"] and row["gpus"] for row in rows)
