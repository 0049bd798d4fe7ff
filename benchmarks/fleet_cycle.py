"""The scheduler's 5-minute cycle of a fleet on PostgreSQL with ingest running beside it, up to the hour's end, this
tree's code and a baseline tree's in one run.

Usage::

    .venv/bin/python benchmarks/fleet_cycle.py --baseline-tree DIR [DATABASE_URL] [--gpus 10000] [--rate 1000]
        [--connections 16]

``DIR`` is a checkout of the code to compare with (``git worktree add /tmp/base <commit>``). ``DATABASE_URL``
(default ``postgresql+psycopg://postgres@127.0.0.1:5432/test_fleet_cycle``; PostgreSQL only): its ``public`` schema
is dropped and migrated afresh by each tree's code. Needs wrk(1) (Debian package ``wrk``). Prints figures; asserts
nothing about time.

Workload: ``--gpus`` H100s (8 per node) read every 10 s (:func:`benchmarks.ingest._fleet_samples`), the hour from
today's 00:00 UTC to 01:00 and the five minutes after it. Per tree, baseline first, with ``serve --workers 2`` of
that tree and a child process of that tree standing for the scheduler (:func:`finops.service.scheduler.run_rollup`
with its clock set to the instant of each 5-minute mark):

1. every node POSTs its 00:00 cycle (nodes, GPUs and jobs registered by the service);
2. minutes 0–55 are stored by SQL (each GPU's 00:00 reading repeated every 10 s, its energy counter growing by its
   power up to the value its 00:55 POST carries), 5 minutes at a time, each part followed by ``ANALYZE
   gpu_samples`` (as autovacuum does once a day partition has grown; untimed) and, up to 00:50, the rollup of that
   5-minute mark (timed, nothing beside it): the earlier part of the hour as the scheduler would have left it,
   without the hour of POSTs it would take;
3. minutes 55–65 are POSTed by the nodes as single-cycle POSTs in time order (nodes interleaved) by wrk over
   ``--connections`` connections, each waiting ``connections / rate`` seconds after an answer before its next
   request: at most ``--rate`` POST/s, less by the answers' latency (at 32 connections, 1,100 and a 9 ms median
   latency, about 830);
   the 00:55 rollup starts with wrk, the hour's-end rollup (01:00) as soon as every reading before 01:00 is
   stored, both while wrk posts the readings of the next minutes.

Printed per tree: the load average (1 min) at each step, each rollup's seconds (the last two with ingest beside),
and of them the ledger's (``rollup``), the idle re-judging's (``rejudge_idle``), the job map's reconciliation and the
budget and anomaly events' (:data:`PARTS`),
wrk's POST/s and its latency p50 and p99 over all the POSTs of step 3 (wrk reports percentiles per run, not per
moment: the hour's-end rollup takes part of that run).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from sqlalchemy import make_url
from tree_runs import timed

if TYPE_CHECKING:
    from collector.contract.sample import Sample

REPO = Path(__file__).resolve().parents[1]
PART = 300
"""Seconds between two rollups, as the scheduler runs them."""
COLUMNS = (
    "utilization_ratio, memory_utilization_ratio, memory_used_bytes, temperature_celsius, sm_clock_hertz, "
    "clocks_event_reasons, job_id"
)
"""Columns of ``gpu_samples`` a pre-loaded reading copies from its GPU's first one (power and energy apart)."""
PRELOAD_SQL = f"""
INSERT INTO gpu_samples (gpu_id, ts, power_watts, energy_joules, {COLUMNS})
SELECT s.gpu_id, t, s.power_watts, s.energy_joules + s.power_watts * (t - s.ts), {COLUMNS}
FROM gpu_samples s CROSS JOIN generate_series(%(first)s::bigint, %(last)s::bigint, 10) t WHERE s.ts = %(start)s
"""  # noqa: S608 - the constant above
"""Readings [first, last] of every GPU, from its reading at ``start``."""

PARTS = {
    "rollup": "ledger",
    "rejudge_idle": "idle re-judging",
    "reconcile_job_map": "job map",
    "record_budget_events": "budget events",
    "record_anomaly_events": "anomaly events",
}
"""The steps of :func:`finops.service.scheduler.run_rollup` timed apart (the function's name there: what is printed)."""


