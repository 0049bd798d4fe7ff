"""How the rollup's cost grows with the readings of one GPU read every second, by the fields the readings carry.

Usage::

    .venv/bin/python benchmarks/rollup_scaling.py [DATABASE_URL] [--sizes 3600,7200,14400,28800,86400]
        [--variants energy,no-energy,utilization,power]

``DATABASE_URL`` defaults to an SQLite file in a temporary folder (the embedded default, where dcgm-exporter
scraped every second was first seen to make the rollup superlinear); a PostgreSQL URL is migrated and its schema
dropped again at the end (``finops.db.engine.downgrade(engine, "base")``). Prints figures; asserts nothing about time.

Workload: one "NVIDIA H100 80GB HBM3" in service from 2026-10-01T00:00Z, held all along by one Slurm job, with
one reading a second for the first N seconds (N from ``--sizes``; 86,400 is a day). The readings carry, by
variant: ``energy`` utilisation, power and the energy counter (which grows by the power each second);
``no-energy`` utilisation and power, no counter (dcgm-exporter without ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``);
``utilization`` utilisation alone; ``power`` power alone. Before each run the readings, the ledger and the idle
episodes are emptied and the N readings written (not timed).

Timed, side by side in the same run: :func:`finops.ledger.rollup.rollup` into the empty ledger (the N readings, N ÷
3,600 hours, one chunk) and :func:`finops.analysis.idle.rejudge_idle` over the hours it rebuilt (what the
scheduler's rollup job runs after it). For each: seconds, µs per reading and, from one size to the next, the factor
per doubling of the readings — (t₂ ÷ t₁) ^ (1 ÷ log₂(N₂ ÷ N₁)): 2 is linear, 4 quadratic. The machine's load average
is printed with the figures: they are wall-clock times.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Engine, make_url, text

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from finops.analysis.idle import IdlePolicy, rejudge_idle  # noqa: E402
from finops.db.engine import downgrade, make_engine, session_factory, upgrade  # noqa: E402
from finops.ingest.partitions import create_partitions, is_partitioned  # noqa: E402
from finops.ledger.rollup import rollup  # noqa: E402
from finops.pricing.catalog import Pricing, PricingModel, load_catalog  # noqa: E402
from finops.timeutil import HOUR, to_epoch  # noqa: E402

MODEL = "NVIDIA H100 80GB HBM3"
START = to_epoch(datetime(2026, 10, 1, tzinfo=UTC))
SIZES = (3_600, 7_200, 14_400, 28_800, 86_400)
WATTS = 400.0


def _utilization(i: int) -> float:
    """Utilisation ratio of second ``i``: busy (35–100 %) with a 40-minute idle stretch (0–3 %) every 3 hours."""
    return ((i % 4) / 100.0) if i % 10_800 < 2_400 else (35 + (i * 17) % 66) / 100.0


def _power(i: int) -> float:
    """Power in watts of second ``i``: 400 W ± 50."""
    return WATTS + (i * 37) % 101 - 50


# Reading columns by variant: utilisation ratio, power in watts, energy counter in joules (None: not carried).
READINGS: dict[str, Callable[[int], tuple[float | None, float | None, float | None]]] = {
    "energy": lambda i: (_utilization(i), _power(i), 1e9 + WATTS * i + (i * 37) % 101),
    "no-energy": lambda i: (_utilization(i), _power(i), None),
    "utilization": lambda i: (_utilization(i), None, None),
    "power": lambda i: (None, _power(i), None),
}


def setup(engine: Engine, days: int) -> None:
    """The migrated, empty database's team, node, GPU and the job holding it all along (and, on PostgreSQL, the day
    partitions of the readings)."""
    with engine.begin() as c:
        c.execute(text("INSERT INTO teams (name) VALUES ('ml'), ('__unmapped__'), ('__unallocated__')"))
        c.execute(text("INSERT INTO nodes (hostname, partition) VALUES ('bench-001', 'batch')"))
        c.execute(
            text(
                "INSERT INTO gpus (uuid, node_id, gpu_index, model, memory_total_bytes, in_service_from) "
                "VALUES ('GPU-bench-0', 1, 0, :model, 85899345920, :start)"
            ),
            {"model": MODEL, "start": START},
        )
        c.execute(
            text(
                'INSERT INTO jobs (scheduler, cluster, job_id, job_id_raw, "user", account, partition, name, state, '
                "submit, start, \"end\", gpus, node_list, team_id) VALUES ('slurm', 'bench', '1', '1', "
                "'alice', 'ml', 'batch', 'train', 'RUNNING', :start, :start, NULL, 1, 'bench-001', "
                "(SELECT id FROM teams WHERE name = 'ml'))"
            ),
            {"start": START},
        )
        c.execute(
            text(
                'INSERT INTO allocations (job_pk, gpu_id, start, "end", share_num, share_den) '
                "VALUES (1, 1, :start, NULL, 1, 1)"
            ),
            {"start": START},
        )
        if is_partitioned(c):
            create_partitions(c, range(START, START + days * 86_400, 86_400))


def load(engine: Engine, variant: str, n: int) -> None:
    """Empty the readings, ledger and idle episodes, then write the first ``n`` seconds' readings of ``variant``."""
    reading = READINGS[variant]
    with engine.begin() as c:
        for table in ("idle_episodes", "ledger_team_hours", "ledger", "ledger_dirty_hours", "gpu_samples"):
            c.execute(text(f"DELETE FROM {table}"))  # noqa: S608 - constant table names
        c.execute(
            text(
                "INSERT INTO gpu_samples (gpu_id, ts, utilization_ratio, memory_used_bytes, power_watts, "
                "energy_joules) VALUES (1, :ts, :u, 64424509440, :p, :e)"
            ),
            [dict(zip(("ts", "u", "p", "e"), (START + i, *reading(i)), strict=True)) for i in range(n)],
        )
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
            c.execute(text("VACUUM ANALYZE gpu_samples"))


