"""A real Slurm 22.05 cluster for tests, from Debian's packages (slurmctld, slurmd, slurmdbd, slurm-client, munge,
mariadb-server), all on this machine and all under one directory:

- munged with its own key and socket (``AuthInfo=socket=…`` points every daemon and client at it);
- slurmdbd on a MariaDB database of the run's own (``slurm_test_<pid>_<random>`` on 127.0.0.1:3306, user root, no
  password; override with ``FINOPS_TEST_MARIADB``), dropped at the end;
- slurmctld and four ``slurmd -N node<i>`` (``%n`` in SlurmdSpoolDir, SlurmdLogFile, SlurmdPidFile;
  ``SlurmdParameters=config_overrides``: each node is what slurm.conf says, whatever the machine has), each node with
  ``Gres=gpu:h100:8`` on eight character devices made with ``mknod`` (major 195, as ``/dev/nvidia<minor>``);
- ``AccountingStorageTRES=gres/gpu,gres/gpu:h100``: sacct's AllocTRES names the GPUs;
- the project's Prolog and Epilog (``collector/jobmap/slurm/``) with ``PrologFlags=Alloc``, so they run on every
  node of a job when it is allocated. slurmd gives them a fresh environment (no ``GPU_JOB_MAPPING_DIR``), so
  slurm.conf names two one-line wrappers that set it to the node's own mapping directory ``map/<node>`` (four nodes
  share this machine; a real node uses the default ``/run/gpustat``) and run the project's scripts.

Every port is free at start (two test runs may share the machine). No cgroups: ``ProctrackType=proctrack/linuxproc``,
``TaskPlugin=task/none``, ``JobAcctGatherType=jobacct_gather/none`` (the test host may run in a container without a
writable cgroup tree; GPU accounting does not need them). The daemons run as root (``SlurmUser=root``), which
slurmd needs anyway.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from tests.support.environment import REPO_ROOT, unavailable
from tests.support.servers import free_port

SLURM_PROGRAMS = {
    "munged": "munge",
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "slurmdbd": "slurmdbd",
    "sacctmgr": "slurm-client",
    "sbatch": "slurm-client",
    "mysql": "mariadb-client (with mariadb-server)",
    "mknod": "coreutils",
}
"""Programs the cluster needs → the Debian package that has them (``.ci/run`` installs them)."""

NODES = tuple(f"node{i}" for i in range(1, 5))
GPUS_PER_NODE = 8
GPU_TYPE = "h100"
CLUSTER_NAME = "live"
ACCOUNTS = ("vision", "speech")
PROLOG = REPO_ROOT / "collector" / "jobmap" / "slurm" / "prolog.sh"
EPILOG = REPO_ROOT / "collector" / "jobmap" / "slurm" / "epilog.sh"

_T = TypeVar("_T")


@dataclass
class SlurmCluster:
    """A running cluster: ``root`` holds everything (``etc/slurm.conf``, logs, spool, ``dev/nvidia<i>``,
    ``map/<node>``); :attr:`env` is the environment its client commands need (``SLURM_CONF``, ``TZ=UTC``)."""

    root: Path
    conf: Path
    database: str
    nodes: tuple[str, ...] = NODES
    cluster: str = CLUSTER_NAME
    startup_seconds: float = 0.0
    env: dict[str, str] = field(default_factory=dict)

    def mapping_dir(self, node: str) -> Path:
        """The GPU → job directory the Prolog writes on ``node`` (``gpu-finops collector --job-mapping-dir``)."""
        return self.root / "map" / node

    def run(self, *argv: str, check: bool = True, timeout: float = 60) -> str:
        """Run a Slurm client command against this cluster; its standard output. Raises with stderr if it fails."""
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def sbatch(self, *options: str, script: str | None = None, wrap: str = "sleep 1") -> str:
        """Submit a batch job (``--wrap`` of ``wrap``, or the ``script`` text, which may hold ``#SBATCH hetjob``
        lines); its job id. Output goes to the cluster's ``out`` directory."""
        argv = ["sbatch", "--parsable", f"--output={self.root / 'out' / '%j.out'}", *options]
        if script is not None:
            path = self.root / "out" / f"script-{secrets.token_hex(4)}.sh"
            path.write_text(script)
            argv.append(str(path))
        else:
            argv.append(f"--wrap={wrap}")
        return self.run(*argv).strip().split(";")[0]

    def job_state(self, job_id: str) -> str:
        """The controller's state of a job (``PENDING``, ``RUNNING``, ``COMPLETED``…); of a het job its leader's."""
        out = self.run("scontrol", "show", "job", "-o", job_id, check=False)
        for item in out.split():
            if item.startswith("JobState="):
                return item.removeprefix("JobState=")
        return "GONE"

    def sacct_command(self) -> str:
        """``FINOPS_SACCT_COMMAND`` for this cluster: sacct with its ``SLURM_CONF`` (sacct reads nothing else)."""
        return f"env SLURM_CONF={self.conf} sacct"

    def log_tail(self) -> str:
        """The last lines of every daemon's log, for a failure message."""
        parts = []
        for log in sorted((self.root / "log").glob("*.log")):
            lines = log.read_text(errors="replace").splitlines()[-15:]
            parts.append(f"--- {log.name}\n" + "\n".join(lines))
        return "\n".join(parts)


