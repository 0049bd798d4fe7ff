"""Against a live Slurm 22.05 (:mod:`tests.support.slurm_cluster`): real jobs of every GPU case
(:mod:`tests.support.slurm_workload`) imported by the scheduled sacct run and by ``gpu-finops import sacct --run``,
rolled up, and each run's GPU-seconds in the ledger compared with Slurm's own ``gres/gpu`` × Elapsed, to the second;
the node inventory from the real ``scontrol show node``; the project's Prolog and Epilog mapping GPUs to jobs on
every node of a two-node job, read by the collector's job map.

Select them with ``-m slurm``. They take about two minutes, most of it the TIMEOUT job's minute.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from finops.db.ledger_tables import LedgerEntry
from finops.db.models import Job, Node
from finops.jobs.slurm_hostlist import expand_hostlist
from finops.jobs.slurm_import import run_sacct
from finops.ledger.rollup import rollup
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import to_epoch
from tests.support.slurm_cluster import SlurmCluster
from tests.support.slurm_workload import SlurmRun, Workload, run_workload, slurm_runs

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "REQUEUED", "RUNNING"}


@pytest.fixture(scope="module")
def workload(live_slurm: SlurmCluster) -> Iterator[Workload]:
    """The jobs of :mod:`tests.support.slurm_workload`, run once for this module; the still-running job is
    cancelled at the end."""
    work = run_workload(live_slurm)
    yield work
    live_slurm.run("scancel", work.ids["running"], check=False)


def _ledger_by_run(session: Session) -> dict[tuple[str, datetime | None], tuple[Job, int]]:
    """(JobIDRaw, start) → (the job row of that run, its GPU-seconds in the ledger)."""
    seconds = dict(
        session.execute(select(LedgerEntry.job_pk, func.sum(LedgerEntry.seconds)).group_by(LedgerEntry.job_pk)).all()
    )
    return {(job.job_id_raw, job.start): (job, int(seconds.get(job.id, 0))) for job in session.scalars(select(Job))}


def _compare(session: Session, runs: list[SlurmRun], until: datetime) -> dict[str, list[int]]:
    """Assert that every run holding GPUs is one job row whose ledger GPU-seconds are Slurm's; return per state
    [runs, Slurm GPU-seconds, ledger GPU-seconds]."""
    stored = _ledger_by_run(session)
    table: dict[str, list[int]] = {}
    billed = [run for run in runs if run.gpus and run.start is not None]
    for run in billed:
        job, seconds = stored[(run.job_id_raw, run.start)]
        assert (job.job_id, job.state, job.gpus, expand_hostlist(job.node_list)) == (
            run.job_id, run.state, run.gpus, list(run.nodes)
        ), run  # fmt: skip
        assert seconds == run.gpu_seconds(until), f"{run}: ledger {seconds} GPU-seconds"
        row = table.setdefault(run.state, [0, 0, 0])
        row[0], row[1], row[2] = row[0] + 1, row[1] + run.gpu_seconds(until), row[2] + seconds
    assert len(stored) == len(billed), "no job row beyond Slurm's runs with GPUs"
    return table


def _rollup(sessions: sessionmaker[Session], until: datetime) -> None:
    with sessions.begin() as session:
        rollup(session, Pricing(load_catalog(), PricingModel.ON_DEMAND), to_epoch(until))


def test_every_case_is_in_slurms_accounting(live_slurm: SlurmCluster, workload: Workload) -> None:
    """The workload is what the comparisons below rely on: each case in the state it is meant to end in, the
    requeued job twice (sacct --duplicates), the pending cancelled job without GPUs."""
    runs = slurm_runs(live_slurm, workload)
    by_id: dict[str, list[str]] = {}
    for run in runs:
        by_id.setdefault(run.job_id, []).append(run.state)
    ids = workload.ids
    assert by_id[ids["requeued"]] == ["REQUEUED", "COMPLETED"]
    assert by_id[ids["failed"]] == ["FAILED"] and by_id[ids["timeout"]] == ["TIMEOUT"]
    assert by_id[ids["cancelled_running"]] == ["CANCELLED"] and by_id[ids["cancelled_pending"]] == ["CANCELLED"]
    assert by_id[ids["running"]] == ["RUNNING"]
    assert {by_id[f"{ids['array']}_{task}"][0] for task in (1, 2, 3)} == {"COMPLETED"}
    assert by_id[f"{ids['het']}+0"] == by_id[f"{ids['het']}+1"] == ["COMPLETED"]
    pending = [run for run in runs if run.job_id == ids["cancelled_pending"]]
    assert (pending[0].gpus, pending[0].nodes, pending[0].elapsed) == (0, (), 0), "never ran, held no GPU"
    assert {run.state for run in runs if run.gpus} == STATES


def test_scheduled_sacct_import_bills_slurms_gpu_seconds(
    live_slurm: SlurmCluster, workload: Workload, sessions: sessionmaker[Session]
) -> None:
    """``run_sacct`` (the scheduler's import) then a rollup: per run, ledger GPU-seconds = ``gres/gpu`` × Elapsed
    (for the running job × the seconds from its Start to the rollup's end); the requeued job's two runs each."""
    done = run_sacct(sessions, command=live_slurm.sacct_command(), cluster=live_slurm.cluster)
    assert "--duplicates" in done.argv and not done.result.errors
    until = done.end
    _rollup(sessions, until)
    runs = slurm_runs(live_slurm, workload)
    with sessions() as session:
        table = _compare(session, runs, until)
        requeued = session.scalars(select(Job).where(Job.job_id == workload.ids["requeued"]).order_by(Job.start))
        assert [job.state for job in requeued] == ["REQUEUED", "COMPLETED"]
    assert set(table) == STATES
    _report(table, workload, live_slurm)


def test_import_sacct_run_command_bills_the_same(
    live_slurm: SlurmCluster, workload: Workload, database_url: str, engine: object
) -> None:
    """``gpu-finops import sacct --run`` (FINOPS_SACCT_COMMAND at the cluster), which rolls up itself: the ended
    runs' GPU-seconds in the ledger are Slurm's, and a second run changes none of them."""
    from finops.db.engine import session_factory

    env = {
        **os.environ,
        "FINOPS_DATABASE_URL": database_url,
        "FINOPS_SACCT_COMMAND": live_slurm.sacct_command(),
    }
    argv = [sys.executable, "-m", "finops.cli", "import", "sacct", "--run", "--cluster", live_slurm.cluster]
    for _ in range(2):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
    ended = [run for run in slurm_runs(live_slurm, workload) if run.state != "RUNNING"]
    sessions = session_factory(engine)  # type: ignore[arg-type]
    with sessions() as session:
        stored = _ledger_by_run(session)
    for run in ended:
        if run.gpus and run.start is not None:
            assert stored[(run.job_id_raw, run.start)][1] == run.gpu_seconds(datetime.now(UTC)), run


def test_node_inventory_from_the_real_scontrol(live_slurm: SlurmCluster, database_url: str, engine: object) -> None:
    """``scontrol show node --oneliner`` of the live cluster through ``gpu-finops nodes import -``: every node,
    its partition, its GRES type resolved to the catalog's H100."""
    from finops.db.engine import session_factory

    listing = live_slurm.run("scontrol", "show", "node", "--oneliner")
    env = {**os.environ, "FINOPS_DATABASE_URL": database_url}
    done = subprocess.run(
        [sys.executable, "-m", "finops.cli", "nodes", "import", "-"],
        input=listing, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{len(live_slurm.nodes)} nodes;"), done.stdout
    with session_factory(engine)() as session:  # type: ignore[arg-type]
        nodes = {node.hostname: node for node in session.scalars(select(Node))}
    assert sorted(nodes) == list(live_slurm.nodes)
    assert {(node.partitions, node.gpu_model) for node in nodes.values()} == {("gpu", "H100-SXM-80GB")}


def test_prolog_maps_gpus_to_the_job_on_every_node(live_slurm: SlurmCluster, workload: Workload) -> None:
    """With ``PrologFlags=Alloc`` the project's Prolog ran on both nodes of the two-node job (``--gres=gpu:h100:2``
    per node): two files per node named by GPU index, each ``<job id> <uid>``, which the collector's job map puts
    on those GPUs' readings; the Epilog removed them at the job's end."""
    job = workload.ids["two_nodes"]
    assert len(workload.mapping) == 2
    for host, files in workload.mapping.items():
        assert len(files) == 2 and all(text == f"{job} 0\n" for text in files.values()), (host, files)
        held = {gpu for gpu, holder in workload.collector[host].items() if holder == job}
        assert held == set(files), f"{host}: the collector's job map puts job {job} on GPUs {held}"
    assert workload.cleared == {host: {} for host in workload.mapping}


def _report(table: dict[str, list[int]], workload: Workload, cluster: SlurmCluster) -> None:
    """The figures (printed with ``-s``): start-up, workload time, and per state Slurm's and the ledger's
    GPU-seconds."""
    print(f"\nlive Slurm: cluster up in {cluster.startup_seconds:.1f} s, workload {workload.seconds:.1f} s")
    print("state      runs  Slurm GPU-s  ledger GPU-s")
    for state, (runs, slurm, ledger) in sorted(table.items()):
        print(f"{state:<10} {runs:>4} {slurm:>12} {ledger:>13}")
