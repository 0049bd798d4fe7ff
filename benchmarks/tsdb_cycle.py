"""The scheduler's five-minute cycle in the TSDB mode (``FINOPS_TELEMETRY_SOURCE=tsdb``) at fleet scale, measured for
this checkout beside another one (the code before) in the same run, against one VictoriaMetrics.

Usage::

    .venv/bin/python benchmarks/tsdb_cycle.py postgresql+psycopg://postgres@127.0.0.1:5432/bench \\
        [--gpus 10000] [--hours 3] [--baseline /tmp/base] [--rounds 1] [--victoria-metrics /usr/bin/victoria-metrics]

The database's schema is dropped and migrated afresh for each measurement. ``--baseline``: a checkout of the code
to compare with (``git worktree add /tmp/base <commit>``). Prints figures; asserts nothing about time.

1. **Fleet**: VictoriaMetrics started and ``--gpus`` GPUs' readings of ``--hours`` hours ending at the last whole UTC
   hour imported, every 10 s, with their jobs, as :mod:`benchmarks.tsdb_day` generates them (utilisation, memory and
   the energy counter; one job in ten stalls at 0 % for 20 to 90 minutes, idle gaps between jobs); its bytes on disk
   per GPU-day after a forced merge.
2. **Measurements**: per round, the baseline's code and then this checkout's, each in a child process (this script
   with ``--child``, ``PYTHONPATH`` the checkout, whose ``finops`` it imports; the harness is this checkout's):

   - *discovery of the fleet*: :meth:`~finops.ingest.tsdb_source.TsdbTelemetry.register_gpus` over the readings'
     hours, what a site's first rollup does;
   - *the cycle at the hour's end*: the jobs stored, the ledger built up to the last hour H without metering and the
     idle episodes of the hour before H judged (what the cycles before leave), then
     :func:`~finops.service.scheduler.run_rollup` with the clock one minute past H: discovery since H, metering of
     H and of the new hour (``rollup``), the nodes' rates, idle episodes re-judged over H widened with their waste
     reasons, budget and anomaly events. Its parts are timed by wrapping them.

   Each: wall seconds, PromQL queries, CPU seconds of VictoriaMetrics (``/proc/PID/stat``), of the child and of its
   PostgreSQL backends; the child's peak memory. Then the cycle's CPU per 1,000 GPUs and what it projects to 25,000
   and 100,000 GPUs, labelled as a projection.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CHILD = "--child" in sys.argv
if CHILD:  # the checkout measured: its packages from PYTHONPATH (not this script's folder); the harness from this one
    sys.path.remove(str(Path(__file__).resolve().parent))
    for package in ("collector", "finops", "alerts"):
        importlib.import_module(package)
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
import psycopg  # noqa: E402
from sqlalchemy import make_url  # noqa: E402

from benchmarks.ingest import GPUS_PER_NODE, INTERVAL_SECONDS, _cpu_seconds  # noqa: E402
from benchmarks.tsdb_day import NodeJob, import_day, storage, store_jobs, victoria_metrics  # noqa: E402
from finops.timeutil import HOUR, floor_hour, from_epoch  # noqa: E402

PARTS = {
    "cycle (run_rollup)": ("finops.service.scheduler", "run_rollup"),
    "  discovery since H": ("finops.ingest.tsdb_source", "TsdbTelemetry.discover"),
    "  rollup: metering and ledger": ("finops.service.scheduler", "rollup"),
    "    of which metering": ("finops.ingest.tsdb_metering", "TsdbMeter.meter_hours"),
    "  node rates": ("finops.ingest.tsdb_source", "TsdbTelemetry.store_node_rates"),
    "  idle re-judging": ("finops.service.scheduler", "rejudge_idle"),
    "    of which TSDB readings": ("finops.ingest.tsdb_source", "TsdbTelemetry.idle_readings"),
    "    of which waste reasons": ("finops.analysis.idle", "judge_episodes"),
}
"""What the cycle's measurement times: label → (module, attribute) wrapped in the child."""
CYCLE_DELAY_SECONDS = 60
"""The cycle runs this long after H ends."""


