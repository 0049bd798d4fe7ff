"""Ingest at fleet scale on this machine: single-cycle POSTs per ``serve --workers`` count, binary ``COPY`` over
several connections, and a fleet's hour through two ``serve`` replicas with the rollup every 5 minutes.

Usage::

    .venv/bin/python benchmarks/fleet.py postgresql+psycopg://postgres@127.0.0.1:5432/bench \\
        [--gpus 800] [--workers 1 2 4] [--copy-connections 8] [--fleet-gpus 1000] [--fleet-minutes 15] \\
        [--clients 8] [--load httpx wrk] [--repeat 2] [--compare /path/to/other/checkout]

The database's schema is dropped and migrated afresh; PostgreSQL must run on this machine (its backends' CPU time
is read from /proc). Prints figures; asserts nothing about time. Helpers and workload are those of
:mod:`benchmarks.ingest`.

1. **Steady state per worker count**: every node of a ``--gpus`` fleet posting its first 20 cycles as
   single-cycle POSTs (8 readings each, as the collector does every 10 s), against ``serve --workers N`` for each
   ``--workers`` value, alternating, ``--repeat`` times, each after a warm-up pass of the same POSTs (each process
   caches GPU ids and partitions of its own): POST/s, service CPU µs per POST (all its processes) and PostgreSQL's.
   Two load generators (``--load``), each with ``--clients`` connections: ``httpx`` threads in this process (about
   0.7 ms of CPU per POST on the same 2 cores) and ``wrk`` (Debian package ``wrk``, tens of µs per POST: nearer a
   fleet whose collectors run on their own nodes), so that the service's rate is seen with and without the clients'
   share of the machine. With ``--compare``, each case also runs the ``serve`` of another checkout (e.g. ``git
   worktree add /tmp/before <commit>``) right after this one's, on the same database (its schema taken down to the
   other checkout's newest migration first, and up again after: :func:`migrate_for`), and the ratios are printed.
2. **COPY**: the same fleet's rows (``--hours`` of them) by text ``COPY`` on one connection beside binary ``COPY``
   (``set_types``) cut over ``--copy-connections`` connections, alternating: rows/s and CPU µs per row.
3. **Replicas**: ``--fleet-gpus`` GPUs read every 10 s for ``--fleet-minutes`` minutes (10,000 GPUs and 60 minutes
   is the full size: 3.6 M readings), single-cycle POSTs in time order through two ``serve`` processes on two ports,
   the clients alternating between them; after each 5 simulated minutes the scheduler's rollup runs once
   (:func:`finops.service.scheduler.run_rollup`). POST latency p50/p99, readings/s, the rollup's seconds per
   5-minute cycle (the first, which builds the GPUs' first hours, shown apart), and PostgreSQL's bytes per GPU-day:
   ``pg_total_relation_size`` of the ``gpu_samples`` partitions and the ledger tables over the GPU-days stored.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import psycopg
from sqlalchemy import Engine, make_url

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.ingest import (  # noqa: E402
    GPUS_PER_NODE,
    INTERVAL_SECONDS,
    STEADY_CYCLES,
    Backends,
    Run,
    _bodies,
    _fleet_samples,
    _median,
    _rows,
    copy_run,
    http_run,
    serving,
    wrk_run,
)
from finops.cli.context import idle_policy, load_pricing, load_settings, open_sessions  # noqa: E402
from finops.db.engine import downgrade, head_revision, make_engine, upgrade  # noqa: E402
from finops.ingest.partitions import create_partitions  # noqa: E402
from finops.service.scheduler import run_rollup  # noqa: E402
from finops.timeutil import to_epoch  # noqa: E402

PARTS = ("steady", "copy", "replicas")
"""The module's parts, in the order they run."""
ROLLUP_CYCLES = 5 * 60 // INTERVAL_SECONDS
"""Collection cycles between two rollups: 5 minutes of readings."""
STORAGE_SQL = """
SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = current_schema()
WHERE c.relkind = 'r' AND (c.relname LIKE 'gpu\\_samples\\_p%' OR c.relname LIKE 'ledger%')
"""
"""Bytes of the ``gpu_samples`` day partitions and the ledger tables, indexes and TOAST included."""


Case = tuple[str, str, int]
"""(code: ``this`` or ``before``, load generator, ``--workers``)."""


def steady_by_workers(url: str, token: str, steady: list[tuple[int, bytes]], workers: list[int], clients: int,
                      loads: list[str], repeat: int, backends: Backends,
                      codes: dict[str, Path]) -> dict[Case, list[tuple[Run, float]]]:  # fmt: skip
    """(run, POST/s) of ``steady`` per code (name → checkout), load generator and worker count, ``repeat`` times,
    alternating."""
    runs: dict[Case, list[tuple[Run, float]]] = {(c, load, n): [] for load in loads for n in workers for c in codes}
    engine = make_engine(url)
    for _ in range(repeat):
        for load in loads:
            for n in workers:
                for name, code in codes.items():
                    migrate_for(engine, code)
                    with serving(url, token, "--workers", str(n), code=code) as (base, server):
                        # Warm-up: every process meets every node (GPU ids and partitions are cached per process).
                        http_run(base, token, steady, clients, server, backends)
                        run = wrk_run if load == "wrk" else http_run
                        runs[name, load, n].append(run(base, token, steady, clients, server, backends))
    engine.dispose()
    return runs


