"""Idle re-judging of a cold month beside the rollup that precedes it, this tree's code and a baseline tree's in one
run, on PostgreSQL.

Usage::

    .venv/bin/python benchmarks/idle_rejudge.py --baseline-tree DIR [DATABASE_URL] [--nodes 128] [--days 30]
        [--rounds 1] [--keep | --reuse]

``DIR`` is a checkout of the code to compare with (``git worktree add /tmp/base-idle 1ce0865``: before idle runs
were found a day at a time). ``DATABASE_URL`` defaults to ``postgresql+psycopg://postgres@127.0.0.1:5432/test_e``;
the workload is ``benchmarks/ledger.py``'s (a month of 1,024 H100s read every minute, ~44 M readings, with the
waste reasons' node rates and job names), generated afresh into a schema migrated by this tree unless ``--reuse``
finds the data of an earlier ``--keep`` run (of this script or of ``benchmarks/ledger.py``). The schema is dropped
at the end unless ``--keep`` or ``--reuse``.

Each round runs the baseline tree, then this one, each in a subprocess that imports that tree's ``finops``: the
ledger, the idle episodes and the metering's kept sums and cursors emptied (``VACUUM ANALYZE`` after), ``rollup`` of
the whole period into the empty ledger (cold), then ``rejudge_idle`` over the hours it rebuilt in a transaction of
its own, as a month-old backfill or a catalog change pays them (the scheduler runs both in one transaction).
Printed per run: the load average (1 min) before each, the rollup's and the re-judging's wall time, of the latter
the time judging waste reasons (``judge_episodes``), the ratio re-judging ÷ rollup, the episodes stored and a digest
of them (GPU, job, start, end, memory held, cost, currency, reason, evidence): the same digest for both trees says
they stored the same episodes. This tree's run then re-prices the stored episodes of every hour as a price change
alone has the next rollup do (``reprice_episodes``, the catalog's reserved rates as the default), and prints its
time beside the re-judging's.
Asserts nothing about time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MONTH = datetime(2026, 10, 1, tzinfo=UTC)
"""The workload's first day (``benchmarks.ledger.MONTH``; not imported by a run, which imports another tree)."""