def child(tree: str, url: str) -> None:
    """The scheduler of ``tree``: migrate the database afresh, print ``ready``, then for each line of stdin (an
    instant, epoch seconds) run the rollup with the clock at that instant and print one JSON line of figures."""
    sys.path.insert(0, tree)
    os.environ["FINOPS_DATABASE_URL"] = url
    from sqlalchemy import text

    import finops.service.scheduler as scheduler
    from finops.cli.context import idle_policy, load_pricing, load_settings, open_sessions
    from finops.db.engine import make_engine, upgrade
    from finops.timeutil import from_epoch

    engine = make_engine(url)
    with engine.begin() as connection:  # the other tree's migrations may be unknown to this one's
        connection.execute(text("DROP SCHEMA public CASCADE"))
        connection.execute(text("CREATE SCHEMA public"))
    upgrade(engine)
    engine.dispose()
    settings = load_settings()
    sessions, pricing, policy = open_sessions(settings), load_pricing(settings), idle_policy(settings)
    parts = dict.fromkeys(PARTS, 0.0)
    for name in parts:
        if hasattr(scheduler, name):  # a tree without the step leaves its figure 0
            setattr(scheduler, name, timed(getattr(scheduler, name), parts, name))
    print("ready", flush=True)
    for line in sys.stdin:
        until = int(line)
        scheduler.utc_now = functools.partial(from_epoch, until)
        parts.update(dict.fromkeys(parts, 0.0))
        load = os.getloadavg()[0]
        began = time.perf_counter()
        built, _ = scheduler.run_rollup(sessions, pricing, policy)
        seconds = time.perf_counter() - began
        figures = {"until": until, "seconds": seconds, "load": load, "hours": built.hours} | parts
        print(json.dumps(figures), flush=True)


class Scheduler:
    """A running :func:`child` of a tree."""

    def __init__(self, tree: Path, url: str) -> None:
        command = [sys.executable, __file__, "--child", str(tree), url]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tree)
        if self._line() != "ready":
            raise RuntimeError("the scheduler child did not start")

    def _line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the scheduler child ended")
        return line.strip()

    def start(self, until: int) -> None:
        """Start the rollup of the clock at ``until``."""
        assert self.process.stdin is not None
        self.process.stdin.write(f"{until}\n")
        self.process.stdin.flush()

    def result(self) -> dict[str, Any]:
        """The figures of the rollup started last (waits for it)."""
        return dict(json.loads(self._line()))

    def close(self) -> None:
        """End the child."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "database_url", nargs="?", default="postgresql+psycopg://postgres@127.0.0.1:5432/test_fleet_cycle"
    )
    parser.add_argument("--baseline-tree", type=Path, required=True, help="checkout of the code to compare with")
    parser.add_argument("--gpus", type=int, default=10_000, help="fleet size (8 GPUs a node; default 10,000)")
    parser.add_argument("--rate", type=float, default=1000.0, help="POST/s wrk aims at (default 1,000)")
    parser.add_argument("--connections", type=int, default=16, help="wrk's connections (default 16)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from benchmarks.ingest import GPUS_PER_NODE, Backends, _bodies, _fleet_samples, http_run, serving

    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    start = int(midnight.timestamp())
    began = time.perf_counter()
    fleet = _fleet_samples(args.gpus, 10 / 60)  # ten minutes, moved to 00:55-01:05
    shift = midnight + timedelta(minutes=55) - next(iter(fleet.values()))[0][0].timestamp
    fleet = {
        node: [[dataclasses.replace(s, timestamp=s.timestamp + shift) for s in cycle] for cycle in cycles]
        for node, cycles in fleet.items()
    }
    first = {node: [[at_midnight(s) for s in cycles[0]]] for node, cycles in fleet.items()}
    registration, posts = _bodies(first, 1), _bodies(fleet, 1)
    nodes = len(fleet)
    print(f"{nodes * GPUS_PER_NODE:,} GPUs on {nodes:,} nodes; {len(posts):,} single-cycle POSTs of 00:55-01:05; "
          f"bodies made in {time.perf_counter() - began:.0f} s; on {os.cpu_count()} CPUs")  # fmt: skip
    conninfo = make_url(args.database_url).set(drivername="postgresql").render_as_string(hide_password=False)
    backends, token = Backends(conninfo), secrets.token_urlsafe()
    with tempfile.TemporaryDirectory() as folder:
        for i, (_, body) in enumerate(posts, start=1):
            Path(folder, f"{i}.gz").write_bytes(body)
        for name, tree in (("baseline", args.baseline_tree.resolve()), ("this tree", REPO)):
            print(f"\n{name} ({tree}):", flush=True)
            scheduler = Scheduler(tree, args.database_url)
            try:
                with serving(args.database_url, token, "--workers", "2", code=tree) as (base, server):
                    http_run(base, token, registration, 8, server, backends, empty=False)
                    preload(scheduler, conninfo, start)
                    beside(scheduler, conninfo, start, base, token, folder, len(posts), args, nodes * GPUS_PER_NODE)
            finally:
                scheduler.close()


def at_midnight(sample: Sample) -> Sample:
    """``sample`` (of 00:55) read at 00:00 instead, its energy counter lower by 55 minutes at its power, so that the
    readings :data:`PRELOAD_SQL` makes from it meet it at 00:55."""
    from collector.contract import metric_names as m

    values = dict(sample.values)
    values[m.GPU_ENERGY] -= values[m.GPU_POWER] * 3300
    return dataclasses.replace(sample, timestamp=sample.timestamp.replace(hour=0, minute=0), values=values)


def preload(scheduler: Scheduler, conninfo: str, start: int) -> None:
    """Step 2 of the module: minutes 0–55 by SQL, the rollup of each 5-minute mark up to 00:50 after its part;
    prints them."""
    seconds = []
    for mark in range(start + PART, start + 3600 - PART + 1, PART):
        with psycopg.connect(conninfo, autocommit=True) as connection:
            params = {"first": max(mark - PART, start + 10), "last": mark - 10, "start": start}
            connection.execute(PRELOAD_SQL, params)
            connection.execute("ANALYZE gpu_samples")
        if mark < start + 3600 - PART:
            scheduler.start(mark)
            seconds.append(scheduler.result())
    print(f"  rollups at 00:05..00:50 after each part stored by SQL, nothing beside ({' + '.join(PARTS.values())}): "
          f"{', '.join(split(done) for done in seconds)}", flush=True)  # fmt: skip


def split(done: dict[str, Any]) -> str:
    """A rollup's seconds, and of them the parts of :data:`PARTS` in their order."""
    return f"{done['seconds']:.2f} s ({' + '.join(f'{done[name]:.2f}' for name in PARTS)})"