def wait_for(what: str, check: Callable[[], _T | None], timeout: float = 60, cluster: SlurmCluster | None = None) -> _T:
    """Poll ``check`` until it returns something other than None or False; raise naming ``what`` (and the daemons'
    logs) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result is not None and result is not False:
            return result
        if time.monotonic() > deadline:
            logs = cluster.log_tail() if cluster else ""
            raise AssertionError(f"{what}: not so after {timeout:g} s\n{logs}")
        time.sleep(0.25)


def missing_programs() -> list[str]:
    """The programs of :data:`SLURM_PROGRAMS` not found, each with its Debian package."""
    return [f"{name} ({package})" for name, package in SLURM_PROGRAMS.items() if shutil.which(name) is None]


def _mysql(sql: str) -> subprocess.CompletedProcess[str]:
    host, port, user = _mariadb()
    return subprocess.run(
        ["mysql", f"--host={host}", f"--port={port}", f"--user={user}", "--batch", "-e", sql],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


def _mariadb() -> tuple[str, int, str]:
    """MariaDB host, port and user (``FINOPS_TEST_MARIADB`` = ``user@host:port``, default ``root@127.0.0.1:3306``)."""
    user, _, address = os.environ.get("FINOPS_TEST_MARIADB", "root@127.0.0.1:3306").rpartition("@")
    host, _, port = address.partition(":")
    return host, int(port or 3306), user or "root"


@contextmanager
def slurm_cluster(root: Path) -> Iterator[SlurmCluster]:
    """Start the cluster under ``root`` (an empty directory) and yield it once all four nodes are idle; stop every
    daemon and drop its database when the block ends. Skips (fails under ``CI=true``) when a program is missing or
    MariaDB does not answer; raises with the daemons' logs when they do not come up within a minute."""
    missing = missing_programs()
    if missing:
        unavailable(f"a live Slurm needs {', '.join(missing)}: install them (.ci/run does)")
    answer = _mysql("SELECT 1")
    if answer.returncode != 0:
        unavailable(f"MariaDB at {'{2}@{0}:{1}'.format(*_mariadb())} does not answer: {answer.stderr.strip()}")
    database = f"slurm_test_{os.getpid()}_{secrets.token_hex(4)}"
    started = time.monotonic()
    with ExitStack() as stack:
        created = _mysql(f"CREATE DATABASE `{database}`")
        if created.returncode != 0:
            unavailable(f"MariaDB refuses CREATE DATABASE: {created.stderr.strip()}")
        stack.callback(_mysql, f"DROP DATABASE IF EXISTS `{database}`")
        cluster = _configure(root, database)
        spawn = _Spawner(stack, cluster)
        socket_path = root / "munge" / "munge.socket"
        munge = root / "munge"
        spawn("munged", ["munged", "--foreground", "--force", f"--key-file={munge / 'munge.key'}",
                         f"--socket={socket_path}", f"--pid-file={munge / 'munged.pid'}",
                         f"--seed-file={munge / 'munged.seed'}",
                         f"--log-file={root / 'log' / 'munged.log'}"])  # fmt: skip
        wait_for("munged listens", socket_path.exists, 20, cluster)
        spawn("slurmdbd", ["slurmdbd", "-D"])
        wait_for(
            "slurmdbd answers", lambda: _answers(cluster, "sacctmgr", "--noheader", "list", "cluster"), 30, cluster
        )
        cluster.run("sacctmgr", "--immediate", "add", "cluster", cluster.cluster)
        for account in ACCOUNTS:
            cluster.run("sacctmgr", "--immediate", "add", "account", account, f"cluster={cluster.cluster}")
        cluster.run("sacctmgr", "--immediate", "add", "user", "root", f"account={','.join(ACCOUNTS)}")
        spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(cluster.conf)])
        wait_for("slurmctld answers", lambda: _answers(cluster, "scontrol", "ping"), 30, cluster)
        for node in cluster.nodes:
            spawn(f"slurmd-{node}", ["slurmd", "-D", "-N", node, "-f", str(cluster.conf)])
        wait_for("all nodes idle", lambda: _all_idle(cluster), 60, cluster)
        cluster.startup_seconds = time.monotonic() - started
        yield cluster