def measure(engine: Engine, pricing: Pricing, n: int) -> tuple[float, float, int]:
    """Seconds of the rollup of the first ``n`` seconds into the empty ledger and of the idle re-judging over the
    hours it rebuilt (each in its own transaction, committed), and the ledger rows written."""
    sessions = session_factory(engine)
    hours: list[int] = []
    began = time.perf_counter()
    with sessions.begin() as session:
        rollup(session, pricing, START + n, rebuilt=hours)
    rolled = time.perf_counter() - began
    began = time.perf_counter()
    with sessions.begin() as session:
        rejudge_idle(session, hours, IdlePolicy(), pricing)
    idle = time.perf_counter() - began
    with engine.connect() as c:
        rows = int(c.scalar(text("SELECT count(*) FROM ledger")) or 0)
    return rolled, idle, rows


def per_doubling(previous: tuple[int, float] | None, n: int, seconds: float) -> str:
    """The time factor per doubling of the readings from ``previous`` (readings, seconds) to (``n``, ``seconds``)."""
    if previous is None or previous[1] <= 0:
        return "      "
    return f"{(seconds / previous[1]) ** (1 / math.log2(n / previous[0])):5.2f}×"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("database_url", nargs="?", help="database URL (default: an SQLite file in a temporary folder)")
    parser.add_argument(
        "--sizes", default=",".join(map(str, SIZES)), help="readings per run, comma-separated (default %(default)s)"
    )
    parser.add_argument(
        "--variants", default=",".join(READINGS), help="fields the readings carry (default %(default)s)"
    )
    args = parser.parse_args()
    sizes = sorted(int(size) for size in args.sizes.split(","))
    variants = args.variants.split(",")
    if unknown := set(variants) - set(READINGS):
        parser.error(f"unknown variants {sorted(unknown)}; known: {', '.join(READINGS)}")

    with tempfile.TemporaryDirectory(prefix="rollup-scaling-") as folder:
        url = args.database_url or f"sqlite:///{folder}/finops.sqlite"
        engine = make_engine(url)
        backend = make_url(url).get_backend_name()
        try:
            if backend == "postgresql":
                downgrade(engine, "base")
            upgrade(engine)
            setup(engine, -(-max(sizes) // 86_400))
            pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
            print(f"one {MODEL} held by one job, a reading a second, on {backend}; load average "
                  f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")  # fmt: skip
            print(f"{'variant':<12} {'readings':>8} {'hours':>5} {'rows':>4} | {'rollup s':>8} {'µs/reading':>10} "
                  f"{'per 2×':>6} | {'idle s':>7} {'µs/reading':>10} {'per 2×':>6}")  # fmt: skip
            for variant in variants:
                previous_rollup: tuple[int, float] | None = None
                previous_idle: tuple[int, float] | None = None
                for n in sizes:
                    load(engine, variant, n)
                    rolled, idle, rows = measure(engine, pricing, n)
                    print(
                        f"{variant:<12} {n:>8,} {-(-n // HOUR):>5} {rows:>4} | {rolled:8.3f} {rolled / n * 1e6:10.1f} "
                        f"{per_doubling(previous_rollup, n, rolled)} | {idle:7.3f} {idle / n * 1e6:10.1f} "
                        f"{per_doubling(previous_idle, n, idle)}",
                        flush=True,
                    )
                    previous_rollup, previous_idle = (n, rolled), (n, idle)
            print(f"load average (1 min) at the end {os.getloadavg()[0]:.1f}")
        finally:
            if backend == "postgresql":
                downgrade(engine, "base")
            engine.dispose()


if __name__ == "__main__":
    main()
