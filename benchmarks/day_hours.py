"""The scheduler's 5-minute cycle late in a UTC day against the same cycle in the day's first hour, this tree's code
and another checkout's side by side in one run.

Usage::

    .venv/bin/python benchmarks/day_hours.py --baseline-tree /tmp/base [DATABASE_URL] [--gpus 512] [--earlier 10]
        [--repeat 2]

``--baseline-tree`` is a checkout of the code to compare with (``git worktree add /tmp/base <commit>``).
``DATABASE_URL`` (default ``postgresql+psycopg://postgres@127.0.0.1:5432/test_day_hours``; PostgreSQL or a
``sqlite:///FILE`` URL) is emptied and migrated afresh for every run, by the code of the tree under test. Prints
figures; asserts nothing about time.

Why: ``gpu_samples`` is partitioned by UTC day, and a day partition holds every reading of its day so far. A part of
the cycle that reads "the readings of the hour" by their instant alone reads the whole partition up to now, so its
cost grows through the day although the hour it judges does not; ``benchmarks/fleet_cycle.py`` runs the day's first
hour, where this cannot show.

Workload: the hour of ``benchmarks/cycle.py`` (``--gpus`` H100s read every 10 s, 10:00 to 11:00 UTC, one job per
node holding its 8 GPUs, each reading labelled with its job as the collector's job map does), stored as the collector
sends it, 5 minutes at a time, a scheduled rollup (:func:`finops.service.scheduler.run_rollup`, its clock at each
5-minute mark) after each part. Two cases per tree, each in a child process with only its tree on the path:

- **first hour**: the day partition holds that hour alone;
- **late**: before it, ``--earlier`` hours of the same day hold the same readings (copied by SQL, shifted by whole
  hours, into an emptied table in time order, as ingest stores them; untimed), rolled up and judged by one rollup at
  10:00 (untimed), as a day's earlier cycles leave them.

Timed: the cycles at 10:55 and at the hour's end (11:00), each split into the parts of ``benchmarks/fleet_cycle.py``
(the ledger, the idle re-judging, the job map). Printed per tree: the medians over ``--repeat`` runs (alternated),
and late ÷ first hour.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from tree_runs import leave_only_tree, recreate_database, run_in_tree, timed

REPO = Path(__file__).resolve().parents[1]
PARTS = ("rollup", "rejudge_idle", "reconcile_job_map")
"""The steps of :func:`finops.service.scheduler.run_rollup` timed apart (its names for them)."""


def _labelled(batches: list[Any]) -> list[Any]:
    """``benchmarks/cycle.py``'s batches with each reading labelled with its node's job (the job map's job id)."""
    return [
        batch.model_copy(
            update={"series": [s.model_copy(update={"job_id": [batch.node] * len(s.ts)}) for s in batch.series]}
        )
        for batch in batches
    ]


def _child(database_url: str, gpus: int, earlier: int) -> dict[str, float]:
    """One measured run with the tree on ``sys.path``: schema afresh, the earlier hours when ``earlier``, the hour
    in 5-minute parts with a scheduled rollup after each; the figures of the two timed cycles."""
    import cycle
    from sqlalchemy import text
    from sqlalchemy.orm import Session, sessionmaker

    import finops.service.scheduler as scheduler
    from finops.analysis.idle import IdlePolicy
    from finops.db.engine import make_engine, upgrade
    from finops.ingest.readings import Ingestor
    from finops.pricing.catalog import Pricing, PricingModel, load_catalog
    from finops.timeutil import from_epoch

    engine = make_engine(database_url)
    upgrade(engine)
    sessions = sessionmaker(engine)
    ingestor = Ingestor()
    pricing, policy = Pricing(load_catalog(), PricingModel.ON_DEMAND), IdlePolicy()
    seconds = dict.fromkeys(PARTS, 0.0)
    for name in PARTS:
        setattr(scheduler, name, timed(getattr(scheduler, name), seconds, name))

    def store(batches: list[Any]) -> None:
        for first in range(0, len(batches), cycle.GROUP):
            with Session(engine) as session, session.begin():
                ingestor.store_all(session, batches[first : first + cycle.GROUP])

    def run(until: int) -> dict[str, float]:
        scheduler.utc_now = functools.partial(from_epoch, until)
        seconds.update(dict.fromkeys(seconds, 0.0))
        began = time.perf_counter()
        scheduler.run_rollup(sessions, pricing, policy)
        return {"seconds": time.perf_counter() - began, **seconds}

    parts = [_labelled(batches) for batches in cycle.hour_parts(gpus)]
    store(parts[0])
    cycle.node_jobs(engine)
    held_from = {"start": cycle.START - (earlier + 1) * 3600}
    with engine.begin() as connection:
        connection.execute(text("UPDATE jobs SET submit = :start, start = :start"), held_from)
        connection.execute(text("UPDATE allocations SET start = :start"), held_from)
    if earlier:  # the hour's readings as a template, then the earlier hours and its first part, in time order
        for batches in parts[1:]:
            store(batches)
        with engine.begin() as connection:
            columns = list(connection.execute(text("SELECT * FROM gpu_samples LIMIT 0")).keys())
            listed = ", ".join(columns)
            shifted = ", ".join("ts - :shift" if c == "ts" else c for c in columns)
            connection.execute(text(f"CREATE TEMPORARY TABLE hour_template AS SELECT {listed} FROM gpu_samples"))  # noqa: S608
            emptying = "TRUNCATE gpu_samples" if engine.dialect.name == "postgresql" else "DELETE FROM gpu_samples"
            connection.execute(text(emptying))  # a fresh heap, filled in time order as ingest fills it
            copy = text(f"INSERT INTO gpu_samples ({listed}) SELECT {shifted} FROM hour_template WHERE ts < :end")  # noqa: S608
            for hours in range(earlier, 0, -1):
                connection.execute(copy, {"shift": hours * 3600, "end": cycle.START + 3600})
            connection.execute(copy, {"shift": 0, "end": cycle.START + cycle.PART})
            connection.execute(text("DROP TABLE hour_template"))
        run(cycle.START)  # the day's earlier hours, as its earlier cycles leave them
    if engine.dialect.name == "postgresql":
        with engine.begin() as connection:
            connection.exec_driver_sql("ANALYZE gpu_samples")
    for mark in range(1, 11):  # the hour's earlier cycles (untimed): the steady state
        run(cycle.START + mark * cycle.PART)
        store(parts[mark])
    figures = {f"55_{name}": value for name, value in run(cycle.START + 11 * cycle.PART).items()}
    store(parts[11])
    figures |= {f"end_{name}": value for name, value in run(cycle.START + 3600).items()}
    engine.dispose()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "database_url", nargs="?", default="postgresql+psycopg://postgres@127.0.0.1:5432/test_day_hours"
    )
    parser.add_argument("--baseline-tree", type=Path, required=True, help="checkout of the code to compare with")
    parser.add_argument("--gpus", type=int, default=512)
    parser.add_argument("--earlier", type=int, default=10, help="hours of the day before the one measured (≤ 10)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child is not None:
        leave_only_tree()
        sys.path.append(str(Path(__file__).resolve().parent))  # cycle.py's workload, behind the tree's packages
        print(json.dumps(_child(options.database_url, options.gpus, options.child)))
        return
    trees = {"baseline": options.baseline_tree.resolve(), "current": REPO}
    cases = {"first hour": 0, "late": min(options.earlier, 10)}
    runs: dict[tuple[str, str], list[dict[str, float]]] = {(t, c): [] for t in trees for c in cases}
    for _ in range(options.repeat):
        for tree_name, case in runs:
            recreate_database(options.database_url)
            args = [options.database_url, "--baseline-tree", str(trees[tree_name]), "--gpus", str(options.gpus),
                    "--child", str(cases[case])]  # fmt: skip
            runs[tree_name, case].append(run_in_tree(trees[tree_name], __file__, args))
    print(
        f"{options.gpus} GPUs, readings every 10 s, 10:00-11:00 UTC; late: {cases['late']} earlier hours in the day; "
        f"{options.repeat} runs each, alternated; load average {os.getloadavg()[0]:.1f}"
    )
    for tree_name in trees:
        for label, name in (("10:55", "55"), ("11:00", "end")):
            line = []
            for case in cases:
                medians = {
                    key: statistics.median(r[f"{name}_{key}"] for r in runs[tree_name, case])
                    for key in ("seconds", *PARTS)
                }
                line.append(
                    f"{case} {medians['seconds']:.2f} s (ledger {medians['rollup']:.2f}, idle "
                    f"{medians['rejudge_idle']:.2f}, job map {medians['reconcile_job_map']:.2f})"
                )
                if case == "late":
                    first = statistics.median(r[f"{name}_seconds"] for r in runs[tree_name, "first hour"])
                    line.append(f"late / first {medians['seconds'] / first:.2f} x")
            print(f"{tree_name:9s} cycle at {label}: " + "; ".join(line))


if __name__ == "__main__":
    main()