class _Spawner:
    """Starts daemons in the foreground (their output to ``log/<name>.out``), stopped in reverse order at exit."""

    def __init__(self, stack: ExitStack, cluster: SlurmCluster) -> None:
        self.stack, self.cluster = stack, cluster

    def __call__(self, name: str, argv: list[str]) -> None:
        out = (self.cluster.root / "log" / f"{name}.out").open("w")
        process = subprocess.Popen(argv, env=self.cluster.env, stdout=out, stderr=subprocess.STDOUT)
        self.stack.callback(_stop, process, out)
        time.sleep(0.05)
        if process.poll() is not None:
            raise AssertionError(f"{name} exited {process.returncode} at start\n{self.cluster.log_tail()}")


def _stop(process: subprocess.Popen[bytes], out: object) -> None:
    """Stop one daemon (SIGTERM, then SIGKILL after 15 s)."""
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)
    if hasattr(out, "close"):
        out.close()


def _answers(cluster: SlurmCluster, *argv: str) -> bool:
    return subprocess.run(argv, env=cluster.env, capture_output=True, timeout=20, check=False).returncode == 0


def _all_idle(cluster: SlurmCluster) -> bool:
    out = subprocess.run(["sinfo", "--noheader", "--Node", "--format=%N %t"], env=cluster.env, capture_output=True,
                         text=True, timeout=20, check=False).stdout  # fmt: skip
    states = dict(line.split() for line in out.splitlines() if line.strip())
    return all(states.get(node) == "idle" for node in cluster.nodes)