@dataclass
class Cost:
    """What some work took: wall seconds, PromQL queries, CPU seconds of VictoriaMetrics, of the child, of its
    PostgreSQL backends."""

    seconds: float = 0.0
    queries: int = 0
    vm_cpu: float = 0.0
    own_cpu: float = 0.0
    pg_cpu: float = 0.0

    @property
    def cpu(self) -> float:
        """CPU seconds of all three processes."""
        return self.vm_cpu + self.own_cpu + self.pg_cpu


class Meter:
    """Counts the queries sent through :attr:`client` (a :class:`finops.ingest.prometheus.PrometheusClient` of the
    checkout measured) and reads the CPU of VictoriaMetrics (``vm_pid``) and of the PostgreSQL backends of the
    database ``conninfo``."""

    def __init__(self, url: str, vm_pid: int, conninfo: str) -> None:
        from finops.ingest.prometheus import PrometheusClient

        self.queries, self.vm_pid = 0, vm_pid
        self.client = PrometheusClient(url, httpx.Client(timeout=3600, event_hooks={"request": [self._count]}))
        self.watcher = psycopg.connect(conninfo, autocommit=True)

    def _count(self, _: object) -> None:
        self.queries += 1

    def _pg_cpu(self) -> float:
        rows = self.watcher.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
        return sum(_cpu_seconds(pid) for (pid,) in rows)

    @contextmanager
    def cost(self, into: Cost) -> Iterator[None]:
        """Add what the block took to ``into``."""
        before = (time.perf_counter(), self.queries, _cpu_seconds(self.vm_pid), time.process_time(), self._pg_cpu())
        try:
            yield
        finally:
            into.seconds += time.perf_counter() - before[0]
            into.queries += self.queries - before[1]
            into.vm_cpu += _cpu_seconds(self.vm_pid) - before[2]
            into.own_cpu += time.process_time() - before[3]
            into.pg_cpu += self._pg_cpu() - before[4]


def wrap_parts(meter: Meter, costs: dict[str, Cost]) -> None:
    """Wrap each of :data:`PARTS` present in the checkout so that its calls add to ``costs[label]``."""

    def timed(function: Callable[..., Any], cost: Cost) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            with meter.cost(cost):
                return function(*args, **kwargs)

        return call

    for label, (module_name, attribute) in PARTS.items():
        owner: Any = importlib.import_module(module_name)
        *path, name = attribute.split(".")
        for step in path:
            owner = getattr(owner, step)
        if hasattr(owner, name):
            costs[label] = Cost()
            setattr(owner, name, timed(getattr(owner, name), costs[label]))


