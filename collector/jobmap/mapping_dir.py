"""The GPU → job mapping directory written by a Slurm prolog and turned into end records by the epilog.

Format: one file per GPU, named by the GPU's index (the convention of dcgm-exporter's ``--hpc-job-mapping-dir``
and of jobstats' ``/run/gpustat``, whose files are named by the device minor number, equal to the index on
usual systems) and, written by our prolog, also by its UUID (``GPU-…``, or ``MIG-…`` for a MIG instance). Each
line starts with a job id; jobstats writes ``<job id> <uid>``, dcgm-exporter one job id per line. A file
naming several jobs (a GPU shared by time-slicing) maps to no single job.

End records: our epilog replaces each file of its job by ``.ended.<name>`` holding ``<job id> <end>``, the end in
epoch seconds (``date -u +%s.%N``). A reading is taken before the collector maps it (a source's read of every GPU
takes time, nvidia-smi a second or more): a reading taken before the epilog ran keeps that job although its file
is gone by then (:meth:`Mappings.job_at`). Dot files name no GPU for dcgm-exporter, and the prolog's own
temporary files are dot files too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

log = logging.getLogger(__name__)

ENDED_PREFIX = ".ended."
"""The epilog's end record of the file ``<name>``: ``.ended.<name>``."""


@dataclass(frozen=True, slots=True)
class Mappings:
    """The mapping directory as read once.

    Attributes:
        live: file name (GPU index or UUID) → job id, for the files naming exactly one job.
        ended: file name → (job id, end: aware UTC datetime) of the end record of the job that left that GPU last.
    """

    live: dict[str, str] = field(default_factory=dict)
    ended: dict[str, tuple[str, datetime]] = field(default_factory=dict)

    def job_at(self, name: str, at: datetime) -> str | None:
        """The job that held GPU ``name`` at ``at`` (aware): the ended job when its epilog ran after ``at``, else
        the job of the GPU's file, else None. The directory is read after ``at``, so a file there was there at
        ``at`` unless an epilog ran in between, which its end record tells."""
        ended = self.ended.get(name)
        if ended is not None and at < ended[1]:
            return ended[0]
        return self.live.get(name)


def read_mappings(directory: Path) -> Mappings:
    """The files and end records of ``directory``.

    A missing directory gives empty mappings; an unreadable file is logged and skipped; empty files are skipped; an
    end record that is not ``<job id> <epoch seconds>`` is logged and skipped.
    """
    mappings = Mappings()
    try:
        entries = list(directory.iterdir())
    except FileNotFoundError:
        return mappings
    for entry in entries:
        ended = entry.name.startswith(ENDED_PREFIX)
        if (entry.name.startswith(".") and not ended) or not entry.is_file():
            continue
        try:
            lines = entry.read_text().splitlines()
        except OSError as exc:
            log.warning("%s: unreadable (%s); skipped", entry, exc.strerror)
            continue
        if ended:
            _read_end(entry, lines, mappings)
            continue
        jobs = {line.split()[0] for line in lines if line.strip()}
        if len(jobs) == 1:
            mappings.live[entry.name] = jobs.pop()
        elif len(jobs) > 1:
            log.debug("%s names %d jobs (shared GPU): no single job", entry, len(jobs))
    return mappings


def _read_end(entry: Path, lines: list[str], mappings: Mappings) -> None:
    words = lines[0].split() if lines else []
    try:
        end = datetime.fromtimestamp(float(words[1]), UTC)
    except (IndexError, ValueError, OverflowError):
        log.warning("%s: not '<job id> <end, epoch seconds>'; skipped", entry)
        return
    mappings.ended[entry.name.removeprefix(ENDED_PREFIX)] = (words[0], end)
