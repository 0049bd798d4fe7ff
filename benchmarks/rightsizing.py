"""Right-sizing of a month of 1,024 H100s read every minute, on PostgreSQL: the workload of ``benchmarks/ledger.py``.

Usage::

    .venv/bin/python benchmarks/rightsizing.py [DATABASE_URL] [--nodes 128] [--days 30] [--runs 3] [--keep | --reuse]

``DATABASE_URL`` defaults to ``postgresql+psycopg://postgres@127.0.0.1:5432/test_rightsizing`` (the database must
exist). Its schema is dropped, migrated afresh, filled by :func:`benchmarks.ledger.generate` and rolled up, unless
``--reuse`` finds the ledger of an earlier ``--keep`` run (of this script, or of ``benchmarks/ledger.py --keep`` once
rolled up). The schema is dropped at the end unless ``--keep`` or ``--reuse``. Prints figures; asserts nothing about
time.

Timed (median of ``--runs`` runs after one warm-up, printed with the machine's load average):
:func:`finops.savings.rightsizing.rightsizing` over the month with the default thresholds, where only the jobs at
low utilisation have their memory read (the workload's GPUs read 0-3 % in 15 % of their 2-hour blocks and 35-100 %
otherwise, so few jobs qualify), and with ``low_utilization_ratio=1``, where every job's memory peak is read from
``gpu_samples`` (the bound on that part's cost; ``--every-job-runs`` runs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

from sqlalchemy import Engine, make_url, text

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.ledger import GPUS_PER_NODE, MONTH, counts, generate  # noqa: E402
from finops.db.engine import downgrade, make_engine, session_factory, upgrade  # noqa: E402
from finops.ledger.rollup import rollup  # noqa: E402
from finops.pricing.catalog import Pricing, PricingModel, load_catalog  # noqa: E402
from finops.savings.rightsizing import rightsizing  # noqa: E402
from finops.savings.rightsizing_policy import RightsizingPolicy, RightsizingReport  # noqa: E402
from finops.timeutil import to_epoch  # noqa: E402

DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test_rightsizing"


def _ledger_present(engine: Engine, nodes: int, days: int) -> bool:
    """Whether the database holds the workload of ``nodes`` × 8 GPUs with its ledger built through its last day."""
    try:
        with engine.connect() as c:
            gpus = c.scalar(text("SELECT count(*) FROM gpus"))
            newest = c.scalar(text("SELECT max(hour) FROM ledger"))
    except Exception:  # no schema yet
        return False
    last_hour = to_epoch(MONTH + timedelta(days=days)) - 3600
    return gpus == nodes * GPUS_PER_NODE and newest is not None and newest >= last_hour


def _timed(engine: Engine, days: int, policy: RightsizingPolicy, runs: int) -> tuple[list[float], RightsizingReport]:
    """Seconds of each of ``runs`` runs after a warm-up, and the last run's report."""
    sessions = session_factory(engine)
    catalog = load_catalog()
    start, end = MONTH, MONTH + timedelta(days=days)
    times = []
    report = None
    for _ in range(runs + 1):
        with sessions() as session:
            began = time.perf_counter()
            report = rightsizing(session, start, end, catalog=catalog, priced_at=end, policy=policy)
            times.append(time.perf_counter() - began)
    assert report is not None
    return times[1:], report


def _print(label: str, times: list[float], report: RightsizingReport) -> None:
    findings = report.findings
    saving = sum((f.saving or Decimal(0) for f in findings), Decimal(0))
    count = sum(1 for f in findings if f.saved_gpu_seconds)
    memory = sum(1 for f in findings if f.memory_peak_bytes is not None)
    print(
        f"{label}: median {statistics.median(times):6.2f} s  (runs {', '.join(f'{t:.2f}' for t in times)}; "
        f"{report.jobs_examined:,} jobs examined, {len(findings):,} findings: {count:,} over-requested, {memory:,} "
        f"with a memory peak read; saving {saving:,.2f} USD; load average {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} CPUs)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("database_url", nargs="?", default=DEFAULT_URL, help=f"PostgreSQL URL (default {DEFAULT_URL})")
    parser.add_argument("--nodes", type=int, default=128, help="8-GPU nodes (default 128: 1,024 GPUs)")
    parser.add_argument("--days", type=int, default=30, help="days of 1-minute readings from 2026-10-01 (default 30)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs with the default thresholds after a warm-up")
    parser.add_argument(
        "--every-job-runs", type=int, default=1, help="timed runs reading every job's memory after a warm-up (0: none)"
    )
    keep = parser.add_mutually_exclusive_group()
    keep.add_argument("--keep", action="store_true", help="leave the data in the database at the end")
    keep.add_argument("--reuse", action="store_true", help="reuse the ledger an earlier --keep run left, and keep it")
    args = parser.parse_args()
    if make_url(args.database_url).get_backend_name() != "postgresql":
        parser.error("the workload is generated with PostgreSQL's generate_series: give a PostgreSQL URL")

    engine = make_engine(args.database_url)
    try:
        if args.reuse and _ledger_present(engine, args.nodes, args.days):
            upgrade(engine)
            print("reusing the data and ledger of an earlier --keep run")
        else:
            downgrade(engine, "base")
            upgrade(engine)
            generation = generate(engine, args.nodes, args.days)
            print(f"data generation: {sum(generation.values()):.1f} s")
            began = time.perf_counter()
            with session_factory(engine).begin() as session:
                pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
                rollup(session, pricing, to_epoch(MONTH + timedelta(days=args.days)))
            print(f"rollup, whole month: {time.perf_counter() - began:.1f} s")
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
                c.execute(text("VACUUM ANALYZE"))
        rows = counts(engine)
        print(
            f"workload: {rows['gpus']:,} GPUs, {args.days} days from {MONTH:%Y-%m-%d}, {rows['gpu_samples']:,} "
            f"readings, {rows['jobs']:,} jobs, {rows['allocations']:,} allocations "
            f"({rows['MIG allocations']:,} MIG shares), {rows['ledger']:,} ledger rows"
        )
        _print("rightsizing, month, default thresholds", *_timed(engine, args.days, RightsizingPolicy(), args.runs))
        if args.every_job_runs:
            every = RightsizingPolicy(low_utilization_ratio=1.0)
            timed = _timed(engine, args.days, every, args.every_job_runs)
            _print("rightsizing, month, every job's memory read", *timed)
    finally:
        if not (args.keep or args.reuse):
            downgrade(engine, "base")
        engine.dispose()


if __name__ == "__main__":
    main()
