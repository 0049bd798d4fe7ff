"""Ingest throughput into PostgreSQL: the HTTP API beside psycopg ``COPY`` of the same rows, same run.

Usage::

    .venv/bin/python benchmarks/ingest.py postgresql+psycopg://postgres@127.0.0.1:5432/bench \\
        [--gpus 1000] [--hours 3] [--backlog-minutes 10 60 180] [--clients 8] [--repeat 3]

The database's schema is dropped and migrated afresh; PostgreSQL must run on this machine (its backends' CPU
time is read from /proc). Prints figures; asserts nothing about time.

Workload: a fleet of ``--gpus`` GPUs (8 per node) read every 10 s for ``--hours`` hours (1,000 GPUs × 3 h =
1,080,000 readings), the window ending 90 minutes after a UTC midnight so that rows land on two days. For each
``--backlog-minutes`` value, every node's readings are cut into POSTs of that many minutes (10 minutes = 60
cycles × 8 GPUs = 480 readings per POST: a collector catching up after a 10-minute outage; 180 minutes = 8,640
readings, within the 10,000 a collector puts in one POST), encoded by the collector's own
:meth:`collector.shipper.Shipper.body` (gzip JSON, as the collector sends it).

Measured, alternating, ``--repeat`` times each into the emptied ``gpu_samples`` table:

- **COPY**: ``COPY gpu_samples (…) FROM STDIN`` of the same rows as tuples with psycopg's ``write_row`` (text
  format), one connection, one transaction: what PostgreSQL takes when nothing but the rows crosses the wire.
- **HTTP**: ``gpu-finops serve --no-scheduler`` as its own process on 127.0.0.1, ``--clients`` threads of this
  process POSTing the batches with httpx (each a collector of the fleet delivering its backlog), from the first
  request to the last answer; every answer must be 200 with all readings accepted.

Besides rates (which on a shared machine move with other load), CPU time per reading: the client (COPY) or the
service process (HTTP), and the PostgreSQL backends serving them ("nan" when backends came and went during the
run, taking their CPU time with them); the HTTP clients' own CPU is shown apart.
Last, a steady-state figure: every node's first 20 cycles as single-cycle POSTs (8 readings each, one per node
every 10 s in production), as requests/s and the fleet size that rate serves.
"""

from __future__ import annotations

import argparse
import math
import os
import queue
import random
import resource
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
from sqlalchemy import make_url

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from collector.contract import metric_names as m  # noqa: E402
from collector.contract import wire  # noqa: E402
from collector.contract.sample import Sample  # noqa: E402
from collector.shipper import INGEST_PATH, Shipper  # noqa: E402
from finops.db.dialect import _copy_types  # noqa: E402
from finops.db.engine import downgrade, make_engine, upgrade  # noqa: E402
from finops.db.models import GpuSample  # noqa: E402
from finops.ingest.partitions import create_partitions  # noqa: E402
from finops.ingest.readings import UNPROFILED_READING_COLUMNS  # noqa: E402
from finops.timeutil import to_epoch  # noqa: E402
from tests.support.servers import free_port  # noqa: E402

GPUS_PER_NODE = 8
INTERVAL_SECONDS = 10
MODEL = "NVIDIA H100 80GB HBM3"
MEMORY_TOTAL = 80 * 2**30
STEADY_CYCLES = 20
SAMPLE_COLUMNS = ("gpu_id", "ts", *UNPROFILED_READING_COLUMNS)
"""The columns the fleet's rows fill (its readings carry no hardware activity)."""


