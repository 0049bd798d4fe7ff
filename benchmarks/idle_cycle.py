"""The idle re-judging of the scheduler's 5-minute cycle at fleet scale, cycle after cycle over hours, this tree's code
and another checkout's side by side in one run.

Usage::

    .venv/bin/python benchmarks/idle_cycle.py --baseline-tree /tmp/base [DATABASE_URL] [--gpus 10000] [--hours 2]
        [--repeat 1] [--job-lead 3600]

``--baseline-tree`` is a checkout of the code to compare with (``git worktree add /tmp/base <commit>``).
``DATABASE_URL`` (default ``postgresql+psycopg://postgres@127.0.0.1:5432/test_idle_cycle``; PostgreSQL only) is
emptied and migrated afresh for every run, by the code of the tree under test. Prints figures; asserts nothing about
time.

Why: each cycle re-judges the hours its rollup rebuilt, widened by the idle window and the max gap: the same period
twelve times an hour. Read whole each time, its cost grows through the hour (with the readings since the period's
start) and, for GPUs idle for longer, with their episodes.

Workload: ``--gpus`` H100s (8 a node, one job a node holding them from ``--job-lead`` seconds before the first reading:
by default an hour, so that an idle GPU's episode is its whole run; under the idle grace, 600 s, the episode begins at
the grace's end, clipped from a run that began with the readings, as a job that starts idle has), read every
10 s from 10:00 UTC (``benchmarks/cycle.py``'s start, so the day's partition holds the readings of the hours measured
alone; the period is then a small part of its day so far, read by key, as late in a day), one GPU in ten at 0 %
utilisation all along (an idle episode from 10:00 on), the others at 95 %. Each GPU's first reading is stored as the
collector sends it; the others are made by SQL from it, 5 minutes at a time, each part followed by ``ANALYZE
gpu_samples`` (untimed) and the scheduled cycle of its 5-minute mark (:func:`finops.service.scheduler.run_rollup`,
its clock at the mark), for ``--hours`` hours. Timed: each cycle, and of it the idle re-judging (``rejudge_idle``).
Printed per tree: the idle re-judging at each mark (medians over ``--repeat`` runs, trees alternated), the cycle at
the first hour's end, and the largest of each.
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

from tree_runs import leave_only_tree, recreate_database, run_in_tree, timed

REPO = Path(__file__).resolve().parents[1]
IDLE_EVERY = 10
"""One GPU in this many is idle all along."""
FILL_SQL = """
INSERT INTO gpu_samples (gpu_id, ts, utilization_ratio, power_watts, energy_joules, memory_used_bytes)
SELECT s.gpu_id, t, s.utilization_ratio, s.power_watts, s.energy_joules + s.power_watts * (t - s.ts),
       s.memory_used_bytes
