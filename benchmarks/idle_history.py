"""The scheduled re-judging of the current hour's idle time as history builds up, side by side with another checkout.

Usage::

    .venv/bin/python benchmarks/idle_history.py --baseline-tree /tmp/base [DATABASE_URL] [--gpus 256]
        [--days 2 8] [--repeat 3]

``--baseline-tree`` is a checkout of the code to compare with (``git worktree add /tmp/base <commit>``); this
script's own tree is the other side. ``DATABASE_URL`` (default ``postgresql+psycopg://postgres@127.0.0.1:5432/
test_idle``; a ``sqlite:///FILE`` URL works too) is emptied and migrated afresh for every run, by the code of the
tree under test. Prints figures; asserts nothing about time.

Workload (synthetic, made here): ``--gpus`` H100s on one node, each held by one job from the first instant on, read
every 60 s for each of ``--days`` days; GPU k idle (utilisation 0) in the hours h with h mod 7 = k mod 7, busy (0.9)
otherwise, so that at every instant some GPUs are in an idle episode; GPU 0 idle all along in the ``long`` case.
The episodes of the history are detected once (untimed), then the last hour is re-judged as the scheduler does after
its rollup (:func:`finops.analysis.idle.rejudge_idle`), ``--repeat`` times: printed per tree and case, the fastest.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from tree_runs import leave_only_tree, recreate_database, run_in_tree

REPO = Path(__file__).resolve().parents[1]
T0 = 1_790_812_800  # 2026-10-01T00:00Z
STEP = 60
DAY = 86_400
HOUR = 3_600


def _store(engine: Any, gpus: int, days: int, long_idle: bool) -> None:
    """The GPUs, their jobs from T0 on and their readings (module docstring)."""
    from sqlalchemy.orm import Session

    from finops.db.models import Allocation, Gpu, GpuSample, Job, Node, Team
    from finops.ingest.partitions import create_partitions
    from finops.timeutil import from_epoch

    with Session(engine) as session, session.begin():
        node, team = Node(hostname="n1"), Team(name="t")
        session.add_all([node, team])
        session.flush()
        rows = [
            Gpu(
                uuid=f"GPU-{k}",
                node_id=node.id,
                gpu_index=k,
                model="NVIDIA H100 80GB HBM3",
                in_service_from=from_epoch(T0),
            )
            for k in range(gpus)
        ]
        session.add_all(rows)
        session.flush()
        for gpu in rows:
            job = Job(scheduler="slurm", cluster="c", job_id=f"j{gpu.id}", job_id_raw=f"j{gpu.id}", user="u",
                      account="a", partition="p", name="j", state="RUNNING", start=from_epoch(T0), end=None, gpus=1,
                      node_list="n1", team_id=team.id)  # fmt: skip
            session.add(job)
            session.flush()
            session.add(Allocation(job_pk=job.id, gpu_id=gpu.id, start=from_epoch(T0), end=None))
        create_partitions(session.connection(), set(range(T0, T0 + days * DAY, DAY)))
        ids = [gpu.id for gpu in rows]
    for day in range(days):
        readings = [
            {"gpu_id": gpu_id, "ts": ts,
             "utilization_ratio": 0.0 if (long_idle and k == 0) or (ts // HOUR) % 7 == k % 7 else 0.9}
            for k, gpu_id in enumerate(ids)
            for ts in range(T0 + day * DAY, T0 + (day + 1) * DAY, STEP)
        ]  # fmt: skip
        with Session(engine) as session, session.begin():
            session.execute(GpuSample.__table__.insert(), readings)  # type: ignore[attr-defined]


def _child(database_url: str, gpus: int, days: int, long_idle: bool, repeat: int) -> dict[str, float]:
    """One measured run with the tree on ``sys.path``: schema afresh, the history, its episodes, the re-judging."""
    from sqlalchemy.orm import Session

    from finops.analysis.idle import IdlePolicy, detect_idle, rejudge_idle
    from finops.db.engine import make_engine, upgrade
    from finops.pricing.catalog import Pricing, PricingModel, load_catalog
    from finops.timeutil import from_epoch

    engine = make_engine(database_url)
    upgrade(engine)
    _store(engine, gpus, days, long_idle)
    if engine.dialect.name == "postgresql":
        with engine.begin() as connection:
            connection.exec_driver_sql("ANALYZE gpu_samples")
    pricing, policy, end = Pricing(load_catalog(), PricingModel.ON_DEMAND), IdlePolicy(), T0 + days * DAY
    with Session(engine) as session, session.begin():
        episodes = detect_idle(session, from_epoch(T0), from_epoch(end - HOUR), policy, pricing)
    seconds = []
    for _ in range(repeat):
        began = time.perf_counter()
        with Session(engine) as session, session.begin():
            rejudge_idle(session, [end - HOUR], policy, pricing)
        seconds.append(time.perf_counter() - began)
    engine.dispose()
    return {"seconds": min(seconds), "episodes": float(episodes)}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("database_url", nargs="?", default="postgresql+psycopg://postgres@127.0.0.1:5432/test_idle")
    parser.add_argument("--baseline-tree", type=Path, required=True, help="checkout of the code to compare with")
    parser.add_argument("--gpus", type=int, default=256)
    parser.add_argument("--days", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)  # "DAYS,LONG"
    options = parser.parse_args()
    if options.child:
        leave_only_tree()
        days, long_idle = options.child.split(",")
        figures = _child(options.database_url, options.gpus, int(days), long_idle == "long", options.repeat)
        print(json.dumps(figures))
        return
    trees = {"baseline": options.baseline_tree.resolve(), "current": REPO}
    print(f"{options.gpus} GPUs read every {STEP} s; the last hour re-judged, fastest of {options.repeat}; "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    for days in options.days:
        for case in ("staggered", "long"):
            line = []
            for name, tree in trees.items():
                recreate_database(options.database_url)
                args = [options.database_url, "--baseline-tree", str(tree), "--gpus", str(options.gpus),
                        "--repeat", str(options.repeat), "--child", f"{days},{case}"]  # fmt: skip
                figures = run_in_tree(tree, __file__, args)
                line.append(f"{name} {figures['seconds']:.3f} s ({int(figures['episodes']):,} episodes)")
            print(f"{days} days kept, {case:9s}: " + "; ".join(line))


if __name__ == "__main__":
    main()
