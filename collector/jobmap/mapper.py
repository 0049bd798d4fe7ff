"""Puts the job holding each GPU on the GPU's samples, and each compute process's job on its sample. The jobs'
shares of a GPU that processes of several jobs use at once (time-slicing, MPS) are computed from those samples by
:func:`collector.contract.wire.shared_job_utilization`."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from collector.contract.sample import Sample
from collector.jobmap.cgroup import job_of_process
from collector.jobmap.mapping_dir import Mappings, read_mappings

log = logging.getLogger(__name__)


class JobMapper:
    """Fills :attr:`Sample.job_id` of ``entity="gpu"`` samples that have none (a source such as dcgm may have set it),
    and of ``entity="gpu_process"`` samples, by the process's cgroup.

    Order: the mapping directory by UUID, then (whole GPUs only) by index, as it was at the sample's timestamp
    (:meth:`collector.jobmap.mapping_dir.Mappings.job_at`: a job whose epilog ran after the reading was taken
    keeps it); else the jobs of the GPU's compute
    processes (``entity="gpu_process"`` samples with the same ``uuid``; a whole GPU also counts its MIG
    instances' processes) through their cgroups. Several distinct jobs on one GPU give no job (logged once per
    GPU). The job of a PID is cached while the PID keeps appearing.

    Args:
        mapping_dir: the prolog's directory (:mod:`collector.jobmap.mapping_dir`), or None.
        proc_root: procfs mount point, for ``<proc_root>/<pid>/cgroup``.
    """

    def __init__(self, mapping_dir: Path | None, proc_root: Path = Path("/proc")) -> None:
        self.mapping_dir = mapping_dir
        self.proc_root = proc_root
        self._pid_jobs: dict[str, str | None] = {}
        self._ambiguous_logged: set[str] = set()

    def annotate(self, samples: list[Sample]) -> list[Sample]:
        """``samples`` with the GPU and process samples' job ids filled in where known; other samples unchanged."""
        if not any(s.entity in ("gpu", "gpu_process") and s.job_id is None for s in samples):
            return samples
        mappings = read_mappings(self.mapping_dir) if self.mapping_dir is not None else Mappings()
        process_jobs = self._process_jobs(samples)
        parents = {s.labels["uuid"]: s.labels.get("parent_uuid", "") for s in samples if s.entity == "gpu"}
        annotated = []
        for sample in samples:
            job = None
            if sample.job_id is not None:
                pass
            elif sample.entity == "gpu":
                job = self._job(sample, mappings, process_jobs, parents)
            elif sample.entity == "gpu_process":
                job = self._pid_jobs.get(sample.labels["pid"])
            if job is not None:
                sample = dataclasses.replace(sample, job_id=job)
            annotated.append(sample)
        return annotated

    def _process_jobs(self, samples: list[Sample]) -> dict[str, set[str]]:
        """Device UUID → jobs of the processes running on it."""
        jobs: dict[str, set[str]] = {}
        seen = set()
        for sample in samples:
            if sample.entity != "gpu_process":
                continue
            pid = sample.labels["pid"]
            seen.add(pid)
            if pid not in self._pid_jobs:
                self._pid_jobs[pid] = job_of_process(self.proc_root, pid)
            job = self._pid_jobs[pid]
            if job is not None:
                jobs.setdefault(sample.labels["uuid"], set()).add(job)
        for gone in set(self._pid_jobs) - seen:
            del self._pid_jobs[gone]
        return jobs

    def _job(
        self, sample: Sample, mappings: Mappings, process_jobs: dict[str, set[str]], parents: dict[str, str]
    ) -> str | None:
        uuid = sample.labels["uuid"]
        whole = not sample.labels.get("mig_profile")
        mapped = mappings.job_at(uuid, sample.timestamp)
        if mapped is None and whole:
            mapped = mappings.job_at(sample.labels["gpu"], sample.timestamp)
        if mapped is not None:
            return mapped
        jobs = set(process_jobs.get(uuid, set()))
        if whole:
            for child, parent in parents.items():
                if parent == uuid:
                    jobs |= process_jobs.get(child, set())
        if len(jobs) == 1:
            return jobs.pop()
        if len(jobs) > 1 and uuid not in self._ambiguous_logged:
            log.info("GPU %s runs processes of %d jobs (%s): no single job", uuid, len(jobs), ", ".join(sorted(jobs)))
            self._ambiguous_logged.add(uuid)
        return None