def child(tree: str, url: str, days: int) -> None:
    """Run the rollup and the re-judging with ``tree``'s code; print one JSON line of figures."""
    sys.path.insert(0, tree)
    from sqlalchemy import text

    import finops.analysis.idle as idle
    from finops.db.engine import make_engine, session_factory
    from finops.ledger.rollup import rollup
    from finops.pricing.catalog import Pricing, PricingModel, load_catalog
    from finops.timeutil import to_epoch

    month = to_epoch(MONTH)
    engine = make_engine(url)
    with engine.begin() as c:
        tables = ["ledger_team_hours", "ledger", "ledger_dirty_hours", "idle_episodes", "ledger_repriced_hours"]
        tables += ["metering_cursors", "gpu_hour_metering", "metered_holdings", "reading_arrivals"]  # kept sums
        for table in tables:
            if c.scalar(text("SELECT to_regclass(:t)"), {"t": table}) is not None:
                c.execute(text(f"DELETE FROM {table}"))  # noqa: S608 - the names above
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.execute(text("VACUUM ANALYZE ledger"))
        c.execute(text("VACUUM ANALYZE idle_episodes"))
    sessions = session_factory(engine)
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    figures: dict[str, Any] = {"tree": tree, "load_rollup": os.getloadavg()[0]}
    hours: list[int] = []
    began = time.perf_counter()
    with sessions.begin() as session:
        rollup(session, pricing, month + days * 86_400, rebuilt=hours)
    figures["rollup"] = time.perf_counter() - began
    judging = [0.0]
    judge = idle.judge_episodes

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return judge(*args, **kwargs)
        finally:
            judging[0] += time.perf_counter() - started

    idle.judge_episodes = timed
    figures["load_rejudge"] = os.getloadavg()[0]
    began = time.perf_counter()
    with sessions.begin() as session:
        figures["episodes"] = idle.rejudge_idle(session, hours, idle.IdlePolicy(), pricing)
    figures["rejudge"] = time.perf_counter() - began
    figures["judging"] = judging[0]
    digest = hashlib.sha256()
    with engine.connect() as c:
        for row in c.execute(
            text(
                'SELECT gpu_id, job_pk, start, "end", memory_held, cost, currency, reason, evidence FROM idle_episodes '
                'ORDER BY gpu_id, job_pk, start, "end"'
            )
        ):
            digest.update(repr(tuple(row)).encode())
    figures["digest"] = digest.hexdigest()[:16]
    if (Path(tree) / "finops" / "analysis" / "idle_prices.py").is_file():  # a tree that re-prices
        from finops.analysis.idle_prices import reprice_episodes

        reserved = Pricing(load_catalog(), PricingModel.RESERVED)
        figures["load_reprice"] = os.getloadavg()[0]
        began = time.perf_counter()
        with sessions.begin() as session:
            figures["repriced"] = reprice_episodes(session, reserved, hours)
        figures["reprice"] = time.perf_counter() - began
    engine.dispose()
    print(json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("database_url", nargs="?", default="postgresql+psycopg://postgres@127.0.0.1:5432/test_e")
    parser.add_argument("--baseline-tree", required=True, help="checkout of the code to compare with")
    parser.add_argument("--nodes", type=int, default=128, help="8-GPU nodes (default 128: 1,024 GPUs)")
    parser.add_argument("--days", type=int, default=30, help="days of 1-minute readings (default 30)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of baseline then this tree (default 1)")
    keep = parser.add_mutually_exclusive_group()
    keep.add_argument("--keep", action="store_true", help="leave the data in the database at the end")
    keep.add_argument("--reuse", action="store_true", help="reuse the data of an earlier --keep run, and keep it")
    args = parser.parse_args()

    sys.path.insert(0, str(REPO))
    from benchmarks.ledger import _data_present, counts, generate, reason_inputs
    from finops.db.engine import downgrade, make_engine, upgrade

    engine = make_engine(args.database_url)
    try:
        if args.reuse and _data_present(engine, args.nodes, args.days):
            print("reusing the data of an earlier --keep run")
            upgrade(engine)
        else:
            downgrade(engine, "base")
            upgrade(engine)
            generation = generate(engine, args.nodes, args.days)
            print(f"data generation: {sum(generation.values()):.1f} s")
        print(f"waste reason inputs (node rates per hour, job names): {reason_inputs(engine, args.days):.1f} s")
        rows = counts(engine)
        print(
            f"workload: {rows['gpus']:,} GPUs, {args.days} days from {MONTH:%Y-%m-%d}: {rows['gpu_samples']:,} "
            f"readings, {rows['jobs']:,} jobs, {rows['allocations']:,} allocations; on {os.cpu_count()} CPUs"
        )
        runs: list[dict[str, Any]] = []
        for _ in range(args.rounds):
            for tree in (args.baseline_tree, str(REPO)):
                command = [sys.executable, __file__, "--child", tree, args.database_url, str(args.days)]
                done = subprocess.run(command, check=True, capture_output=True, text=True)
                figures = json.loads(done.stdout.strip().splitlines()[-1])
                figures["name"] = "baseline" if tree == args.baseline_tree else "this tree"
                runs.append(figures)
                report(figures)
        digests = {run["digest"] for run in runs}
        print("episodes stored: " + ("the same with both trees" if len(digests) == 1 else f"DIFFER: {digests}"))
    finally:
        if not (args.keep or args.reuse):
            downgrade(engine, "base")
        engine.dispose()


def report(run: dict[str, Any]) -> None:
    """One line of a run's figures."""
    line = (
        f"{run['name']:>9}: rollup {run['rollup']:7.1f} s (load {run['load_rollup']:.1f}), re-judging "
        f"{run['rejudge']:7.1f} s (load {run['load_rejudge']:.1f}; waste reasons {run['judging']:.1f} s) = "
        f"{run['rejudge'] / run['rollup']:.2f} × the rollup; {run['episodes']:,} episodes, digest {run['digest']}"
    )
    if "reprice" in run:
        line += (
            f"; a price change alone: {run['repriced']:,} episodes re-priced in {run['reprice']:.2f} s "
            f"(load {run['load_reprice']:.1f}) = {run['reprice'] / run['rejudge']:.3f} × re-judging"
        )
    print(line, flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        main()
