"""A site's own Slurm history before any collector ran: node inventory, sacct import and rollup, on PostgreSQL.

Usage::

    .venv/bin/python benchmarks/history.py [DATABASE_URL] [--jobs 4000] [--days 10] [--seed 7]

``DATABASE_URL`` defaults to ``postgresql+psycopg://postgres@127.0.0.1:5432/test_h``; its schema is dropped and
migrated afresh for each run, and dropped at the end. Prints figures; asserts nothing about time.

Workload (synthetic, generated here from ``--seed``; not a real site's history): 64 nodes in six groups, each with
the ``Gres=`` an ``scontrol show node --oneliner`` line would show: 16 × ``gpu:a100:4``, 16 × ``gpu:h100:8``,
8 × ``gpu:l40s:2``, 8 × ``gpu:mi250x:8``, 8 × untyped ``gpu:8`` (partition ``legacy``, given a model by
``set_model(--partition legacy h100)`` as a site would), and 8 × ``gpu:v100:4``, a type the catalogue does not price.
Each node runs one job after another over the ``--days`` before the current hour, each holding all the node's GPUs
for 15 minutes to 6 hours with gaps of up to 1 hour, as sacct ``--parsable2`` lines with typed (or, in
``legacy``, untyped) ``gres/gpu`` in AllocTRES; the first ``--jobs`` jobs by start are kept. No GPU readings exist.

Two runs, side by side: the history as described (**mixed**: V100 hours unpriced) and the same history with the
V100 nodes' type replaced by ``a100`` (**all priced**), the baseline. For each: inventory import, set-model,
sacct import and the scheduler's rollup (:func:`finops.service.scheduler.run_rollup`, which also re-judges idle
episodes over the rebuilt hours), timed; then Σ GPUs × elapsed from the file against the ledger's allocated
GPU-hours, priced and unpriced.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import func, select

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from finops.analysis.idle import IdlePolicy  # noqa: E402
from finops.analysis.report import unpriced_by_model  # noqa: E402
from finops.db.engine import downgrade, make_engine, session_factory, upgrade  # noqa: E402
from finops.db.ledger_tables import LedgerEntry  # noqa: E402
from finops.jobs.inventory import import_nodes, set_model  # noqa: E402
from finops.jobs.slurm_import import import_sacct  # noqa: E402
from finops.pricing.catalog import Pricing, PricingModel, load_catalog  # noqa: E402
from finops.service.scheduler import run_rollup  # noqa: E402

DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test_h"
GROUPS = (  # (hostname prefix, nodes, GRES type or None for untyped, GPUs per node, partition)
    ("gpu-a", 16, "a100", 4, "a100"),
    ("gpu-h", 16, "h100", 8, "h100"),
    ("gpu-l", 8, "l40s", 2, "inference"),
    ("gpu-m", 8, "mi250x", 8, "amd"),
    ("gpu-u", 8, None, 8, "legacy"),
    ("gpu-v", 8, "v100", 4, "old"),
)


def history(
    jobs: int, days: int, seed: int, end: datetime, v100_as: str = "v100"
) -> tuple[list[str], list[str], Counter[str]]:
    """(scontrol lines, sacct lines, GPU-seconds by GRES type from the lines' own numbers) of the workload."""
    rng = random.Random(seed)
    start = end - timedelta(days=days)
    inventory: list[str] = []
    records: list[tuple[datetime, str, str, int, str, datetime, datetime]] = []
    for prefix, count, gres_type, gpus, partition in GROUPS:
        kind = v100_as if gres_type == "v100" else gres_type
        for n in range(1, count + 1):
            host = f"{prefix}-{n:02d}"
            gres = f"gpu:{kind}:{gpus}(S:0-1)" if kind else f"gpu:{gpus}"
            inventory.append(
                f"NodeName={host} Arch=x86_64 Gres={gres} NodeAddr={host} Partitions={partition} State=IDLE"
            )
            at = start + timedelta(minutes=rng.randrange(0, 60))
            while True:
                length = timedelta(minutes=rng.randrange(15, 6 * 60))
                if at + length > end:
                    break
                records.append((at, host, kind or "", gpus, partition, at, at + length))
                at += length + timedelta(minutes=rng.randrange(0, 60))
    records.sort()
    records = records[:jobs]
    lines = []
    seconds: Counter[str] = Counter()
    for number, (_, host, kind, gpus, partition, begin, finish) in enumerate(records, start=4_000_000):
        tres = f"gres/gpu:{kind}={gpus},gres/gpu={gpus}" if kind else f"gres/gpu={gpus}"
        elapsed = int((finish - begin).total_seconds())
        clock = f"{elapsed // 3600:02d}:{elapsed % 3600 // 60:02d}:{elapsed % 60:02d}"
        iso = "%Y-%m-%dT%H:%M:%S"
        lines.append(
            f"{number}|{number}|site|{partition}|team{number % 9}|user{number % 31}|{begin.strftime(iso)}|"
            f"{begin.strftime(iso)}|{finish.strftime(iso)}|{clock}|COMPLETED|"
            f"billing={gpus * 8},cpu={gpus * 8},{tres},mem=64G,node=1|{host}|job{number}"
        )
        seconds[kind or "untyped"] += gpus * elapsed
    return inventory, lines, seconds


def run(url: str, inventory: list[str], lines: list[str], pricing: Pricing, label: str, start: datetime) -> None:
    """Import and roll up one history into a fresh schema, the inventory as of ``start`` (its nodes in service from
    then on); print timings and GPU-hours."""
    engine = make_engine(url)
    downgrade(engine, "base")
    upgrade(engine)
    sessions = session_factory(engine)
    catalog = pricing.catalog
    t0 = time.perf_counter()
    with sessions.begin() as session:
        nodes = import_nodes(session, inventory, source="scontrol", resolve=catalog.resolve, at=start, cluster="site")
    t1 = time.perf_counter()
    with sessions.begin() as session:
        set_model(
            session,
            "h100",
            resolve=catalog.resolve,
            choices=sorted(catalog.models),
            partition="legacy",
            actor="system:benchmark",
        )
    t2 = time.perf_counter()
    with sessions.begin() as session:
        imported = import_sacct(session, lines, source="sacct", cluster="site")
    t3 = time.perf_counter()
    built, episodes = run_rollup(sessions, pricing, IdlePolicy())
    t4 = time.perf_counter()
    with sessions() as session:
        allocated = session.scalar(
            select(func.coalesce(func.sum(LedgerEntry.seconds), 0)).where(LedgerEntry.job_pk.is_not(None))
        )
        first = datetime.fromtimestamp(0, UTC)
        unpriced = unpriced_by_model(session, first, datetime.now(UTC) + timedelta(hours=1))
    print(
        f"{label}: {nodes.nodes} nodes, {imported.jobs:,} jobs | inventory {t1 - t0:.2f} s, set-model {t2 - t1:.2f} s, "
        f"sacct import {t3 - t2:.2f} s, rollup {t4 - t3:.2f} s ({built.hours} hours; {episodes} idle episodes) | "
        f"import + rollup {t4 - t0:.2f} s"
    )
    print(
        f"  ledger: {int(allocated) / 3600:,.2f} allocated GPU-hours; capacity {built.priced_gpu_hours:,.2f} "
        f"GPU-hours priced and {built.unpriced_gpu_hours:,.2f} unpriced; unpriced by model: "
        + (", ".join(f"{u.model} {u.gpu_hours:,.2f}" for u in unpriced) or "none")
    )
    engine.dispose()


def main() -> None:
    """Run the mixed history and its all-priced baseline; print figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("database_url", nargs="?", default=DEFAULT_URL, help=f"PostgreSQL URL (default {DEFAULT_URL})")
    parser.add_argument("--jobs", type=int, default=4000, help="jobs kept, first by start (default 4000)")
    parser.add_argument("--days", type=int, default=10, help="days of history before the current hour (default 10)")
    parser.add_argument("--seed", type=int, default=7, help="random seed of the workload (default 7)")
    args = parser.parse_args()
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    for label, v100_as in (("mixed (V100 unpriced)", "v100"), ("baseline (all priced)", "a100")):
        inventory, lines, seconds = history(args.jobs, args.days, args.seed, end, v100_as)
        by_type = ", ".join(f"{kind} {value / 3600:,.2f}" for kind, value in sorted(seconds.items()))
        print(f"{label}: Σ GPUs × elapsed from the file {sum(seconds.values()) / 3600:,.2f} GPU-hours ({by_type})")
        run(args.database_url, inventory, lines, pricing, label, end - timedelta(days=args.days))
    engine = make_engine(args.database_url)
    downgrade(engine, "base")
    engine.dispose()


if __name__ == "__main__":
    main()
