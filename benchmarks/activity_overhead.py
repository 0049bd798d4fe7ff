"""What the hardware-activity fields cost ingest and rollup, side by side with another checkout in the same run.

Usage::

    .venv/bin/python benchmarks/activity_overhead.py --baseline-tree /tmp/base [DATABASE_URL]
        [--gpus 512] [--hours 2] [--repeat 3]

``--baseline-tree`` is a checkout of the code to compare with (``git worktree add /tmp/base <commit>``); this
script's own tree is the other side. ``DATABASE_URL`` (default ``postgresql+psycopg://postgres@127.0.0.1:5432/
test_activity``) is dropped, created and migrated afresh for every run, by the code of the tree under test.
Prints figures; asserts nothing about time.

Workload: ``--gpus`` H100s (8 per node) read every 10 s for ``--hours`` hours, cut into POSTs of 10 minutes per
node (480 readings) and encoded as the collector's columns (:func:`collector.contract.wire.columnar`); one job per
node-lane of 4 GPUs, changing every 30 minutes, so that the rollup meters held and split GPU-hours. Three cases,
each run in a child process with only its tree on the path and alternated ``--repeat`` times:

- **baseline**: the baseline tree, readings without activity fields;
- **current, no activity**: this tree, the same bodies (the new columns all null);
- **current, default three**: this tree, every reading also carrying the three ratios that dcgm-exporter's default
  counters export (graphics engine, tensor and DRAM activity: DCGM_FI_PROF_GR_ENGINE_ACTIVE, PIPE_TENSOR_ACTIVE,
  DRAM_ACTIVE);
- **current, all eight**: this tree, every reading also carrying the eight activity ratios.

Timed: validating the bodies as the ingest API does (``IngestBatch.model_validate_json``), storing them
(``Ingestor.store_all`` in one transaction per 16 batches, as group commit does), and a cold ``rollup`` of the
window. Medians are printed with their ratio to the baseline.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

from tree_runs import leave_only_tree, recreate_database, run_in_tree

REPO = Path(__file__).resolve().parents[1]
START = int(datetime(2026, 11, 2, tzinfo=UTC).timestamp())
INTERVAL = 10
GPUS_PER_NODE = 8
POST_CYCLES = 60
GROUP = 16
JOB_SECONDS = 1800
MODEL = "NVIDIA H100 80GB HBM3"
DEFAULT_THREE = ("graphics_engine_active_ratio", "tensor_active_ratio", "dram_active_ratio")
ACTIVITY = (
    "sm_active_ratio", "sm_occupancy_ratio", "tensor_active_ratio", "dram_active_ratio", "fp64_active_ratio",
    "fp32_active_ratio", "fp16_active_ratio", "graphics_engine_active_ratio",
)  # fmt: skip

FIELDS = {"none": (), "three": DEFAULT_THREE, "eight": ACTIVITY}
"""The activity fields each reading carries, by case."""


def _bodies(gpus: int, hours: float, activity: tuple[str, ...]) -> list[bytes]:
    """The fleet's POST bodies (JSON, columns), deterministic; each reading carries the ``activity`` fields."""
    rng = random.Random(7)
    cycles = int(hours * 3600 / INTERVAL)
    bodies = []
    for node in range(gpus // GPUS_PER_NODE):
        uuids = [f"GPU-{node:05d}-{i}" for i in range(GPUS_PER_NODE)]
        inventory = [
            {"uuid": u, "index": i, "model": MODEL, "memory_total_bytes": 85520809984} for i, u in enumerate(uuids)
        ]
        for first in range(0, cycles, POST_CYCLES):
            ts = [START + INTERVAL * c for c in range(first, min(first + POST_CYCLES, cycles))]
            series = []
            for u in uuids:
                column: dict[str, object] = {
                    "uuid": u,
                    "ts": ts,
                    "utilization_ratio": [round(rng.random(), 2) for _ in ts],
                    "power_watts": [round(300 + 400 * rng.random(), 1) for _ in ts],
                    "energy_joules": [1e6 + 5000.0 * (t - START) / INTERVAL for t in ts],
                    "memory_used_bytes": [40 * 2**30 for _ in ts],
                }
                column.update({name: [round(rng.random(), 4) for _ in ts] for name in activity})
                series.append(column)
            bodies.append(json.dumps({"node": f"node-{node:05d}", "gpus": inventory, "series": series}).encode())
    return bodies


def _child(database_url: str, gpus: int, hours: float, activity: tuple[str, ...]) -> dict[str, float]:
    """One measured run with the tree on ``sys.path``: schema afresh, validate, store, jobs, rollup."""
    from sqlalchemy import text
    from sqlalchemy.orm import Session

    from collector.contract.wire import IngestBatch
    from finops.db.engine import make_engine, upgrade
    from finops.ingest.readings import Ingestor
    from finops.ledger.rollup import rollup
    from finops.pricing.catalog import Pricing, PricingModel, load_catalog

    bodies = _bodies(gpus, hours, activity)
    engine = make_engine(database_url)
    upgrade(engine)
    figures: dict[str, float] = {"readings": 0.0}
    began = time.perf_counter()
    batches = [IngestBatch.model_validate_json(body) for body in bodies]
    figures["validate_s"] = time.perf_counter() - began
    figures["readings"] = float(sum(b.reading_count for b in batches))
    ingestor = Ingestor()
    began = time.perf_counter()
    for first in range(0, len(batches), GROUP):
        with Session(engine) as session, session.begin():
            ingestor.store_all(session, batches[first : first + GROUP])
    figures["store_s"] = time.perf_counter() - began
    # The rollup runs in the scheduler, without the fleet's bodies in memory: dropped here, so that the collector of
    # cyclic garbage does not walk millions of parsed readings during the rollup (it did, and made it look slower).
    del bodies, batches
    gc.collect()
    end = START + int(hours * 3600)
    with engine.begin() as c:
        c.execute(text("INSERT INTO teams (name) VALUES ('team-a'), ('__unmapped__') ON CONFLICT DO NOTHING"))
        for job, start in enumerate(range(START, end, JOB_SECONDS)):
            for lane in range(2):
                c.execute(
                    text(
                        """INSERT INTO jobs (scheduler, cluster, job_id, job_id_raw, "user", account, partition, name,
                                             state, submit, start, "end", gpus, node_list, team_id)
                           SELECT 'slurm', 'bench', :job, :job, 'u', 'team-a', 'p', 'train', 'COMPLETED', :start,
                                  :start, :stop, 4, 'all', id FROM teams WHERE name = 'team-a'"""
                    ),
                    {"job": f"{job}_{lane}", "start": start, "stop": start + JOB_SECONDS},
                )
                c.execute(
                    text(
                        """INSERT INTO allocations (job_pk, gpu_id, start, "end", share_num, share_den)
                           SELECT j.id, g.id, j.start, j."end", 1, 1 FROM jobs j, gpus g
                           WHERE j.job_id = :job AND g.gpu_index BETWEEN :first AND :first + 3"""
                    ),
                    {"job": f"{job}_{lane}", "first": 4 * lane},
                )
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    began = time.perf_counter()
    with Session(engine) as session, session.begin():
        result = rollup(session, pricing, end)
    figures["rollup_s"] = time.perf_counter() - began
    figures["ledger_hours"] = float(result.hours)
    engine.dispose()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("database_url", nargs="?", default="postgresql+psycopg://postgres@127.0.0.1:5432/test_activity")
    parser.add_argument("--baseline-tree", type=Path, required=True, help="checkout of the code to compare with")
    parser.add_argument("--gpus", type=int, default=512)
    parser.add_argument("--hours", type=float, default=2.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", choices=sorted(FIELDS), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        leave_only_tree()
        figures = _child(options.database_url, options.gpus, options.hours, FIELDS[options.child])
        print(json.dumps(figures))
        return
    cases = {
        "baseline": (options.baseline_tree.resolve(), "none"),
        "current, no activity": (REPO, "none"),
        "current, default three": (REPO, "three"),
        "current, all eight": (REPO, "eight"),
    }
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in cases}
    for _ in range(options.repeat):
        for name, (tree, activity) in cases.items():
            recreate_database(options.database_url)
            args = [options.database_url, "--baseline-tree", str(tree), "--child", activity,
                    "--gpus", str(options.gpus), "--hours", str(options.hours)]  # fmt: skip
            runs[name].append(run_in_tree(tree, __file__, args))
    readings = int(runs["baseline"][0]["readings"])
    print(
        f"{options.gpus} GPUs x {options.hours} h at {INTERVAL} s = {readings:,} readings; "
        f"{options.repeat} runs each, alternated; load average {os.getloadavg()[0]:.1f}"
    )
    base = {key: statistics.median(r[key] for r in runs["baseline"]) for key in ("validate_s", "store_s", "rollup_s")}
    for name, figures in runs.items():
        medians = {key: statistics.median(r[key] for r in figures) for key in base}
        cells = "  ".join(f"{key} {medians[key]:7.2f} ({medians[key] / base[key]:.2f}x)" for key in base)
        print(f"{name:22s} {cells}")


if __name__ == "__main__":
    main()