def child(args: argparse.Namespace) -> None:
    """Measure this process' checkout (see the module documentation, 2); prints one JSON object."""
    import finops
    import finops.service.scheduler as scheduler
    from finops.analysis.idle import rejudge_idle
    from finops.cli.context import idle_policy, load_pricing, load_settings, open_sessions
    from finops.db.engine import downgrade, make_engine, upgrade
    from finops.ingest.prometheus_pull import PullOptions
    from finops.ingest.tsdb_source import TsdbTelemetry
    from finops.ledger.rollup import rollup

    engine = make_engine(args.database_url)
    downgrade(engine, "base")
    upgrade(engine)
    engine.dispose()
    os.environ["FINOPS_DATABASE_URL"] = args.database_url
    settings = load_settings()
    sessions, pricing, policy = open_sessions(settings), load_pricing(settings), idle_policy(settings)
    conninfo = make_url(args.database_url).set(drivername="postgresql").render_as_string(hide_password=False)
    meter = Meter(args.vm_url, args.vm_pid, conninfo)
    tsdb = TsdbTelemetry(meter.client, PullOptions(step_seconds=INTERVAL_SECONDS))
    start, end = args.start, args.end
    hour = end - HOUR
    discovery = Cost()
    with sessions.begin() as session, meter.cost(discovery):
        registered = tsdb.register_gpus(session, start, end)
    jobs = {node: [NodeJob(*job) for job in node_jobs] for node, node_jobs in json.loads(args.jobs.read_text()).items()}
    with sessions.begin() as session:
        store_jobs(session, jobs, end)
        rollup(session, pricing, hour + 1, meter=lambda *_: None)
        rejudge_idle(session, [hour - HOUR], policy, pricing, tsdb)
    costs: dict[str, Cost] = {}
    wrap_parts(meter, costs)
    scheduler.utc_now = lambda: from_epoch(end + CYCLE_DELAY_SECONDS)  # type: ignore[attr-defined]
    _, episodes = scheduler.run_rollup(sessions, pricing, policy, tsdb=tsdb)
    report = {
        "code": str(Path(finops.__file__).parents[1]),
        "registered": registered,
        "episodes": episodes,
        "digest": digest(conninfo),
        "discovery": asdict(discovery),
        "parts": {label: asdict(cost) for label, cost in costs.items()},
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "load": Path("/proc/loadavg").read_text().split()[:3],
    }
    print(json.dumps(report))


DIGESTS = {
    "GPUs": "SELECT uuid, in_service_from FROM gpus ORDER BY uuid",
    "ledger": "SELECT l.hour, g.uuid, j.job_id, l.seconds, l.sample_count, l.used_gpu_seconds, l.energy_joules, "
    "l.allocated_cost, l.used_cost, l.idle_cost FROM ledger l JOIN gpus g ON g.id = l.gpu_id "
    "LEFT JOIN jobs j ON j.id = l.job_pk ORDER BY 1, 2, 3 NULLS FIRST, 4",
    "episodes": 'SELECT g.uuid, j.job_id, e.start, e."end", e.memory_held, e.cost, e.reason, e.evidence '
    "FROM idle_episodes e JOIN gpus g ON g.id = e.gpu_id JOIN jobs j ON j.id = e.job_pk ORDER BY 1, 3, 2",
}
"""What the two checkouts' results are compared by: the rows of these queries."""


def digest(conninfo: str) -> dict[str, str]:
    """Per :data:`DIGESTS` query, a SHA-256 of its rows (as text) and their number."""
    found = {}
    with psycopg.connect(conninfo) as connection:
        for name, query in DIGESTS.items():
            rows = connection.execute(query).fetchall()
            found[name] = f"{len(rows):,} rows {hashlib.sha256(repr(rows).encode()).hexdigest()[:12]}"
    return found


