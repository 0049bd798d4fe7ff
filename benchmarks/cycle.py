"""The scheduler's 5-minute cycle: twelve rollups over an hour whose readings arrive in twelve 5-minute parts, against
one rollup of the whole hour, side by side with another checkout in the same run.

Usage::

    .venv/bin/python benchmarks/cycle.py --baseline-tree /tmp/base [DATABASE_URL] [--gpus 512] [--repeat 3]

``--baseline-tree`` is a checkout of the code to compare with (``git worktree add /tmp/base <commit>``); this
script's own tree is the other side. ``DATABASE_URL`` (default ``postgresql+psycopg://postgres@127.0.0.1:5432/
test_cycle``; a ``sqlite:///FILE`` URL works too) is emptied and migrated afresh for every run, by the code of the
tree under test. Prints figures; asserts nothing about time.

Workload: ``--gpus`` H100s (8 per node) read every 10 s for an hour, each node's readings stored as the collector
sends them (:class:`finops.ingest.readings.Ingestor`, 16 nodes' batches a transaction, as group commit does), one
job per node holding its 8 GPUs from before the hour on. Two cases per tree, each in a child process with only its
tree on the path, alternated ``--repeat`` times:

- **twelve**: the readings of each 5 minutes stored, then a ``rollup`` up to the end of those 5 minutes: the sum of
  the twelve rollups' times (the readings are stored between them, untimed);
- **one**: the hour's readings stored, then one ``rollup`` of the hour.

Printed per tree: the medians, and twelve ÷ one (the goal: at most 1.5). Where the tree reports it, the readings its
rollups metered. ``--analyze`` runs ``ANALYZE gpu_samples`` (PostgreSQL) after each store, untimed, as autovacuum
does once a partition has grown enough: without it the rollups plan for day partitions the planner has no statistics
of, as they do in the first hours of a day.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tree_runs import leave_only_tree, recreate_database, run_in_tree

REPO = Path(__file__).resolve().parents[1]
START = int(datetime(2026, 11, 2, 10, tzinfo=UTC).timestamp())
INTERVAL = 10
PART = 300
GPUS_PER_NODE = 8
GROUP = 16
MODEL = "NVIDIA H100 80GB HBM3"


def hour_parts(gpus: int) -> list[list[Any]]:
    """The hour's batches (:class:`collector.contract.wire.IngestBatch`), per 5-minute part, one per node;
    utilisation and power vary by GPU and instant, the energy counter grows."""
    from collector.contract.wire import GpuInfo, GpuSeries, IngestBatch

    parts = []
    for first in range(START, START + 3600, PART):
        instants = list(range(first, first + PART, INTERVAL))
        batches = []
        for node in range(gpus // GPUS_PER_NODE):
            uuids = [f"GPU-{node:05d}-{i}" for i in range(GPUS_PER_NODE)]
            series = [
                GpuSeries(
                    uuid=uuid,
                    ts=instants,
                    utilization_ratio=[((t // INTERVAL) * 37 + node * 11 + i) % 100 / 100 for t in instants],
                    power_watts=[300.0 + (t + i) % 400 for t in instants],
                    energy_joules=[1e6 + 5000.0 * (t - START) / INTERVAL for t in instants],
                )
                for i, uuid in enumerate(uuids)
            ]
            inventory = [GpuInfo(uuid=uuid, index=i, model=MODEL) for i, uuid in enumerate(uuids)]
            batches.append(IngestBatch(node=f"node-{node:05d}", gpus=inventory, series=series))
        parts.append(batches)
    return parts


def node_jobs(engine: Any, lead: int = 3600) -> None:
    """One running job per node, holding its 8 GPUs from ``lead`` seconds before the readings on."""
    from sqlalchemy import text

    with engine.begin() as c:
        c.execute(text("INSERT INTO teams (name) VALUES ('team-a')"))
        team = c.scalar(text("SELECT id FROM teams WHERE name = 'team-a'"))
        for node_id, hostname in c.execute(text("SELECT id, hostname FROM nodes")).all():
            job = c.scalar(
                text(
                    """INSERT INTO jobs (scheduler, cluster, job_id, job_id_raw, "user", account, partition, name,
                                         state, submit, start, gpus, node_list, team_id)
                       VALUES ('slurm', 'bench', :name, :name, 'u', 'team-a', 'p', 'train', 'RUNNING', :start,
                               :start, 8, :name, :team) RETURNING id"""
                ),
                {"name": hostname, "start": START - lead, "team": team},
            )
            c.execute(
                text(
                    """INSERT INTO allocations (job_pk, gpu_id, start, share_num, share_den)
                       SELECT :job, id, :start, 1, 1 FROM gpus WHERE node_id = :node"""
                ),
                {"job": job, "start": START - lead, "node": node_id},
            )


def _child(database_url: str, gpus: int, case: str, analyze: bool) -> dict[str, float]:
    """One measured run with the tree on ``sys.path``: schema afresh, then the case."""
    from sqlalchemy.orm import Session

    from finops.db.engine import make_engine, upgrade
    from finops.ingest.readings import Ingestor
    from finops.ledger.rollup import rollup
    from finops.pricing.catalog import Pricing, PricingModel, load_catalog

    engine = make_engine(database_url)
    upgrade(engine)
    parts = hour_parts(gpus)
    ingestor = Ingestor()
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)

    def store(batches: list[Any]) -> None:
        for first in range(0, len(batches), GROUP):
            with Session(engine) as session, session.begin():
                ingestor.store_all(session, batches[first : first + GROUP])
        if analyze and engine.dialect.name == "postgresql":
            with engine.begin() as connection:
                connection.exec_driver_sql("ANALYZE gpu_samples")

    def roll(until: int) -> tuple[float, int]:
        began = time.perf_counter()
        with Session(engine) as session, session.begin():
            result = rollup(session, pricing, until)
        return time.perf_counter() - began, int(getattr(result, "readings_metered", -1))

    store(parts[0])
    node_jobs(engine)
    figures = {"seconds": 0.0, "readings_metered": 0.0, "readings": float(gpus * 3600 // INTERVAL)}
    if case == "one":
        for batches in parts[1:]:
            store(batches)
        figures["seconds"], metered = roll(START + 3600)
        figures["readings_metered"] = float(metered)
    else:
        for k, batches in enumerate(parts):
            if k:
                store(batches)
            seconds, metered = roll(START + (k + 1) * PART)
            figures["seconds"] += seconds
            figures["readings_metered"] += metered
    engine.dispose()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("database_url", nargs="?", default="postgresql+psycopg://postgres@127.0.0.1:5432/test_cycle")
    parser.add_argument("--baseline-tree", type=Path, required=True, help="checkout of the code to compare with")
    parser.add_argument("--gpus", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--analyze", action="store_true", help="ANALYZE gpu_samples after each store (untimed)")
    parser.add_argument("--child", choices=("one", "twelve"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        leave_only_tree()
        print(json.dumps(_child(options.database_url, options.gpus, options.child, options.analyze)))
        return
    trees = {"baseline": options.baseline_tree.resolve(), "current": REPO}
    runs: dict[tuple[str, str], list[dict[str, float]]] = {(t, c): [] for t in trees for c in ("one", "twelve")}
    for _ in range(options.repeat):
        for tree_name, case in runs:
            tree = trees[tree_name]
            recreate_database(options.database_url)
            args = [options.database_url, "--baseline-tree", str(tree), "--child", case, "--gpus", str(options.gpus),
                    *(["--analyze"] if options.analyze else [])]  # fmt: skip
            runs[tree_name, case].append(run_in_tree(tree, __file__, args))
    readings = int(runs["current", "one"][0]["readings"])
    print(
        f"{options.gpus} GPUs x 1 h at {INTERVAL} s = {readings:,} readings; {options.repeat} runs each, alternated; "
        f"load average {os.getloadavg()[0]:.1f}{'; readings analysed after each store' if options.analyze else ''}"
    )
    for tree_name in trees:
        one = statistics.median(r["seconds"] for r in runs[tree_name, "one"])
        twelve = statistics.median(r["seconds"] for r in runs[tree_name, "twelve"])
        metered = [int(runs[tree_name, case][0]["readings_metered"]) for case in ("one", "twelve")]
        counts = "" if min(metered) < 0 else f"; readings metered {metered[0]:,} / {metered[1]:,}"
        print(f"{tree_name:9s} one rollup {one:6.2f} s, twelve 5-minute rollups {twelve:6.2f} s: "
              f"{twelve / one:.2f} x{counts}")  # fmt: skip


if __name__ == "__main__":
    main()
