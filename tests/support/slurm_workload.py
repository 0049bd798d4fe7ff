"""A mix of real jobs run on a :class:`~tests.support.slurm_cluster.SlurmCluster`, and Slurm's own accounting of
them: every GPU case the sacct import meets (typed and untyped GRES, ``--gpus``, two nodes, an array, a
heterogeneous job, FAILED, CANCELLED while running and while pending, TIMEOUT, a job requeued once, a job still
RUNNING), with each job's GPU → job mapping files as the Prolog wrote them on every node while it ran.

Wall time: about 90 s, set by the TIMEOUT job: Slurm's time limits are whole minutes (``--time=1``) and slurmctld
checks them every 30 s; every other job runs meanwhile.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from collector.contract.sample import Sample
from collector.jobmap.mapper import JobMapper
from finops.jobs.slurm import parse_gpu_tres
from finops.jobs.slurm_hostlist import expand_hostlist
from tests.support.slurm_cluster import GPUS_PER_NODE, SlurmCluster, wait_for

JOBS: dict[str, tuple[tuple[str, ...], str]] = {
    "timeout": (("--time=1", "--gres=gpu:1", "--account=speech"), "sleep 300"),
    "typed": (("--gres=gpu:h100:2", "--account=vision"), "sleep 3"),
    "untyped": (("--gres=gpu:1", "--account=speech"), "sleep 3"),
    "gpus": (("--gpus=3", "--account=vision"), "sleep 3"),
    "two_nodes": (("--nodes=2", "--gres=gpu:h100:2", "--account=vision"), "sleep 8"),
    "array": (("--array=1-3", "--gres=gpu:1", "--account=speech"), "sleep 2"),
    "failed": (("--gres=gpu:1", "--account=speech"), "sleep 1; exit 1"),
    "cancelled_running": (("--gres=gpu:2", "--account=vision"), "sleep 300"),
    "cancelled_pending": (("--hold", "--gres=gpu:1", "--account=vision"), "sleep 1"),
    "requeued": (("--gres=gpu:1", "--account=speech"), "sleep 6"),
    "running": (("--gres=gpu:2", "--account=vision"), "sleep 3600"),
}
"""Job name → (sbatch options, ``--wrap`` command); the heterogeneous job ``het`` is a script (:data:`HET_SCRIPT`)."""

HET_SCRIPT = """#!/bin/sh
#SBATCH --gres=gpu:1 --account=vision
#SBATCH hetjob
#SBATCH --gres=gpu:h100:2 --account=vision
sleep 3
"""

FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "REQUEUED", "NODE_FAIL", "OUT_OF_MEMORY"}


@dataclass(frozen=True, slots=True)
class SlurmRun:
    """One run of one job as ``sacct --allocations --duplicates`` accounts it: GPU-seconds are ``gres/gpu`` ×
    ElapsedRaw (for a run still RUNNING, × the seconds from Start to the instant asked)."""

    job_id: str
    job_id_raw: str
    state: str
    start: datetime | None
    end: datetime | None
    elapsed: int
    gpus: int
    nodes: tuple[str, ...]

    def gpu_seconds(self, until: datetime) -> int:
        """GPU-seconds by Slurm's accounting; a running job's up to ``until``."""
        if self.state == "RUNNING" and self.start is not None:
            return self.gpus * int((until - self.start).total_seconds())
        return self.gpus * self.elapsed


@dataclass
class Workload:
    """The jobs submitted: ``ids`` name → job id (of an array its ArrayJobID, of the het job its leader);
    ``mapping`` host → GPU → job as the two-node job's Prolog wrote it while that job ran; ``cleared`` the same
    hosts' mapping files of that job after its Epilog; ``collector`` host → GPU index → the job the collector's job
    map (:class:`collector.jobmap.mapper.JobMapper` on the host's mapping directory) gave its reading while the
    two-node job ran; ``seconds`` the workload's wall time."""

    ids: dict[str, str] = field(default_factory=dict)
    mapping: dict[str, dict[str, str]] = field(default_factory=dict)
    cleared: dict[str, dict[str, str]] = field(default_factory=dict)
    collector: dict[str, dict[str, str | None]] = field(default_factory=dict)
    seconds: float = 0.0


def run_workload(cluster: SlurmCluster) -> Workload:
    """Submit :data:`JOBS` and the het job, cancel, requeue and wait as each case needs; return once every job but
    ``running`` has a final state in Slurm's accounting."""
    started = time.monotonic()
    work = Workload()
    for name, (options, command) in JOBS.items():
        work.ids[name] = cluster.sbatch(*options, wrap=command)
    work.ids["het"] = cluster.sbatch(script=HET_SCRIPT)
    ids = work.ids

    cluster.run("scancel", ids["cancelled_pending"])
    running = {name: ids[name] for name in ("cancelled_running", "requeued", "two_nodes")}
    wait_for("jobs running", lambda: all(cluster.job_state(i) == "RUNNING" for i in running.values()), 60, cluster)
    two_nodes = expand_hostlist(_scontrol_field(cluster, ids["two_nodes"], "NodeList"))
    work.mapping = wait_for(
        "the Prolog's mapping files on both nodes of the two-node job",
        lambda: _mapping_of(cluster, two_nodes, ids["two_nodes"], expect=2),
        30,
        cluster,
    )
    work.collector = {host: _collector_view(cluster, host) for host in two_nodes}
    time.sleep(2)  # two seconds of run before the requeue and the cancel (runs of 0 s would hold no GPU-seconds)
    cluster.run("scancel", ids["cancelled_running"])
    cluster.run("scontrol", "requeue", ids["requeued"])
    wait_for("requeued job pending", lambda: cluster.job_state(ids["requeued"]) == "PENDING", 30, cluster)
    # A requeued job is held back two minutes (its BeginTime); start it again now.
    cluster.run("scontrol", "update", f"JobId={ids['requeued']}", "StartTime=now")
    wait_for("two-node job ended", lambda: cluster.job_state(ids["two_nodes"]) in ("COMPLETED", "GONE"), 60, cluster)
    work.cleared = wait_for(
        "the Epilog cleared the two-node job's files",
        lambda: (m := _mapping_of(cluster, two_nodes, ids["two_nodes"], expect=0)) is not None and m,
        30,
        cluster,
    )
    waited = [i for name, i in ids.items() if name != "running"]
    wait_for("all jobs but one final in sacct", lambda: _final(cluster, waited), 180, cluster)
    work.seconds = time.monotonic() - started
    return work


def slurm_runs(cluster: SlurmCluster, work: Workload) -> list[SlurmRun]:
    """Every run of the workload's jobs (no steps) in Slurm's accounting,
    ``sacct --allusers --allocations --duplicates --jobs=…``."""
    out = cluster.run(
        "sacct", "--allusers", "--allocations", "--duplicates", "--parsable2", "--noheader",
        f"--jobs={','.join(work.ids.values())}",
        "--format=JobID,JobIDRaw,State,Start,End,ElapsedRaw,AllocTRES,NodeList",
    )  # fmt: skip
    runs = []
    for line in out.splitlines():
        job_id, raw, state, start, end, elapsed, tres, nodes = line.split("|")
        runs.append(
            SlurmRun(
                job_id=job_id,
                job_id_raw=raw,
                state=state.split()[0],
                start=_utc(start),
                end=_utc(end),
                elapsed=int(elapsed),
                gpus=parse_gpu_tres(tres)[0],
                nodes=tuple(expand_hostlist(nodes)),
            )
        )
    return runs


def _utc(text: str) -> datetime | None:
    """A sacct time (printed in UTC: the cluster's client environment has ``TZ=UTC``), None for Unknown/None."""
    if text in ("Unknown", "None"):
        return None
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def _scontrol_field(cluster: SlurmCluster, job_id: str, name: str) -> str:
    for item in cluster.run("scontrol", "show", "job", "-o", job_id).split():
        if item.startswith(f"{name}="):
            return item.split("=", 1)[1]
    raise AssertionError(f"scontrol show job {job_id} has no {name}")


def _mapping_of(cluster: SlurmCluster, hosts: list[str], job_id: str, expect: int) -> dict[str, dict[str, str]] | None:
    """Per host, the mapping files (name → first line) naming ``job_id``, once each host has ``expect`` of them."""
    found: dict[str, dict[str, str]] = {}
    for host in hosts:
        directory = cluster.mapping_dir(host)
        files = {p.name: p.read_text() for p in directory.glob("*") if not p.name.startswith(".")}
        found[host] = {name: text for name, text in files.items() if text.split()[:1] == [job_id]}
        if len(found[host]) != expect:
            return None
    return found


def _collector_view(cluster: SlurmCluster, host: str) -> dict[str, str | None]:
    """GPU index → the job id the collector's job map puts on a reading of each of ``host``'s GPUs, now."""
    readings = [
        Sample(
            "gpu", {"gpu": str(i), "uuid": f"GPU-{host}-{i}", "model": "NVIDIA H100 80GB HBM3"}, {}, datetime.now(UTC)
        )
        for i in range(GPUS_PER_NODE)
    ]
    return {s.labels["gpu"]: s.job_id for s in JobMapper(cluster.mapping_dir(host)).annotate(readings)}


def _final(cluster: SlurmCluster, job_ids: list[str]) -> bool:
    """Whether every job (and each array task and het component) of ``job_ids`` has a final state in sacct."""
    out = cluster.run(
        "sacct", "--allusers", "--allocations", "--parsable2", "--noheader", "--format=JobID,State",
        f"--jobs={','.join(job_ids)}",
    )  # fmt: skip
    states = [line.split("|")[1].split()[0] for line in out.splitlines() if line]
    return bool(states) and all(state in FINAL_STATES for state in states)
