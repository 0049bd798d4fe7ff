"""Reading the Helios "Earth" per-team allocation week (SenseTime, CC-BY-4.0) from ``../shared/data``.

Files: ``<vc>_cluster_sequence_vc_<from>_to_<to>.csv``, one row per minute, columns documented in the
folder's SOURCE.md; this uses ``time``, ``total_gpu_num`` (the VC's quota) and ``running_gpu_num`` (GPUs
held by running jobs). Attribution: Hu et al., "Characterization and Prediction of Deep Learning Workloads
in Large-Scale GPU Datacenters", SC '21.
"""

from __future__ import annotations

import csv
from datetime import datetime, timedelta
from pathlib import Path

from finops.demo.allocation import TeamSeries
from finops.errors import FinopsError

HELIOS_TEAMS = ("vcpDC", "vc6YE", "vcvlY", "vc3sl", "vchbv", "vcira")


class HeliosTraceError(FinopsError, ValueError):
    """The Helios folder cannot be replayed: a VC's file is missing or a row is bad; the message names the
    file (and line)."""


def load_helios(directory: Path) -> list[TeamSeries]:
    """The six VCs' minute series, in :data:`HELIOS_TEAMS` order.

    Raises :class:`HeliosTraceError` naming a missing file, or the file and line of a bad row (non-integer
    count, a minute missing or repeated, a quota that changes, series of different lengths).
    """
    series = []
    for team in HELIOS_TEAMS:
        matches = sorted(directory.glob(f"{team}_cluster_sequence_vc_*.csv"))
        if not matches:
            raise HeliosTraceError(f"no {team}_cluster_sequence_vc_*.csv in {directory}")
        series.append(_read_team(team, matches[0]))
    lengths = {len(s.running) for s in series}
    if len(lengths) != 1:
        raise HeliosTraceError(f"Helios series in {directory} have different lengths: {sorted(lengths)}")
    return series


def _read_team(team: str, path: Path) -> TeamSeries:
    running: list[int] = []
    quota: int | None = None
    previous: datetime | None = None
    with path.open(newline="") as handle:
        for line, row in enumerate(csv.DictReader(handle), start=2):
            try:
                minute = datetime.fromisoformat(row["time"])
                row_quota, held = int(row["total_gpu_num"]), int(row["running_gpu_num"])
            except (KeyError, TypeError, ValueError) as exc:
                raise HeliosTraceError(f"{path}:{line}: {exc}") from exc
            if previous is not None and minute - previous != timedelta(minutes=1):
                raise HeliosTraceError(f"{path}:{line}: time {minute} does not follow {previous} by one minute")
            if quota is not None and row_quota != quota:
                raise HeliosTraceError(f"{path}:{line}: total_gpu_num {row_quota} differs from {quota}")
            quota, previous = row_quota, minute
            running.append(held)
    if quota is None:
        raise HeliosTraceError(f"{path}: no rows")
    return TeamSeries(team, quota, running)
