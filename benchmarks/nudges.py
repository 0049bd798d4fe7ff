"""Nudges found over a ledger at cluster scale: :func:`finops.savings.nudges.find_nudges` on an existing database,
read-only (the ledger benchmark's month of 1,024 H100s, ``benchmarks/ledger.py --keep``).

Usage::

    .venv/bin/python benchmarks/nudges.py DATABASE_URL [--now 2026-10-31T00:00:00Z] [--runs 3]

``--now`` defaults to the end of the newest ledger hour. Runs in a read-only transaction (PostgreSQL) that is rolled
back: nothing is written, and the nudge log is not read, so a database of an older migration works too. Prints the
nudges per kind, the users and jobs they name, and the median wall-clock time of ``--runs`` runs with the machine's
load average; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

from sqlalchemy import func, select, text

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from finops.db.engine import make_engine, session_factory  # noqa: E402
from finops.db.ledger_tables import LedgerEntry  # noqa: E402
from finops.pricing.catalog import load_catalog  # noqa: E402
from finops.pricing.store import catalog_in_force  # noqa: E402
from finops.savings.nudges import NUDGE_KINDS, NudgePolicy, find_nudges  # noqa: E402
from finops.timeutil import HOUR, parse_utc  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("database_url")
    parser.add_argument("--now", help="the instant the nudges are looked for (ISO 8601; default: the ledger's end)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    sessions = session_factory(make_engine(args.database_url))
    policy = NudgePolicy()
    configured = load_catalog()
    timings = []
    for _ in range(args.runs):
        with sessions() as session:
            if session.get_bind().dialect.name == "postgresql":
                session.execute(text("SET TRANSACTION READ ONLY"))
            if args.now:
                now = parse_utc(args.now)
            else:
                newest = session.scalar(select(func.max(LedgerEntry.hour)))
                assert newest is not None, "the ledger is empty"
                now = newest + timedelta(seconds=HOUR)
            started = time.perf_counter()
            found = find_nudges(session, now, policy, catalog=catalog_in_force(session, configured))
            timings.append(time.perf_counter() - started)
            session.rollback()
    with sessions() as session:
        rows = session.scalar(
            select(func.count()).where(LedgerEntry.hour >= now - policy.period, LedgerEntry.hour < now)
        )
    kinds = Counter(n.kind for n in found)
    print(f"now {now.isoformat()}, period {policy.period}: {rows:,} ledger rows")
    for kind in NUDGE_KINDS:
        nudges = [n for n in found if n.kind == kind]
        jobs = sum(len(n.jobs) for n in nudges)
        print(f"  {kind:<22} {kinds[kind]:>5} users, {jobs:>6} jobs")
    print(
        f"find_nudges: median {statistics.median(timings):.2f} s of {args.runs} runs "
        f"({', '.join(f'{t:.2f}' for t in timings)}); load average {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