def migrate_for(engine: Engine, code: Path) -> None:
    """The database's schema at the newest migration of checkout ``code``: this tree's migrations upgrade to it, or
    downgrade to it when ``code`` is an older checkout (whose ``serve`` refuses a schema newer than its code; the
    tables dropped are the newer code's own)."""
    head = head_revision(code / "migrations")
    if head == head_revision():
        upgrade(engine)
    else:
        downgrade(engine, head)


def replicas(url: str, token: str, gpus: int, minutes: int, clients: int, backends: Backends) -> None:
    """Part 3 of the module: the fleet's readings through two replicas, the rollup every 5 minutes; prints it."""
    fleet = _fleet_samples(gpus, minutes / 60)
    cycles = len(next(iter(fleet.values())))
    os.environ["FINOPS_DATABASE_URL"] = url
    settings = load_settings()
    sessions, pricing, policy = open_sessions(settings), load_pricing(settings), idle_policy(settings)
    posts: list[Run] = []
    rollups: list[float] = []
    began = time.perf_counter()
    with ExitStack() as stack:
        served = [stack.enter_context(serving(url, token)) for _ in range(2)]
        bases, servers = [base for base, _ in served], [pid for _, pid in served]
        for first in range(0, cycles, ROLLUP_CYCLES):
            window = {node: node_cycles[first : first + ROLLUP_CYCLES] for node, node_cycles in fleet.items()}
            posts.append(http_run(bases, token, _bodies(window, 1), clients, servers, backends, empty=False)[0])
            rolled = time.perf_counter()
            run_rollup(sessions, pricing, policy)
            rollups.append(time.perf_counter() - rolled)
            print(f"  minutes {first * INTERVAL_SECONDS // 60}–{(first + ROLLUP_CYCLES) * INTERVAL_SECONDS // 60}: "
                  f"{posts[-1].rate:,.0f} readings/s, POST p50 {posts[-1].latency_ms(0.5):.1f} ms, rollup "
                  f"{rollups[-1]:.2f} s", flush=True)  # fmt: skip
    elapsed = time.perf_counter() - began
    latencies = Run(0, 0, 0, latencies=[s for run in posts for s in run.latencies])
    readings = gpus // GPUS_PER_NODE * GPUS_PER_NODE * cycles
    with psycopg.connect(backends.conninfo) as connection:
        stored = connection.execute(STORAGE_SQL).fetchone()
    gpu_days = readings * INTERVAL_SECONDS / 86400
    print(f"\nreplicas: {gpus:,} GPUs × {minutes} min at {INTERVAL_SECONDS} s = {readings:,} readings, single-cycle "
          f"POSTs through 2 serve processes, rollup every 5 min; {elapsed:.0f} s in all")  # fmt: skip
    service_us = statistics.median(run.sender_us for run in posts) * GPUS_PER_NODE
    print(f"  POST latency p50 {latencies.latency_ms(0.5):.1f} ms, p99 {latencies.latency_ms(0.99):.1f} ms; "
          f"{statistics.median(run.rate for run in posts):,.0f} readings/s (median of the 5-minute windows); "
          f"service CPU {service_us:,.0f} µs/POST (2 processes)")  # fmt: skip
    steady = rollups[1:] or rollups
    print(f"  rollup per 5-minute cycle: first {rollups[0]:.2f} s, then median {statistics.median(steady):.2f} s "
          f"(max {max(steady):.2f} s) over {len(steady)}")  # fmt: skip
    size = int(stored[0]) if stored else 0
    print(f"  PostgreSQL: {size / 2**20:,.1f} MiB of samples and ledger for {gpu_days:,.1f} GPU-days = "
          f"{size / gpu_days / 2**20:,.1f} MiB per GPU-day")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("database_url", help="PostgreSQL SQLAlchemy URL; its schema is dropped and recreated")
    parser.add_argument("--gpus", type=int, default=800, help="fleet of the steady state and COPY runs")
    parser.add_argument("--hours", type=float, default=1.0, help="hours of readings the COPY runs load")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4], help="serve --workers values")
    parser.add_argument("--copy-connections", type=int, default=8, help="connections of the binary COPY")
    parser.add_argument("--fleet-gpus", type=int, default=1000, help="replica run's fleet (full size: 10000)")
    parser.add_argument("--fleet-minutes", type=int, default=15, help="replica run's minutes (full size: 60)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent HTTP clients")
    parser.add_argument(
        "--load",
        nargs="+",
        choices=("httpx", "wrk"),
        default=["httpx", "wrk"],
        help="load generators of the steady state (wrk: Debian package wrk)",
    )
    parser.add_argument("--repeat", type=int, default=2, help="measurements of each steady-state and COPY case")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="parts to run (default: all)")
    parser.add_argument("--compare", type=Path, help="another checkout whose serve the steady state alternates with")
    args = parser.parse_args()
    if make_url(args.database_url).get_backend_name() != "postgresql":
        parser.error("this benchmark measures PostgreSQL: give a PostgreSQL URL")
    if "steady" in args.parts and "wrk" in args.load and shutil.which("wrk") is None:
        parser.error("--load wrk needs wrk(1): apt-get install wrk (or --load httpx)")
    if "copy" in args.parts and "steady" not in args.parts:
        parser.error("--parts copy needs steady: it copies readings of the GPUs that steady registers")
    engine = make_engine(args.database_url)
    downgrade(engine, "base")
    upgrade(engine)
    conninfo = make_url(args.database_url).set(drivername="postgresql").render_as_string(hide_password=False)
    backends, token = Backends(conninfo), secrets.token_urlsafe()
    with open("/proc/loadavg") as load:
        print(f"load average at the start: {' '.join(load.read().split()[:3])}")

    if "steady" in args.parts:
        steady_state(args, token, backends)
    if "copy" in args.parts:
        copies(args, engine, conninfo)
    if "replicas" in args.parts:
        engine.dispose()
        downgrade(engine, "base")
        upgrade(engine)
        replicas(args.database_url, token, args.fleet_gpus, args.fleet_minutes, args.clients, backends)


