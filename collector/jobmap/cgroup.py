"""The job or pod a process belongs to, from its cgroup path (``/proc/<pid>/cgroup``).

Format (Linux ``Documentation/admin-guide/cgroup-v1/cgroups.rst`` and ``cgroup-v2.rst``): lines
``<hierarchy id>:<controllers>:<path>``; v2 has the single line ``0::<path>``. Slurm's task/cgroup plugin puts a
job's processes under ``…/job_<id>/…`` (v1: ``/slurm/uid_<uid>/job_<id>/step_<n>/…``; v2:
``/system.slice/slurmstepd.scope/job_<id>/step_<n>/…``; the id is the raw job id, also for array tasks). The
kubelet puts a pod's containers under ``…/pod<uid>/…`` (cgroupfs driver) or
``…/kubepods-<qos>-pod<uid with _ for ->.slice/…`` (systemd driver).
"""

from __future__ import annotations

import re
from pathlib import Path

SLURM_JOB = re.compile(r"/job_(\d+)(?:/|$)")
POD = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")


def job_of_cgroup(text: str) -> str | None:
    """The job id in a ``/proc/<pid>/cgroup`` text: the Slurm job id, ``pod/<uid>`` for a Kubernetes pod, or None."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        slurm = SLURM_JOB.search(path)
        if slurm is not None:
            return slurm.group(1)
        pod = POD.search(path)
        if pod is not None:
            return "pod/" + pod.group(1).replace("_", "-")
    return None


def job_of_process(proc_root: Path, pid: str) -> str | None:
    """The job of process ``pid`` under ``proc_root``; None if it has none or is gone."""
    try:
        return job_of_cgroup((proc_root / pid / "cgroup").read_text())
    except OSError:
        return None
