"""The GPU → job mapping directory written by a Slurm prolog and cleared by the epilog.

Format: one file per GPU, named by the GPU's index (the convention of dcgm-exporter's ``--hpc-job-mapping-dir``
and of jobstats' ``/run/gpustat``, whose files are named by the device minor number, equal to the index on
usual systems) and, written by our prolog, also by its UUID (``GPU-…``, or ``MIG-…`` for a MIG instance). Each
line starts with a job id; jobstats writes ``<job id> <uid>``, dcgm-exporter one job id per line. A file
naming several jobs (a GPU shared by time-slicing) maps to no single job.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)


def read_mapping_dir(directory: Path) -> dict[str, str]:
    """File name (GPU index or UUID) → job id, for files naming exactly one job.

    A missing directory gives ``{}``; an unreadable file is logged and skipped; empty files are skipped.
    """
    mapping: dict[str, str] = {}
    try:
        entries = list(directory.iterdir())
    except FileNotFoundError:
        return {}
    for entry in entries:
        if entry.name.startswith(".") or not entry.is_file():
            continue
        try:
            lines = entry.read_text().splitlines()
        except OSError as exc:
            log.warning("%s: unreadable (%s); skipped", entry, exc.strerror)
            continue
        jobs = {line.split()[0] for line in lines if line.strip()}
        if len(jobs) == 1:
            mapping[entry.name] = jobs.pop()
        elif len(jobs) > 1:
            log.debug("%s names %d jobs (shared GPU): no single job", entry, len(jobs))
    return mapping
