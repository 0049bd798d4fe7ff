"""Lustre traffic: client bytes per file system (llite ``stats``) and server bytes per job (``job_stats``).

Formats (Lustre Operations Manual, "Monitoring Lustre File System I/O" and "Lustre Jobstats"; the files as
HPE's lustre_exporter reads them), under ``<proc_root>/fs/lustre``:

- client ``llite/<fsname>-<instance>/stats``: ``<counter> <count> samples [<unit>] <min> <max> <sum> [<sumsq>]``;
  for ``read_bytes`` and ``write_bytes`` the unit is bytes and the sum is the bytes moved.
- server ``obdfilter/<target>/job_stats`` (OSTs; also ``mdt/<target>/job_stats``, which counts bytes only for
  data-on-MDT): YAML-like blocks ``- job_id: <id>`` … ``read_bytes: { samples: N, unit: bytes, min: …, max: …,
  sum: <bytes> }``. The job id is whatever ``jobid_var`` names; with ``SLURM_JOB_ID`` it is the Slurm job id.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from collector.contract import metric_names as m
from collector.contract.sample import Sample, utc_now
from collector.counters import MonotonicTotals

log = logging.getLogger(__name__)

CLIENT_COUNTERS = {"read_bytes": m.LUSTRE_CLIENT_READ_BYTES, "write_bytes": m.LUSTRE_CLIENT_WRITTEN_BYTES}
JOB_COUNTERS = {"read_bytes": m.LUSTRE_JOB_READ_BYTES, "write_bytes": m.LUSTRE_JOB_WRITTEN_BYTES}
STATS_LINE = re.compile(r"^(\w+)\s+(\d+) samples \[(\w+)\](?:\s+(\d+)\s+(\d+)\s+(\d+))?")
JOB_START = re.compile(r"^- job_id:\s*(.+?)\s*$")
JOB_BYTES = re.compile(r"^\s+(read_bytes|write_bytes):\s*\{.*\bsum:\s*(\d+)")
SERVER_DIRS = ("obdfilter", "mdt")


class LustreSource:
    """``entity="lustre_client"`` samples (label ``filesystem``: the llite directory's fsname; bytes read and
    written by this node, summed over that file system's mounts) and ``entity="lustre_job"`` samples (labels
    ``target``, ``job_id``; :attr:`Sample.job_id` set too; bytes read and written by that job on that target).

    A job label on the server series is inherent: the server counts per job, and the set is bounded by the jobs
    active in the target's ``job_cleanup_interval``. Values are running totals (:class:`MonotonicTotals`).
    No ``<proc_root>/fs/lustre`` gives ``[]``; a malformed line is logged with file and line number and skipped.
    """

    name = "lustre"

    def __init__(self, proc_root: Path = Path("/proc"), clock: Callable[[], datetime] = utc_now) -> None:
        self.root = proc_root / "fs" / "lustre"
        self._clock = clock
        self._totals = MonotonicTotals()

    def collect(self) -> list[Sample]:
        """Client and job samples; ``[]`` on a host without Lustre."""
        if not self.root.is_dir():
            return []
        timestamp = self._clock()
        return self._clients(timestamp) + self._jobs(timestamp)

    def _clients(self, timestamp: datetime) -> list[Sample]:
        per_filesystem: dict[str, dict[str, float]] = {}
        for stats in sorted(self.root.glob("llite/*/stats")):
            instance = stats.parent.name
            filesystem = instance.rsplit("-", 1)[0]
            values = per_filesystem.setdefault(filesystem, {})
            for counter, raw in self._stats_sums(stats).items():
                metric = CLIENT_COUNTERS[counter]
                values[metric] = values.get(metric, 0.0) + self._totals.add((instance, counter), raw)
        return [Sample("lustre_client", {"filesystem": fs}, v, timestamp) for fs, v in per_filesystem.items() if v]

    def _stats_sums(self, path: Path) -> dict[str, int]:
        """``read_bytes``/``write_bytes`` sums of an llite stats file (a counter never used has no sum: 0)."""
        sums: dict[str, int] = {}
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            name = line.split(maxsplit=1)[0] if line.strip() else ""
            if name not in CLIENT_COUNTERS:
                continue
            match = STATS_LINE.match(line)
            if match is None:
                log.warning("%s:%d: malformed stats line; skipped", path, number)
                continue
            sums[name] = int(match.group(6) or 0)
        return sums

    def _jobs(self, timestamp: datetime) -> list[Sample]:
        samples = []
        for directory in SERVER_DIRS:
            for path in sorted(self.root.glob(f"{directory}/*/job_stats")):
                target = path.parent.name
                for job_id, counters in self._job_stats(path).items():
                    values = {
                        JOB_COUNTERS[counter]: float(self._totals.add((target, job_id, counter), raw))
                        for counter, raw in counters.items()
                    }
                    if values:
                        labels = {"target": target, "job_id": job_id}
                        samples.append(Sample("lustre_job", labels, values, timestamp, job_id=job_id))
        return samples

    def _job_stats(self, path: Path) -> dict[str, dict[str, int]]:
        """job id -> {``read_bytes``/``write_bytes``: sum}; lines outside a job block are logged and skipped."""
        jobs: dict[str, dict[str, int]] = {}
        current: dict[str, int] | None = None
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            start = JOB_START.match(line)
            if start is not None:
                current = jobs.setdefault(start.group(1).strip("\"'"), {})
                continue
            counter = JOB_BYTES.match(line)
            if counter is None:
                if re.match(r"^\s+(read|write)_bytes:", line):
                    log.warning("%s:%d: malformed %s line; skipped", path, number, line.split(":")[0].strip())
                continue
            if current is None:
                log.warning("%s:%d: byte counter outside a job block; skipped", path, number)
                continue
            current[counter.group(1)] = int(counter.group(2))
        return jobs