FROM gpu_samples s CROSS JOIN generate_series(CAST(:first AS BIGINT), CAST(:last AS BIGINT), 10) t WHERE s.ts = :start
"""
"""Every GPU's readings [first, last] every 10 s, from its first one (at ``start``): its energy counter grows by its
power."""


def _child(database_url: str, gpus: int, hours: int, job_lead: int) -> dict[str, list[float]]:
    """One measured run with the tree on ``sys.path``: schema afresh, the first readings, then the cycles; per cycle
    its seconds and its idle re-judging's."""
    import cycle
    from sqlalchemy import text
    from sqlalchemy.orm import Session, sessionmaker

    import finops.service.scheduler as scheduler
    from collector.contract.wire import GpuInfo, GpuSeries, IngestBatch
    from finops.analysis.idle import IdlePolicy
    from finops.db.engine import make_engine, upgrade
    from finops.ingest.readings import Ingestor
    from finops.pricing.catalog import Pricing, PricingModel, load_catalog
    from finops.timeutil import from_epoch

    engine = make_engine(database_url)
    upgrade(engine)
    sessions = sessionmaker(engine)
    pricing, policy = Pricing(load_catalog(), PricingModel.ON_DEMAND), IdlePolicy()
    seconds = {"rejudge_idle": 0.0}
    scheduler.rejudge_idle = timed(scheduler.rejudge_idle, seconds, "rejudge_idle")
    batches = []
    for node in range(gpus // cycle.GPUS_PER_NODE):
        uuids = [f"GPU-{node:05d}-{i}" for i in range(cycle.GPUS_PER_NODE)]
        idle = [(node * cycle.GPUS_PER_NODE + i) % IDLE_EVERY == 0 for i in range(cycle.GPUS_PER_NODE)]
        series = [
            GpuSeries(uuid=uuid, ts=[cycle.START], utilization_ratio=[0.0 if idle[i] else 0.95],
                      power_watts=[70.0 if idle[i] else 650.0], energy_joules=[1e6])
            for i, uuid in enumerate(uuids)
        ]  # fmt: skip
        inventory = [GpuInfo(uuid=uuid, index=i, model=cycle.MODEL) for i, uuid in enumerate(uuids)]
        batches.append(IngestBatch(node=f"node-{node:05d}", gpus=inventory, series=series))
    ingestor = Ingestor()
    for first in range(0, len(batches), cycle.GROUP):
        with Session(engine) as session, session.begin():
            ingestor.store_all(session, batches[first : first + cycle.GROUP])
    cycle.node_jobs(engine, job_lead)
    figures: dict[str, list[float]] = {"cycle": [], "idle": []}
    for mark in range(1, hours * 12 + 1):
        with engine.begin() as connection:
            first = cycle.START + (mark - 1) * cycle.PART + (cycle.INTERVAL if mark == 1 else 0)
            last = cycle.START + mark * cycle.PART - cycle.INTERVAL
            connection.execute(text(FILL_SQL), {"first": first, "last": last, "start": cycle.START})
            connection.exec_driver_sql("ANALYZE gpu_samples")
        scheduler.utc_now = functools.partial(from_epoch, cycle.START + mark * cycle.PART)
        seconds["rejudge_idle"] = 0.0
        began = time.perf_counter()
        scheduler.run_rollup(sessions, pricing, policy)
        figures["cycle"].append(time.perf_counter() - began)
        figures["idle"].append(seconds["rejudge_idle"])
    engine.dispose()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "database_url", nargs="?", default="postgresql+psycopg://postgres@127.0.0.1:5432/test_idle_cycle"
    )
    parser.add_argument("--baseline-tree", type=Path, required=True, help="checkout of the code to compare with")
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--hours", type=int, default=2, help="hours of 5-minute cycles")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--job-lead", type=int, default=3600, help="seconds the jobs start before the first reading")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        leave_only_tree()
        sys.path.append(str(Path(__file__).resolve().parent))  # cycle.py's constants, behind the tree's packages
        print(json.dumps(_child(options.database_url, options.gpus, options.hours, options.job_lead)))
        return
    trees = {"baseline": options.baseline_tree.resolve(), "current": REPO}
    runs: dict[str, list[dict[str, list[float]]]] = {name: [] for name in trees}
    for _ in range(options.repeat):
        for name, tree in trees.items():
            recreate_database(options.database_url)
            args = [options.database_url, "--baseline-tree", str(tree), "--child", "--gpus", str(options.gpus),
                    "--hours", str(options.hours), "--job-lead", str(options.job_lead)]  # fmt: skip
            runs[name].append(run_in_tree(tree, __file__, args))
    print(f"{options.gpus:,} GPUs (one in {IDLE_EVERY} idle, jobs from {options.job_lead} s before the readings), "
          f"read every 10 s, {options.hours * 12} cycles; "
          f"{options.repeat} run(s) per tree, alternated; load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    marks = [f"{5 * (m + 1)}" for m in range(options.hours * 12)]
    print("minutes after the first reading: " + " ".join(f"{m:>5s}" for m in marks))
    for name in trees:
        idle = [statistics.median(run["idle"][m] for run in runs[name]) for m in range(len(marks))]
        whole = [statistics.median(run["cycle"][m] for run in runs[name]) for m in range(len(marks))]
        print(f"{name:9s} idle re-judging, s:    " + " ".join(f"{s:5.2f}" for s in idle))
        print(f"{'':9s} at the first hour's end: cycle {whole[11]:.2f} s, idle {idle[11]:.2f} s; "
              f"largest: cycle {max(whole):.2f} s, idle {max(idle):.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
