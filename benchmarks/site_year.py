"""A large site's year: its node inventory and its Slurm history imported and rolled up, on PostgreSQL; capacity
against the inventory's GPUs × hours.

Usage::

    .venv/bin/python benchmarks/site_year.py [DATABASE_URL] [--nodes 1000] [--gpus 8] [--days 365] [--seed 11]

``DATABASE_URL`` defaults to ``postgresql+psycopg://postgres@127.0.0.1:5432/test_y``; its schema is dropped and
migrated afresh, and dropped at the end. Prints figures; asserts nothing about time.

Workload (synthetic, from ``--seed``): ``--nodes`` nodes with ``Gres=gpu:h100:<gpus>`` in ``scontrol show node
--oneliner`` lines, State ``IDLE``, imported as of the first hour of the ``--days`` before the current hour (``nodes
import --at``). Each node runs one job after another, each holding 1 to all of its GPUs for 30 minutes to 12 hours
with gaps of up to 2 hours, as sacct ``--parsable2`` lines (typed ``gres/gpu:h100``), imported in batches of a
day's jobs; then one scheduler rollup (:func:`finops.service.scheduler.run_rollup`). Figures: inventory, sacct
import and rollup times, the ledger's in-service GPU-hours against nodes × GPUs × hours (equal: every GPU is in
service from the inventory's time to the current hour), and its allocated GPU-hours against Σ GPUs × elapsed from
the file.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import func, select

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from finops.analysis.idle import IdlePolicy  # noqa: E402
from finops.db.engine import downgrade, make_engine, session_factory, upgrade  # noqa: E402
from finops.db.ledger_tables import LedgerEntry  # noqa: E402
from finops.jobs.inventory import import_nodes  # noqa: E402
from finops.jobs.slurm_import import import_sacct  # noqa: E402
from finops.pricing.catalog import Pricing, PricingModel, load_catalog  # noqa: E402
from finops.service.scheduler import run_rollup  # noqa: E402

DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test_y"
ISO = "%Y-%m-%dT%H:%M:%S"


def workload(
    nodes: int, gpus: int, start: datetime, end: datetime, seed: int
) -> tuple[list[str], list[list[str]], int]:
    """(scontrol lines, sacct lines in batches by the day their jobs start, Σ GPUs × elapsed seconds)."""
    rng = random.Random(seed)
    inventory = [
        f"NodeName=site-{n:04d} Arch=x86_64 Gres=gpu:h100:{gpus}(S:0-1) Partitions=gpu State=IDLE" for n in range(nodes)
    ]
    days = int((end - start) / timedelta(days=1)) + 1
    batches: list[list[str]] = [[] for _ in range(days)]
    held = 0
    number = 10_000_000
    for n in range(nodes):
        at = start + timedelta(minutes=rng.randrange(0, 120))
        while True:
            length = timedelta(minutes=rng.randrange(30, 12 * 60))
            if at + length > end:
                break
            count = rng.randint(1, gpus)
            elapsed = int(length.total_seconds())
            clock = f"{elapsed // 3600:02d}:{elapsed % 3600 // 60:02d}:{elapsed % 60:02d}"
            batches[int((at - start) / timedelta(days=1))].append(
                f"{number}|{number}|site|gpu|team{number % 17}|user{number % 97}|{at.strftime(ISO)}|{at.strftime(ISO)}|"
                f"{(at + length).strftime(ISO)}|{clock}|COMPLETED|cpu={count * 8},gres/gpu:h100={count},"
                f"gres/gpu={count},node=1|site-{n:04d}|job{number}"
            )
            held += count * elapsed
            number += 1
            at += length + timedelta(minutes=rng.randrange(0, 120))
    return inventory, batches, held


def main() -> None:
    """Import and roll up the workload; print figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("database_url", nargs="?", default=DEFAULT_URL, help=f"PostgreSQL URL (default {DEFAULT_URL})")
    parser.add_argument("--nodes", type=int, default=1000, help="nodes (default 1000)")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node (default 8)")
    parser.add_argument("--days", type=int, default=365, help="days of history before the current hour (default 365)")
    parser.add_argument("--seed", type=int, default=11, help="random seed of the workload (default 11)")
    args = parser.parse_args()
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    start = end - timedelta(days=args.days)
    inventory, batches, held = workload(args.nodes, args.gpus, start, end, args.seed)
    jobs = sum(len(batch) for batch in batches)
    engine = make_engine(args.database_url)
    downgrade(engine, "base")
    upgrade(engine)
    sessions = session_factory(engine)
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    t0 = time.perf_counter()
    with sessions.begin() as session:
        result = import_nodes(session, inventory, source="scontrol", resolve=pricing.catalog.resolve, at=start)
    t1 = time.perf_counter()
    for batch in batches:
        with sessions.begin() as session:
            import_sacct(session, batch, source="sacct", cluster="site")
    t2 = time.perf_counter()
    built, _ = run_rollup(sessions, pricing, IdlePolicy())
    t3 = time.perf_counter()
    with sessions() as session:
        capacity, allocated = session.execute(
            select(
                func.coalesce(func.sum(LedgerEntry.seconds), 0),
                func.coalesce(func.sum(LedgerEntry.seconds).filter(LedgerEntry.job_pk.is_not(None)), 0),
            ).where(LedgerEntry.hour < end)
        ).one()
    hours = int((end - start) / timedelta(hours=1))
    print(
        f"{args.nodes} nodes × {args.gpus} GPUs ({result.capacity.gpus_created:,} GPUs), {args.days} days, "
        f"{jobs:,} jobs | inventory {t1 - t0:.2f} s, sacct import {t2 - t1:.1f} s ({jobs / (t2 - t1):,.0f} jobs/s), "
        f"rollup {t3 - t2:.1f} s ({built.hours:,} hours)"
    )
    print(
        f"  capacity {int(capacity) / 3600:,.0f} GPU-hours; inventory GPUs × hours "
        f"{args.nodes * args.gpus * hours:,} | allocated {int(allocated) / 3600:,.2f} GPU-hours; "
        f"Σ GPUs × elapsed from the file {held / 3600:,.2f}"
    )
    downgrade(engine, "base")
    engine.dispose()


if __name__ == "__main__":
    main()