def beside(scheduler: Scheduler, conninfo: str, start: int, base: str, token: str, folder: str, count: int,
           args: argparse.Namespace, gpus: int) -> None:  # fmt: skip
    """Step 3 of the module: minutes 55–65 by wrk, the 00:55 and 01:00 rollups while it posts; prints them."""
    connections = args.connections
    env = {**os.environ, "WRK_DIR": folder, "WRK_BODIES": str(count), "WRK_TOKEN": token,
           "WRK_DELAY_MS": str(connections * 1000 / args.rate)}  # fmt: skip
    script = REPO / "benchmarks" / "wrk_post.lua"
    command = ["wrk", "-t1", f"-c{connections}", "-d900s", "--latency", "-s", str(script), base]
    load = os.getloadavg()[0]
    began = time.perf_counter()
    wrk = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    scheduler.start(start + 3600 - PART)
    before = scheduler.result()
    hour_end = start + 3600
    with psycopg.connect(conninfo, autocommit=True) as connection:
        while True:  # every reading of 00:55-01:00 stored: the hour's end has come
            row = connection.execute(
                "SELECT count(*) FROM gpu_samples WHERE ts >= %s AND ts < %s", (hour_end - PART, hour_end)
            ).fetchone()
            if row is not None and row[0] >= gpus * PART // 10:
                break
            time.sleep(0.2)
    waited = time.perf_counter() - began
    scheduler.start(hour_end)
    end = scheduler.result()
    assert wrk.stderr is not None
    errors = []
    for line in wrk.stderr:
        errors.append(line)
        if line.startswith("answered "):
            break
    elapsed = time.perf_counter() - began
    wrk.send_signal(signal.SIGINT)
    out, _ = wrk.communicate(timeout=60)
    if f"answered {count} failed 0" not in "".join(errors):
        raise RuntimeError(f"wrk: not every POST answered 200: {''.join(errors)[-500:]}")
    percentiles = dict(re.findall(r"^\s+(50|99)%\s+(\S+)$", out, re.MULTILINE))
    print(f"  wrk: {count:,} POSTs in {elapsed:.1f} s = {count / elapsed:,.0f} POST/s (load {load:.1f} at its start),"
          f" latency p50 {percentiles.get('50')}, p99 {percentiles.get('99')}")  # fmt: skip
    print(f"  rollup at 00:55 with ingest beside: {split(before)} (load {before['load']:.1f}); "
          f"hour's end (01:00, {waited:.1f} s after wrk began): {split(end)} (load {end['load']:.1f}), "
          f"{end['hours']} hours rebuilt", flush=True)  # fmt: skip


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
    else:
        main()