def run_child(code: Path, args: argparse.Namespace, url: str, pid: int, jobs: Path, start: int, end: int) -> dict:
    """Run :func:`child` with ``code`` first on ``PYTHONPATH``; its report."""
    command = [sys.executable, __file__, args.database_url, "--child", "--vm-url", url, "--vm-pid", str(pid),
               "--jobs", str(jobs), "--start", str(start), "--end", str(end)]  # fmt: skip
    done = subprocess.run(command, env={**os.environ, "PYTHONPATH": str(code)}, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{code}: child failed ({done.returncode}): {done.stderr[-3000:]}")
    report: dict = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def cost_line(cost: dict) -> str:
    """A cost in one line."""
    c = Cost(**cost)
    return (f"{c.seconds:8.2f} s {c.queries:6,} q  CPU {c.cpu:7.2f} s (VM {c.vm_cpu:6.2f}, own {c.own_cpu:6.2f}, "
            f"PG {c.pg_cpu:6.2f})")  # fmt: skip


def compare(gpus: int, reports: list[tuple[str, dict]]) -> None:
    """Print the reports of one round side by side, with the ratios (baseline ÷ this) of wall and CPU."""
    (base_label, base), (label, this) = reports
    print(f"  {'':32} {base_label:>60} | {label}")
    rows = [("discovery of the fleet", base["discovery"], this["discovery"])]
    rows += [(part, base["parts"].get(part), this["parts"].get(part)) for part in PARTS]
    for name, before, after in rows:
        if before is None or after is None:
            continue
        ratio = ""
        if after["seconds"] and Cost(**after).cpu:
            cpu = Cost(**before).cpu / Cost(**after).cpu
            ratio = f"{before['seconds'] / after['seconds']:.1f} × wall, {cpu:.1f} × CPU"
        print(f"  {name:32} {cost_line(before)} | {cost_line(after)}  {ratio}")
    for key in ("registered", "episodes", "peak_rss_mib", "load"):
        print(f"  {key:32} {base[key]!s:>60} | {this[key]}")
    for name, value in this["digest"].items():
        print(f"  {name + ' (digest)':32} {base['digest'][name]:>60} | {value}  "
              f"{'same' if value == base['digest'][name] else 'DIFFERENT'}")  # fmt: skip
    cycle = Cost(**this["parts"]["cycle (run_rollup)"])
    per = cycle.cpu / gpus * 1000
    print(f"  this code's cycle: {per:.3f} CPU s per 1,000 GPUs (VM {cycle.vm_cpu / gpus * 1000:.3f}); projected "
          f"from it, one process and VictoriaMetrics on 2 cores: 25,000 GPUs ~{per * 25:.0f} CPU s, 100,000 GPUs "
          f"~{per * 100:.0f} CPU s per 5-minute cycle (300 s)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("database_url", help="PostgreSQL SQLAlchemy URL; its schema is dropped and recreated")
    parser.add_argument("--gpus", type=int, default=10_000, help="fleet size (8 GPUs per node)")
    parser.add_argument("--hours", type=int, default=3, help="hours of 10-second readings (3 at least)")
    parser.add_argument("--job-hours", type=float, default=4.0, help="mean length of a job")
    parser.add_argument("--baseline", type=Path, help="a checkout of the code to compare with")
    parser.add_argument("--rounds", type=int, default=1, help="measurements of each checkout, alternated")
    parser.add_argument("--victoria-metrics", default="/usr/bin/victoria-metrics", help="VictoriaMetrics' binary")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--vm-url", help=argparse.SUPPRESS)
    parser.add_argument("--vm-pid", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--jobs", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--start", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--end", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.hours < 3:
        parser.error("--hours: 3 at least (H, the hour before it for the energy counter and the idle margin)")
    print(f"load average at the start: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    end = floor_hour(int(time.time()))
    start = end - args.hours * HOUR
    codes = [("baseline " + str(args.baseline), args.baseline)] if args.baseline else []
    codes.append(("this checkout", REPO))
    with tempfile.TemporaryDirectory(prefix="tsdb-cycle-") as workdir, \
            victoria_metrics(args.victoria_metrics, Path(workdir)) as (url, pid):  # fmt: skip
        jobs = import_day(url, pid, args.gpus, start, end, args.job_hours)
        storage(url, pid, Path(workdir) / "data", len(jobs) * GPUS_PER_NODE * args.hours / 24)
        jobs_file = Path(workdir) / "jobs.json"
        jobs_file.write_text(json.dumps({node: [list(asdict(job).values()) for job in node_jobs]
                                         for node, node_jobs in jobs.items()}))  # fmt: skip
        gpus = len(jobs) * GPUS_PER_NODE
        for number in range(args.rounds):
            reports = [(label, run_child(code, args, url, pid, jobs_file, start, end)) for label, code in codes]
            print(f"round {number + 1}: {gpus:,} GPUs, H = {from_epoch(end - HOUR):%Y-%m-%d %H:%M}; wall, queries, "
                  f"CPU seconds")  # fmt: skip
            if len(reports) == 2:
                compare(gpus, reports)
            else:
                for label, report in reports:
                    print(f"  {label}: {json.dumps(report)}")


if __name__ == "__main__":
    main()