def steady_state(args: argparse.Namespace, token: str, backends: Backends) -> None:
    """Part 1 of the module: single-cycle POSTs per worker count (and code, with ``--compare``); prints it."""
    fleet = _fleet_samples(args.gpus, args.hours)
    steady = _bodies({node: cycles[:STEADY_CYCLES] for node, cycles in fleet.items()}, 1)
    print(f"steady state: {len(steady):,} single-cycle POSTs of {args.gpus} GPUs, {args.clients} clients")
    codes = {"this": REPO} | ({"before": args.compare.resolve()} if args.compare else {})
    by_case = steady_by_workers(args.database_url, token, steady, args.workers, args.clients, args.load, args.repeat,
                                backends, codes)  # fmt: skip
    rates: dict[Case, float] = {}
    for (name, load, n), runs in by_case.items():
        run, rates[name, load, n] = _median([r for r, _ in runs]), statistics.median(s for _, s in runs)
        each = ", ".join(f"{s:,.0f}" for _, s in runs)
        print(
            f"  {name if args.compare else ''} {load}, --workers {n}: {rates[name, load, n]:,.0f} POST/s ({each}), "
            f"a fleet of {rates[name, load, n] * GPUS_PER_NODE * INTERVAL_SECONDS:,.0f} GPUs at {INTERVAL_SECONDS} s;"
            f" CPU per POST: service {run.sender_us * GPUS_PER_NODE:,.0f} µs + PostgreSQL "
            f"{run.postgres_us * GPUS_PER_NODE:,.0f} µs; the load generator {run.client_us * GPUS_PER_NODE:,.0f} µs"
        )
    if args.compare:
        for (name, load, n), rate in rates.items():
            if name == "this":
                print(f"  {load}, --workers {n}: this / before = {rate / rates['before', load, n]:.2f} × POST/s")
    with open("/proc/loadavg") as average:
        print(f"load average at the end: {' '.join(average.read().split()[:3])}")


def copies(args: argparse.Namespace, engine: Engine, conninfo: str) -> None:
    """Part 2 of the module: text ``COPY`` on one connection beside binary ``COPY`` on several; prints it."""
    fleet = _fleet_samples(args.gpus, args.hours)
    with engine.begin() as connection:
        create_partitions(connection, {to_epoch(cycle[0].timestamp) for cycle in next(iter(fleet.values()))})
    with psycopg.connect(conninfo) as connection:
        rows = _rows(fleet, dict(connection.execute("SELECT uuid, id FROM gpus").fetchall()))
    cases = {"text, 1 connection": (1, False), f"binary, {args.copy_connections} connections": (args.copy_connections,
                                                                                            True)}  # fmt: skip
    runs_by_case: dict[str, list[Run]] = {name: [] for name in cases}
    for _ in range(args.repeat):
        for name, (connections, binary) in cases.items():
            runs_by_case[name].append(copy_run(conninfo, rows, connections, binary))
    print(f"COPY of {len(rows):,} rows:")
    for name, runs in runs_by_case.items():
        run = _median(runs)
        print(f"  {name}: {run.rate:,.0f} rows/s ({', '.join(f'{r.rate:,.0f}' for r in runs)}); CPU per row: client "
              f"{run.sender_us:.1f} + PostgreSQL {run.postgres_us:.1f} µs")  # fmt: skip


if __name__ == "__main__":
    main()