def _configure(root: Path, database: str) -> SlurmCluster:
    """Write the munge key, the device files, the wrappers and the configuration files under ``root``."""
    for sub in ("etc", "log", "spool", "state", "munge", "dev", "map", "out", "run"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(root / "munge", 0o755)  # munged wants its socket reachable by all
    key = root / "munge" / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    os.chmod(key, 0o400)
    for minor in range(GPUS_PER_NODE):
        device = root / "dev" / f"nvidia{minor}"
        subprocess.run(["mknod", "-m", "666", str(device), "c", "195", str(minor)], check=True, capture_output=True)
    for name, script in (("prolog", PROLOG), ("epilog", EPILOG)):
        wrapper = root / "etc" / f"{name}.sh"
        wrapper.write_text(f'#!/bin/sh\nGPU_JOB_MAPPING_DIR="{root / "map"}/$SLURMD_NODENAME" exec {script}\n')
        wrapper.chmod(0o755)
    ports = {"ctld": free_port(), "dbd": free_port(), **{node: free_port() for node in NODES}}
    host = socket.gethostname().split(".")[0]
    auth = f"AuthInfo=socket={root / 'munge' / 'munge.socket'}"
    db_host, db_port, db_user = _mariadb()
    conf = root / "etc" / "slurm.conf"
    node_lines = [
        f"NodeName={node} NodeHostname={host} NodeAddr=127.0.0.1 Port={ports[node]} CPUs=8 RealMemory=16000 "
        f"Gres=gpu:{GPU_TYPE}:{GPUS_PER_NODE} State=UNKNOWN"
        for node in NODES
    ]
    conf.write_text(
        "\n".join([
            f"ClusterName={CLUSTER_NAME}",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={ports['ctld']}",
            "SlurmUser=root",
            "SlurmdUser=root",
            auth,
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}/%n",
            f"SlurmdLogFile={root / 'log'}/slurmd-%n.log",
            f"SlurmdPidFile={root / 'run'}/slurmd-%n.pid",
            f"SlurmctldLogFile={root / 'log'}/slurmctld.log",
            f"SlurmctldPidFile={root / 'run'}/slurmctld.pid",
            "SlurmdParameters=config_overrides",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/backfill",
            "GresTypes=gpu",
            f"AccountingStorageTRES=gres/gpu,gres/gpu:{GPU_TYPE}",
            "AccountingStorageType=accounting_storage/slurmdbd",
            "AccountingStorageHost=127.0.0.1",
            f"AccountingStoragePass={root / 'munge' / 'munge.socket'}",  # the munge socket of slurmdbd connections
            f"AccountingStoragePort={ports['dbd']}",
            "JobCompType=jobcomp/none",
            f"Prolog={root / 'etc' / 'prolog.sh'}",
            f"Epilog={root / 'etc' / 'epilog.sh'}",
            "PrologFlags=Alloc",
            "ReturnToService=2",
            "MinJobAge=2",
            "KillWait=2",
            "OverTimeLimit=0",
            "InactiveLimit=0",
            "MessageTimeout=20",
            "SlurmdTimeout=60",
            "SchedulerParameters=defer_batch,sched_interval=2",
            *node_lines,
            f"PartitionName=gpu Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP",
            "",
        ])
    )  # fmt: skip
    (root / "etc" / "gres.conf").write_text(
        f"NodeName={','.join(NODES)} Name=gpu Type={GPU_TYPE} File={root / 'dev'}/nvidia[0-{GPUS_PER_NODE - 1}]\n"
    )
    dbd_conf = root / "etc" / "slurmdbd.conf"
    dbd_conf.write_text(
        "\n".join([
            auth,
            "AuthType=auth/munge",
            "DbdHost=localhost",
            "DbdAddr=127.0.0.1",
            f"DbdPort={ports['dbd']}",
            "SlurmUser=root",
            f"LogFile={root / 'log'}/slurmdbd.log",
            f"PidFile={root / 'run'}/slurmdbd.pid",
            "StorageType=accounting_storage/mysql",
            f"StorageHost={db_host}",
            f"StoragePort={db_port}",
            f"StorageUser={db_user}",
            f"StorageLoc={database}",
            "",
        ])
    )  # fmt: skip
    dbd_conf.chmod(0o600)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SLURM_CONF": str(conf), "TZ": "UTC", "HOME": str(root)}
    return SlurmCluster(root=root, conf=conf, database=database, env=env)