def _fleet_samples(gpus: int, hours: float, seed: int = 7) -> dict[str, list[list[Sample]]]:
    """Per node, its cycles in time order; each cycle is the node's 8 GPU readings at one instant.

    Values follow an H100: busy GPUs at 650-700 W and 90-100 % utilisation, idle ones (one in ten) at 70 W and
    0 %; energy counters integrate the power; each GPU holds one job.
    """
    rng = random.Random(seed)
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    cycles = int(hours * 3600 / INTERVAL_SECONDS)
    start = midnight + timedelta(minutes=90) - timedelta(seconds=cycles * INTERVAL_SECONDS)
    fleet: dict[str, list[list[Sample]]] = {}
    for n in range(gpus // GPUS_PER_NODE):
        node = f"gpu-{n // 100:02d}-{n % 100:02d}"
        labels = [
            {"gpu": str(i), "uuid": f"GPU-{n:08x}-0000-4000-8000-{i:012x}", "model": MODEL}
            for i in range(GPUS_PER_NODE)
        ]
        busy = [rng.random() > 0.1 for _ in range(GPUS_PER_NODE)]
        jobs = [str(4_000_000 + n * GPUS_PER_NODE + i) for i in range(GPUS_PER_NODE)]
        energy = [rng.uniform(1e9, 5e9) for _ in range(GPUS_PER_NODE)]
        node_cycles = []
        for c in range(cycles):
            at = start + timedelta(seconds=c * INTERVAL_SECONDS)
            cycle = []
            for i in range(GPUS_PER_NODE):
                power = rng.uniform(650, 700) if busy[i] else rng.uniform(68, 72)
                energy[i] += power * INTERVAL_SECONDS
                values = {
                    m.GPU_UTILIZATION: rng.uniform(0.9, 1.0) if busy[i] else 0.0,
                    m.GPU_MEMORY_UTILIZATION: rng.uniform(0.3, 0.6) if busy[i] else 0.0,
                    m.GPU_MEMORY_USED: float(rng.randrange(60, 79) * 2**30 if busy[i] else 0),
                    m.GPU_MEMORY_TOTAL: float(MEMORY_TOTAL),
                    m.GPU_POWER: power,
                    m.GPU_ENERGY: energy[i],
                    m.GPU_TEMPERATURE: float(rng.randrange(55, 80) if busy[i] else 31),
                    m.GPU_SM_CLOCK: 1.98e9 if busy[i] else 3.45e8,
                    m.GPU_CLOCKS_EVENT_REASONS: 0.0 if busy[i] else 1.0,
                }
                cycle.append(Sample("gpu", labels[i], values, at, jobs[i]))
            node_cycles.append(cycle)
        fleet[node] = node_cycles
    return fleet


def _bodies(fleet: dict[str, list[list[Sample]]], cycles_per_post: int) -> list[tuple[int, bytes]]:
    """(readings, request body) for every POST, nodes interleaved the way a fleet's requests arrive."""
    per_node = []
    for node, cycles in fleet.items():
        shipper = Shipper("http://unused", "unused", node)
        posts = []
        for first in range(0, len(cycles), cycles_per_post):
            readings = [s for cycle in cycles[first : first + cycles_per_post] for s in cycle]
            posts.append((len(readings), shipper.body(wire.batch_dict(readings))))
        shipper.close()
        per_node.append(posts)
    return [post for group in zip(*per_node, strict=True) for post in group]


def _rows(fleet: dict[str, list[list[Sample]]], gpu_ids: dict[str, int]) -> list[tuple[object, ...]]:
    """The ``gpu_samples`` rows (:data:`SAMPLE_COLUMNS` order) the fleet's readings become."""
    rows = []
    for cycles in fleet.values():
        for cycle in cycles:
            for s in cycle:
                v = s.values
                rows.append((
                    gpu_ids[s.labels["uuid"]], int(s.timestamp.timestamp()), v[m.GPU_UTILIZATION],
                    v[m.GPU_MEMORY_UTILIZATION], int(v[m.GPU_MEMORY_USED]), v[m.GPU_POWER], v[m.GPU_ENERGY],
                    v[m.GPU_TEMPERATURE], v[m.GPU_SM_CLOCK], int(v[m.GPU_CLOCKS_EVENT_REASONS]), s.job_id,
                ))  # fmt: skip
    return rows


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (/proc/<pid>/stat fields 14 and 15); 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _service_cpu(pid: int) -> float:
    """CPU seconds of the ``serve`` process ``pid`` and of its live children (the processes of ``--workers``)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except FileNotFoundError:
        children = []
    return _cpu_seconds(pid) + sum(_cpu_seconds(int(child)) for child in children)


class Backends:
    """CPU time of the PostgreSQL backends connected to the benchmark's database, summed. A backend that ends
    during a run takes its CPU time with it, so a run that opened more sessions than it left open is unmeasured
    (``pg_stat_database.sessions``, PostgreSQL 14+)."""

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo

    def snapshot(self) -> tuple[int, dict[int, float]]:
        """(sessions opened so far, CPU seconds of each live backend but this one)."""
        with psycopg.connect(self.conninfo, autocommit=True) as connection:
            pids = connection.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchall()
            row = connection.execute(
                "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"
            ).fetchone()
        return int(row[0] if row else 0), {pid: _cpu_seconds(pid) for (pid,) in pids}

    @staticmethod
    def used(before: tuple[int, dict[int, float]], after: tuple[int, dict[int, float]]) -> float:
        """CPU seconds the backends used between two snapshots; NaN if some backend came and went."""
        # The snapshot's own connection is one opened session; every other one must still be there.
        unseen = (after[0] - before[0] - 1) - len(set(after[1]) - set(before[1]))
        if unseen > 0:
            return float("nan")
        return sum(seconds - before[1].get(pid, 0.0) for pid, seconds in after[1].items())


@dataclass
class Run:
    """One measurement: readings/s, CPU µs per reading of the sender (client or service) and of PostgreSQL."""

    rate: float
    sender_us: float
    postgres_us: float
    client_us: float = 0.0
    latencies: list[float] = field(default_factory=list)
    """Seconds of each POST, request sent to answer read (HTTP runs)."""

    def latency_ms(self, quantile: float) -> float:
        """The ``quantile`` (0–1) of :attr:`latencies`, in ms."""
        ordered = sorted(self.latencies)
        return 1e3 * ordered[min(len(ordered) - 1, int(quantile * len(ordered)))]


def _empty(conninfo: str) -> None:
    with psycopg.connect(conninfo, autocommit=True) as connection:
        connection.execute("TRUNCATE gpu_samples, ledger_dirty_hours")
        connection.execute("CHECKPOINT")


def copy_run(conninfo: str, rows: list[tuple[object, ...]], connections: int = 1, binary: bool = False) -> Run:
    """``COPY gpu_samples (…) FROM STDIN`` of ``rows`` into the emptied table, text format (``binary``: binary, the
    types set with ``set_types``), cut into ``connections`` slices each copied and committed on a connection of its
    own, in a thread of its own."""
    _empty(conninfo)
    names = ", ".join(SAMPLE_COLUMNS)
    statement = f"COPY gpu_samples ({names}) FROM STDIN" + (" (FORMAT BINARY)" if binary else "")
    kinds = _copy_types(GpuSample.__table__, SAMPLE_COLUMNS)  # type: ignore[arg-type]
    opened = [psycopg.connect(conninfo) for _ in range(connections)]
    backends = [connection.info.backend_pid for connection in opened]

    def load(connection: psycopg.Connection[object], part: list[tuple[object, ...]]) -> None:
        with connection.cursor() as cursor, cursor.copy(statement) as copy:
            if binary:
                copy.set_types(kinds)
            for row in part:
                copy.write_row(row)
        connection.commit()

    threads = [
        threading.Thread(target=load, args=(connection, rows[k::connections])) for k, connection in enumerate(opened)
    ]
    postgres, client = sum(map(_cpu_seconds, backends)), time.process_time()
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    per = 1e6 / len(rows)
    run = Run(
        len(rows) / elapsed,
        (time.process_time() - client) * per,
        (sum(map(_cpu_seconds, backends)) - postgres) * per,
    )
    for connection in opened:
        connection.close()
    return run


def http_run(base_url: str | list[str], token: str, bodies: list[tuple[int, bytes]], clients: int,
             server: int | list[int], backends: Backends, empty: bool = True,
             tokens: list[str] | None = None) -> tuple[Run, float]:  # fmt: skip
    """POST every body with ``clients`` concurrent threads (into the emptied table, unless not ``empty``); returns
    the run and POST/s. Several ``base_url`` (replicas, ``server`` their process ids): client k posts to the k-th
    modulo their number; the service CPU is theirs, summed, workers included. ``tokens``: the bearer token of each
    body, in their order (default: ``token`` for all)."""
    bases = [base_url] if isinstance(base_url, str) else base_url
    servers = [server] if isinstance(server, int) else server
    if empty:
        _empty(backends.conninfo)
    work: queue.SimpleQueue[tuple[int, bytes, str]] = queue.SimpleQueue()
    for (count, body), bearer in zip(bodies, tokens or [token] * len(bodies), strict=True):
        work.put((count, body, bearer))
    failures: list[str] = []
    latencies: list[float] = []
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}

    def client(base: str) -> None:
        with httpx.Client(base_url=base, headers=headers, timeout=120) as http:
            while True:
                try:
                    count, body, bearer = work.get_nowait()
                except queue.Empty:
                    return
                sent = time.perf_counter()
                response = http.post(INGEST_PATH, content=body, headers={"Authorization": f"Bearer {bearer}"})
                latencies.append(time.perf_counter() - sent)
                if response.status_code != 200 or response.json()["accepted"] != count:
                    failures.append(f"HTTP {response.status_code}: {response.text[:200]}")

    threads = [threading.Thread(target=client, args=(bases[k % len(bases)],)) for k in range(clients)]

    def service_cpu() -> float:
        return sum(map(_service_cpu, servers))

    postgres, service, own = backends.snapshot(), service_cpu(), time.process_time()
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if failures:
        raise RuntimeError(f"{len(failures)} POSTs failed, e.g. {failures[0]}")
    readings = sum(count for count, _ in bodies)
    per = 1e6 / readings
    run = Run(
        readings / elapsed,
        (service_cpu() - service) * per,
        Backends.used(postgres, backends.snapshot()) * per,
        (time.process_time() - own) * per,
        latencies,
    )
    return run, len(bodies) / elapsed


WRK_SCRIPT = Path(__file__).with_name("wrk_post.lua")
"""wrk(1)'s script that POSTs each body once (:func:`wrk_run`)."""


def wrk_run(base_url: str, token: str, bodies: list[tuple[int, bytes]], connections: int, server: int,
            backends: Backends) -> tuple[Run, float]:  # fmt: skip
    """POST every body once, in order, over ``connections`` keep-alive connections of wrk(1) (Debian package
    ``wrk``: one C thread, some µs of CPU per request, where this process's httpx threads take about 0.7 ms) into
    the emptied table; returns the run (``client_us``: wrk's CPU) and POST/s. Raises unless every POST was
    answered 200 and ``gpu_samples`` then holds every reading."""
    _empty(backends.conninfo)
    with tempfile.TemporaryDirectory() as folder:
        for i, (_, body) in enumerate(bodies, start=1):
            Path(folder, f"{i}.gz").write_bytes(body)
        env = {**os.environ, "WRK_DIR": folder, "WRK_BODIES": str(len(bodies)), "WRK_TOKEN": token}
        command = ["wrk", "-t1", f"-c{connections}", "-d600s", "-s", str(WRK_SCRIPT), base_url]
        postgres, service = backends.snapshot(), _service_cpu(server)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.perf_counter()
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert process.stderr is not None
        errors = []
        for line in process.stderr:  # the script's last line comes with the last answer
            errors.append(line)
            if line.startswith("answered "):
                break
        elapsed = time.perf_counter() - began
        process.send_signal(signal.SIGINT)  # a stopped thread does not end wrk before its -d: SIGINT does
        out, rest = process.communicate(timeout=60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    postgres_used, service_used = Backends.used(postgres, backends.snapshot()), _service_cpu(server) - service
    if f"answered {len(bodies)} failed 0" not in "".join(errors):
        raise RuntimeError(f"wrk: not every POST answered 200: {''.join(errors)[-500:]} {rest[-300:]} {out[-300:]}")
    readings = sum(count for count, _ in bodies)
    with psycopg.connect(backends.conninfo) as connection:
        stored = connection.execute("SELECT count(*) FROM gpu_samples").fetchone()
    if stored is None or stored[0] != readings:
        raise RuntimeError(f"{readings} readings posted, {stored} stored")
    per = 1e6 / readings
    wrk_cpu = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
    run = Run(readings / elapsed, service_used * per, postgres_used * per, wrk_cpu * per)
    return run, len(bodies) / elapsed


@contextmanager
def serving(url: str, token: str, *options: str, code: Path = REPO) -> Iterator[tuple[str, int]]:
    """``gpu-finops serve --no-scheduler`` with ``options`` (e.g. ``--workers 2``) on a free port of 127.0.0.1
    until the block ends, run from the checkout ``code`` (default: this one); yields its URL and process id."""
    port = free_port()
    command = [sys.executable, "-m", "finops.cli", "serve", "--port", str(port), "--no-scheduler", *options]
    env = {**os.environ, "FINOPS_DATABASE_URL": url, "FINOPS_INGEST_TOKEN": token, "PYTHONPATH": str(code)}
    process = subprocess.Popen(command, env=env, cwd=code)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("gpu-finops serve did not start")
            time.sleep(0.2)
        yield base, process.pid
    finally:
        process.terminate()
        process.wait(timeout=60)


def _median(runs: list[Run]) -> Run:
    def median(name: str) -> float:
        values = [getattr(run, name) for run in runs]
        return float("nan") if any(math.isnan(v) for v in values) else statistics.median(values)

    return Run(*(median(name) for name in ("rate", "sender_us", "postgres_us", "client_us")))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("database_url", help="PostgreSQL SQLAlchemy URL; its schema is dropped and recreated")
    parser.add_argument("--gpus", type=int, default=1000, help="fleet size (8 GPUs per node)")
    parser.add_argument("--hours", type=float, default=3.0, help="hours of 10-second readings")
    parser.add_argument("--backlog-minutes", type=int, nargs="+", default=[10, 60, 180], help="minutes per POST")
    parser.add_argument("--clients", type=int, default=8, help="concurrent HTTP clients")
    parser.add_argument("--repeat", type=int, default=3, help="measurements of each path")
    args = parser.parse_args()
    if make_url(args.database_url).get_backend_name() != "postgresql":
        parser.error("this benchmark compares with PostgreSQL's COPY: give a PostgreSQL URL")

    engine = make_engine(args.database_url)
    downgrade(engine, "base")
    upgrade(engine)
    engine.dispose()
    conninfo = make_url(args.database_url).set(drivername="postgresql").render_as_string(hide_password=False)
    backends = Backends(conninfo)

    began = time.perf_counter()
    fleet = _fleet_samples(args.gpus, args.hours)
    scenarios = {minutes: _bodies(fleet, minutes * 60 // INTERVAL_SECONDS) for minutes in args.backlog_minutes}
    steady = _bodies({node: cycles[:STEADY_CYCLES] for node, cycles in fleet.items()}, 1)
    readings = sum(len(cycle) for cycles in fleet.values() for cycle in cycles)
    days = len({cycle[0].timestamp.date() for cycles in fleet.values() for cycle in cycles})
    print(f"workload: {args.gpus} GPUs × {args.hours:g} h at {INTERVAL_SECONDS} s = {readings:,} readings on {days} "
          f"days; "
          f"{args.clients} HTTP clients; built in {time.perf_counter() - began:.0f} s")  # fmt: skip
    for minutes, bodies in scenarios.items():
        mib = sum(len(body) for _, body in bodies) / 2**20
        print(f"  {minutes}-minute backlogs: {len(bodies):,} POSTs of {readings // len(bodies):,} readings, "
              f"{mib:.1f} MiB gzip JSON")  # fmt: skip

    token = secrets.token_urlsafe()
    copies: list[Run] = []
    posts: dict[int, list[Run]] = {minutes: [] for minutes in scenarios}
    with serving(args.database_url, token) as (base, server):
        http_run(base, token, scenarios[args.backlog_minutes[0]][:200], args.clients, server, backends)  # warm-up
        with make_engine(args.database_url).begin() as connection:  # every day's partition, for COPY too
            create_partitions(connection, {to_epoch(cycle[0].timestamp) for cycle in next(iter(fleet.values()))})
        with psycopg.connect(conninfo) as connection:
            rows = _rows(fleet, dict(connection.execute("SELECT uuid, id FROM gpus").fetchall()))
        for attempt in range(1, args.repeat + 1):
            copies.append(copy_run(conninfo, rows))
            line = f"  run {attempt}: COPY {copies[-1].rate:>9,.0f} rows/s"
            for minutes, bodies in scenarios.items():
                run, _ = http_run(base, token, bodies, args.clients, server, backends)
                posts[minutes].append(run)
                line += f" | HTTP {minutes} min {run.rate:>9,.0f}/s ({run.rate / copies[-1].rate:.2f} × COPY)"
            print(line, flush=True)
        steady_run, steady_requests = http_run(base, token, steady, args.clients, server, backends)

    copy = _median(copies)
    print(f"\nmedians of {args.repeat} runs; CPU per reading in µs")
    print(f"COPY FROM STDIN (psycopg, text, 1 connection): {copy.rate:>9,.0f} rows/s      "
          f"CPU: client {copy.sender_us:.1f} + PostgreSQL {copy.postgres_us:.1f}")  # fmt: skip
    for minutes, runs in posts.items():
        http = _median(runs)
        per_post = readings // len(scenarios[minutes])
        print(f"HTTP ingest, {per_post:>5,} readings/POST:     {http.rate:>9,.0f} readings/s  "
              f"{http.rate / copy.rate:.2f} × COPY   CPU: service {http.sender_us:.1f} + PostgreSQL "
              f"{http.postgres_us:.1f} (HTTP clients {http.client_us:.1f})")  # fmt: skip
    print(f"HTTP ingest, 8 readings/POST (steady state): {steady_requests:,.0f} POST/s = {steady_run.rate:,.0f} "
          f"readings/s, what a fleet of {steady_requests * GPUS_PER_NODE * INTERVAL_SECONDS:,.0f} GPUs at "
          f"{INTERVAL_SECONDS} s sends")  # fmt: skip


if __name__ == "__main__":
    main()
