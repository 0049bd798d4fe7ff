"""The cost report by job says each job's state and how much of the GPU time it held has no reading, in the table,
JSON and CSV alike (the hand-computed slice of tests/support/scenario.py, on SQLite and PostgreSQL)."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

from finops.analysis.report import cost_report
from finops.analysis.report_format import report_csv, report_dicts, report_table
from finops.db.models import UNALLOCATED_TEAM
from finops.ledger.rollup import rollup
from finops.timeutil import to_epoch


def test_job_rows_have_their_state_and_unmetered_share(loaded) -> None:  # type: ignore[no-untyped-def]
    """Job 502 runs on after the slice's readings end at T+2h: its third hour held, [T+2h, T+3h), has no reading.
    Held 1.5 h metered + 1 h unmetered: 40 % of its held time unmetered; job 501 ended at T+90 min, all metered."""
    sessions, t0, _, pricing = loaded
    with sessions.begin() as session:
        rollup(session, pricing, to_epoch(t0 + timedelta(hours=3)))
    with sessions() as session:
        rows = cost_report(session, t0, t0 + timedelta(hours=3), "job")
    dicts = {d["job"]: d for d in report_dicts(rows, "job")}
    assert {job: (d["state"], d["unmetered_gpu_hours"], d["unmetered_share"]) for job, d in dicts.items()} == {
        "501": ("COMPLETED", 0.0, 0.0),
        "502": ("RUNNING", 1.0, 0.4),
        UNALLOCATED_TEAM: (None, 0.0, None),
    }
    # used + idle + unmetered = allocated: the unmetered hour is neither used nor idle
    running = dicts["502"]
    assert running["used_gpu_hours"] + running["idle_gpu_hours"] + running["unmetered_gpu_hours"] == 2.5

    parsed = {row["job"]: row for row in csv.DictReader(io.StringIO(report_csv(rows, "job")))}
    assert (parsed["502"]["state"], parsed["502"]["unmetered_share"]) == ("RUNNING", "0.4")
    assert (parsed[UNALLOCATED_TEAM]["state"], parsed[UNALLOCATED_TEAM]["unmetered_share"]) == ("", "")

    lines = report_table(rows, "job").splitlines()
    headers = lines[1].split()
    assert "state" in headers and "unmetered" in headers
    by_job = {line.split()[0]: line for line in lines[2:]}
    assert " RUNNING " in by_job["502"] and "1.00 (40.0%)" in by_job["502"]
    assert " COMPLETED " in by_job["501"] and "(" not in by_job["501"].split("COMPLETED")[1].split()[4]
    assert "1.00 (25.0%)" in by_job["TOTAL"], "1 unmetered of the 4 GPU-hours jobs held"
