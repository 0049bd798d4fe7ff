"""Metering from VictoriaMetrics at fleet scale (``FINOPS_TELEMETRY_SOURCE=tsdb``): a day of a fleet's dcgm-exporter
readings imported, VictoriaMetrics' bytes per GPU-day, and the time to meter one ledger hour by PromQL.

Usage::

    .venv/bin/python benchmarks/tsdb_day.py postgresql+psycopg://postgres@127.0.0.1:5432/bench \\
        [--gpus 10000] [--hours 24] [--job-hours 4] [--repeat 3] [--victoria-metrics /usr/bin/victoria-metrics]

The database's schema is dropped and migrated afresh. VictoriaMetrics (``--victoria-metrics``: Debian's
``victoria-metrics``) is started on a free port of 127.0.0.1 with its data in a temporary directory, response
caching off (``-search.disableCache``, so that a repeated query is computed again), and stopped at the end; its CPU
time is read from /proc. Prints figures; asserts nothing about time.

1. **Import**: ``--gpus`` GPUs (8 per node) read every 10 s for ``--hours`` hours ending at the last whole UTC hour
   (10,000 GPUs for 24 hours is the full size: 86.4 M readings, 259.2 M samples). Each GPU has the three series the
   metering reads, in dcgm-exporter's names, units and labels (``Hostname``, ``gpu``, ``UUID``, ``modelName``):
   ``DCGM_FI_DEV_GPU_UTIL`` (whole %), ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (a counter in mJ) and
   ``DCGM_FI_DEV_FB_USED`` (MiB). Each node runs jobs on all its 8 GPUs one after another, from any second: lengths
   exponential around ``--job-hours`` (10 minutes at least), idle gaps between them exponential around 15 minutes;
   a job runs at its own utilisation (35–100 %, with noise of 6 points a reading) and memory (8–76 GiB a GPU, noise
   of 250 MiB), and one in ten stalls for its first 20–90 minutes (0 % with its memory held: idle episodes).
   Power follows utilisation (62 W idle, 90 W + 5.5 W per % busy, with noise) and the energy counter adds it up.
   Nodes are read at whole seconds, at offsets 0–9 s of the 10 s cycle. The readings are generated with numpy a
   request's worth at a time (:data:`NODES_PER_REQUEST` nodes) and sent to ``/api/v1/import`` (VictoriaMetrics'
   JSON line format: one line per series with its values and timestamps), the next request generated while
   VictoriaMetrics takes the previous one; then ``/internal/force_flush``. Measured: wall time, samples/s and
   VictoriaMetrics' CPU per sample.
2. **Storage**: bytes on disk of the storage directory (allocated blocks, as ``du``) after the flush, and again after
   ``/internal/force_merge`` has merged every partition into the least parts (what background merges reach
   over time), over the GPU-days stored.
3. **Metering**: the GPUs registered by the TSDB discovery
   (:meth:`finops.ingest.tsdb_source.TsdbTelemetry.register_gpus`), the nodes' jobs stored as Slurm jobs of 8 GPUs
   with an allocation each (a job still running at the day's end has no end), and the ledger built up to the day's
   last hour without metering (capacity and holdings only), so that only that hour, H, is metered. Then, one
   untimed :func:`finops.service.scheduler.run_rollup` (it brings the ledger's newest hour up to now), and
   ``--repeat`` times, medians printed: :meth:`finops.ingest.tsdb_metering.TsdbMeter.meter_hours` of H for the
   whole fleet; of its first 5 and 30 minutes (what the scheduler's rollup meters 5 and 30 minutes into an hour,
   rolled back); the idle episodes of H re-judged from the TSDB (:func:`finops.analysis.idle.rejudge_idle`);
   and :func:`~finops.service.scheduler.run_rollup` with ``tsdb=`` after H is marked dirty (discovery, metering of
   H and of the current hour, which has no readings, the ledger, idle episodes and budget events). Each: wall
   seconds, PromQL queries, VictoriaMetrics' CPU seconds and this process' (the client's parsing and the ORM).
   Last, PostgreSQL's bytes in this mode: the ledger tables and ``tsdb_gpu_metering`` per GPU-day.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import psycopg
from sqlalchemy import func, insert, make_url, select
from sqlalchemy.orm import Session

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.ingest import GPUS_PER_NODE, INTERVAL_SECONDS, MODEL, _cpu_seconds  # noqa: E402
from collector.contract.dcgm_fields import SM_CYCLES_ELAPSED  # noqa: E402
from finops.analysis.idle import rejudge_idle  # noqa: E402
from finops.cli.context import idle_policy, load_pricing, load_settings, open_sessions  # noqa: E402
from finops.db.engine import downgrade, make_engine, upgrade  # noqa: E402
from finops.db.hours import mark_hours_dirty  # noqa: E402
from finops.db.ledger_tables import LedgerEntry, TsdbGpuMetering  # noqa: E402
from finops.db.models import Allocation, Gpu, Job, Node, Team  # noqa: E402
from finops.ingest.prometheus import PrometheusClient  # noqa: E402
from finops.ingest.prometheus_pull import CYCLE_FIELDS, PullOptions  # noqa: E402
from finops.ingest.tsdb_metering import ACTIVITY_FIELDS, ENERGY_FIELD, MEMORY_FIELD  # noqa: E402
from finops.ingest.tsdb_source import TsdbTelemetry  # noqa: E402
from finops.ledger.rollup import rollup  # noqa: E402
from finops.service.scheduler import run_rollup  # noqa: E402
from finops.timeutil import HOUR, floor_hour, from_epoch  # noqa: E402

PARTS = ("meter", "idle", "rollup")
"""What part 3 of the module measures, in the order it runs."""
UTILIZATION_FIELD = PullOptions().utilization_fields[0]
NODES_PER_REQUEST = 8
"""Nodes per import request: 192 series, about 37 MB of JSON lines a day."""
GAP_SECONDS = 900
"""Mean idle gap between two jobs of a node."""
TEAMS = 20
STORAGE_SQL = """
SELECT c.relname LIKE 'tsdb%%', coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = current_schema()
WHERE c.relkind = 'r' AND (c.relname LIKE 'ledger%%' OR c.relname = 'tsdb_gpu_metering') GROUP BY 1
"""
"""Bytes of the ledger tables and of ``tsdb_gpu_metering`` (indexes and TOAST included), by whether it is the
latter."""


@dataclass(frozen=True, slots=True)
class NodeJob:
    """A job on all 8 GPUs of a node, epoch seconds [start, end); until ``stall_end`` it holds its memory at 0 %;
    ``level``: its mean utilisation (%); ``memory_mib``: the frame buffer it holds on each GPU."""

    start: int
    end: int
    stall_end: int
    level: float
    memory_mib: float


def node_jobs(rng: np.random.Generator, first: int, last: int, job_hours: float) -> list[NodeJob]:
    """A node's jobs back to back over [first, last) (epoch seconds), the first begun up to ``job_hours`` before
    ``first`` (see the module documentation for the distributions)."""
    jobs = []
    t = first - int(rng.uniform(0, job_hours * HOUR))
    while t < last:
        length = 600 + int(rng.exponential(job_hours * HOUR))
        stall = int(rng.uniform(1200, 5400)) if rng.random() < 0.1 else 0
        if t + length > first:
            jobs.append(NodeJob(t, t + length, t + min(stall, length), rng.uniform(35, 100), rng.uniform(8e3, 76e3)))
        t += length + int(rng.exponential(GAP_SECONDS))
    return jobs


def node_series(
    rng: np.random.Generator, jobs: list[NodeJob], times: np.ndarray, activity: Sequence[str] = ()
) -> dict[str, np.ndarray]:
    """Each field's values (dcgm-exporter's units, whole numbers; the ``activity`` fields' ratios to 6 decimals, a
    share of the utilisation of each field's own; DCGM 4.6's cycle counters among them as counters: the elapsed SM
    cycles of 132 SMs at 1,980 MHz, each active counter that share of them) of a node's 8 GPUs at ``times`` (epoch
    seconds): (8, len(times)) arrays by field name."""
    shape = (GPUS_PER_NODE, len(times))
    utilization, memory = np.zeros(shape), np.zeros(shape)
    for job in jobs:
        lo, stall, hi = np.searchsorted(times, [job.start, job.stall_end, job.end])
        memory[:, lo:hi] = job.memory_mib + rng.normal(0, 250, (GPUS_PER_NODE, hi - lo))
        utilization[:, stall:hi] = job.level + rng.normal(0, 6, (GPUS_PER_NODE, hi - stall))
    utilization = np.clip(np.rint(utilization), 0, 100)
    memory = np.clip(np.rint(memory), 0, 81_559)
    power = np.where(memory > 0, 90 + 5.5 * utilization + rng.normal(0, 15, shape), 62 + rng.normal(0, 2, shape))
    increments = np.rint(power * INTERVAL_SECONDS * 1000).astype(np.int64)
    energy = rng.integers(10**10, 10**12, (GPUS_PER_NODE, 1)) + np.cumsum(increments, axis=1)
    ratios = {
        name: np.round(utilization / 100 * (0.3 + 0.7 * (number + 1) / len(activity)), 6)
        for number, name in enumerate(activity)
    }
    if SM_CYCLES_ELAPSED in ratios:
        ratios.pop(SM_CYCLES_ELAPSED)
        cycles = np.full(shape, CYCLES_PER_INTERVAL, dtype=np.int64)
        start = 10**15  # fixed, so that the jobs drawn after it are those of the other sets
        ratios[SM_CYCLES_ELAPSED] = start + np.cumsum(cycles, axis=1)
        for name in activity:
            if name in CYCLE_FIELDS and name != SM_CYCLES_ELAPSED:
                active = np.rint(cycles * ratios[name]).astype(np.int64)
                ratios[name] = start // 2 + np.cumsum(active, axis=1)
    return {
        UTILIZATION_FIELD: utilization.astype(np.int64),
        ENERGY_FIELD: energy,
        MEMORY_FIELD: memory.astype(np.int64),
        **ratios,
    }


ACTIVITY_SETS: dict[str, tuple[str, ...]] = {
    "none": (),
    "default": ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE"),
    "all": tuple(names[0] for names in ACTIVITY_FIELDS.values()),
    "cycles": (
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE", *CYCLE_FIELDS,
    ),
}  # fmt: skip
"""``--activity``: the profiling fields each GPU exports (``default``: those dcgm-exporter's ``default-counters.csv``
enables; ``cycles``: those and DCGM 4.6's cycle counters, the elapsed SM cycles and the SM, tensor and FP pipes'
active cycles)."""
CYCLES_PER_INTERVAL = 132 * 1_980_000_000 * INTERVAL_SECONDS
"""Elapsed SM cycles a reading interval: 132 SMs (an H100 SXM) at 1,980 MHz."""


def node_name(n: int) -> str:
    """The hostname of node ``n``."""
    return f"gpu-{n // 100:03d}-{n % 100:02d}"


def gpu_uuid(n: int, index: int) -> str:
    """The NVML UUID of GPU ``index`` of node ``n``."""
    return f"GPU-{n:08x}-0000-4000-8000-{index:012x}"


def import_body(n: int, series: dict[str, np.ndarray], stamps: str) -> bytes:
    """Node ``n``'s series as VictoriaMetrics' JSON lines (``/api/v1/import``), ``stamps`` their timestamps (ms,
    comma-separated)."""
    lines = []
    for name, values in series.items():
        for index, row in enumerate(values.tolist()):
            labels = (f'"__name__":"{name}","Hostname":"{node_name(n)}","gpu":"{index}",'
                      f'"UUID":"{gpu_uuid(n, index)}","modelName":"{MODEL}"')  # fmt: skip
            lines.append(f'{{"metric":{{{labels}}},"values":[{",".join(map(str, row))}],"timestamps":[{stamps}]}}\n')
    return "".join(lines).encode()


@contextmanager
def victoria_metrics(binary: str, workdir: Path) -> Iterator[tuple[str, int]]:
    """Single-node VictoriaMetrics with its data in ``workdir``/data on a free port of 127.0.0.1, response caching
    off; yields (base URL, process id) once ``/health`` answers. Its log is ``workdir``/victoria-metrics.log."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    log = workdir / "victoria-metrics.log"
    command = [binary, f"-storageDataPath={workdir / 'data'}", f"-httpListenAddr=127.0.0.1:{port}",
               "-retentionPeriod=100y", "-search.disableCache", "-loggerLevel=WARN"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log.open("w"))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"{binary} did not start: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        yield url, process.pid
    finally:
        process.terminate()
        process.wait(timeout=60)


def disk_bytes(path: Path) -> int:
    """Bytes allocated on disk to the files under ``path`` (as ``du``); files removed meanwhile are skipped."""
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            with suppress(FileNotFoundError):
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
    return total


def import_day(
    url: str, pid: int, gpus: int, start: int, end: int, job_hours: float, activity: Sequence[str] = ()
) -> dict[str, list[NodeJob]]:
    """Part 1 of the module: the fleet's readings of [start, end) into VictoriaMetrics, flushed; prints it. Returns
    each node's jobs."""
    rng = np.random.default_rng(7)
    cycles = (end - start) // INTERVAL_SECONDS
    offsets = np.arange(cycles, dtype=np.int64) * INTERVAL_SECONDS
    stamps = [",".join(map(str, ((start + phase + offsets) * 1000).tolist())) for phase in range(INTERVAL_SECONDS)]
    nodes = gpus // GPUS_PER_NODE
    jobs: dict[str, list[NodeJob]] = {}
    sent = 0
    vm_cpu, own_cpu, began = _cpu_seconds(pid), time.process_time(), time.perf_counter()
    with httpx.Client(base_url=url, timeout=600) as http, ThreadPoolExecutor(1) as pool:
        pending: Future[httpx.Response] | None = None
        for first in range(0, nodes, NODES_PER_REQUEST):
            parts = []
            for n in range(first, min(first + NODES_PER_REQUEST, nodes)):
                phase = n % INTERVAL_SECONDS
                jobs[node_name(n)] = node_jobs(rng, start, end, job_hours)
                series = node_series(rng, jobs[node_name(n)], start + phase + offsets, activity)
                parts.append(import_body(n, series, stamps[phase]))
            body = b"".join(parts)
            sent += len(body)
            if pending is not None:
                pending.result().raise_for_status()
            pending = pool.submit(http.post, "/api/v1/import", content=body)
        if pending is not None:
            pending.result().raise_for_status()
        http.get("/internal/force_flush").raise_for_status()
    elapsed, vm_cpu, own_cpu = time.perf_counter() - began, _cpu_seconds(pid) - vm_cpu, time.process_time() - own_cpu
    fields = 3 + len(activity)
    samples = nodes * GPUS_PER_NODE * cycles * fields
    print(f"import: {nodes * GPUS_PER_NODE:,} GPUs × {(end - start) / HOUR:g} h at {INTERVAL_SECONDS} s = "
          f"{samples // fields:,} readings, {samples:,} samples ({sent / 2**30:.2f} GiB of JSON lines, "
          f"{-(-nodes // NODES_PER_REQUEST):,} requests)")  # fmt: skip
    print(f"  {elapsed:.0f} s = {samples / elapsed:,.0f} samples/s with the generation beside it; "
          f"VictoriaMetrics CPU {vm_cpu:.0f} s = {vm_cpu / samples * 1e6:.2f} µs per sample; generator CPU "
          f"{own_cpu:.0f} s")  # fmt: skip
    return jobs


def settled(url: str, data: Path, poll_seconds: float = 5, polls: int = 4) -> int:
    """The bytes on disk under ``data`` once VictoriaMetrics runs no forced merge (``vm_active_force_merges`` of its
    ``/metrics``) and they have not changed over ``polls`` polls ``poll_seconds`` apart (in-memory parts reach the
    disk 5–10 s after a flush; a forced merge runs in the background)."""
    sizes: list[int] = []
    deadline = time.monotonic() + 3600
    while time.monotonic() < deadline:
        merging = "\nvm_active_force_merges 0\n" not in httpx.get(f"{url}/metrics").text
        sizes = [] if merging else [*sizes, disk_bytes(data)][-polls:]
        if len(sizes) == polls and len(set(sizes)) == 1:
            return sizes[0]
        time.sleep(poll_seconds)
    raise TimeoutError(f"{data} still changing after an hour")


def storage(url: str, pid: int, data: Path, gpu_days: float) -> None:
    """Part 2 of the module: the storage directory's bytes after the flush and after a forced merge; prints it."""
    flushed = settled(url, data)
    vm_cpu, began = _cpu_seconds(pid), time.perf_counter()
    httpx.get(f"{url}/internal/force_merge", timeout=600).raise_for_status()
    time.sleep(2)  # the merge's goroutine starts
    merged, index = settled(url, data), disk_bytes(data / "indexdb")
    samples = gpu_days * 86400 / INTERVAL_SECONDS * 3
    print(f"storage: {flushed / 2**20:,.1f} MiB after the flush = {flushed / gpu_days / 2**10:,.1f} KiB per GPU-day; "
          f"after the forced merge ({time.perf_counter() - began:.0f} s, {_cpu_seconds(pid) - vm_cpu:.0f} s of CPU) "
          f"{merged / 2**20:,.1f} MiB = {merged / gpu_days / 2**10:,.1f} KiB per GPU-day, {merged / samples:.2f} "
          f"bytes per sample (the series index {index / 2**20:,.1f} MiB of it)")  # fmt: skip


def store_jobs(session: Session, jobs: dict[str, list[NodeJob]], end: int) -> int:
    """The nodes' jobs as Slurm jobs of :data:`TEAMS` teams, each with an allocation of each of its node's GPUs (a
    job running at ``end`` has no end); returns how many jobs."""
    teams = [Team(name=f"team-{k:02d}") for k in range(TEAMS)]
    session.add_all(teams)
    session.flush()
    gpu_ids = {
        (hostname, index): gpu_id
        for hostname, index, gpu_id in session.execute(
            select(Node.hostname, Gpu.gpu_index, Gpu.id).join(Gpu, Gpu.node_id == Node.id)
        )
    }
    rows: list[dict[str, object]] = []
    holdings: list[tuple[str, NodeJob, bool]] = []
    for hostname, node_jobs_ in jobs.items():
        for job in node_jobs_:
            number = str(5_000_000 + len(rows))
            team = teams[len(rows) % TEAMS]
            running = job.end > end
            rows.append({
                "scheduler": "slurm", "cluster": "bench", "job_id": number, "job_id_raw": number,
                "user": f"user-{len(rows) % 97:02d}", "account": team.name, "partition": "gpu", "name": "train",
                "state": "RUNNING" if running else "COMPLETED", "start": from_epoch(job.start),
                "end": None if running else from_epoch(job.end), "gpus": GPUS_PER_NODE, "node_list": hostname,
                "team_id": team.id,
            })  # fmt: skip
            holdings.append((hostname, job, running))
    ids = session.scalars(insert(Job).returning(Job.id, sort_by_parameter_order=True), rows).all()
    allocations = [
        {"job_pk": job_pk, "gpu_id": gpu_ids[hostname, index], "start": from_epoch(job.start),
         "end": None if running else from_epoch(job.end)}
        for job_pk, (hostname, job, running) in zip(ids, holdings, strict=True)
        for index in range(GPUS_PER_NODE)
        if (hostname, index) in gpu_ids
    ]  # fmt: skip
    session.execute(insert(Allocation), allocations)
    return len(rows)


@dataclass(frozen=True, slots=True)
class Measure:
    """One timed piece of work: wall seconds, PromQL queries, CPU seconds of VictoriaMetrics and of this process."""

    seconds: float
    queries: int
    vm_seconds: float
    own_seconds: float


class Counted:
    """Times work against the TSDB at ``url`` (VictoriaMetrics' process ``pid``), counting the queries its
    :attr:`client` sends."""

    def __init__(self, url: str, pid: int) -> None:
        self.pid = pid
        self.queries = 0
        self.client = PrometheusClient(
            url, httpx.Client(timeout=3600, event_hooks={"request": [lambda _: self._count()]})
        )

    def _count(self) -> None:
        self.queries += 1

    def measure(self, work: Callable[[], object]) -> Measure:
        """Run ``work``; what it took."""
        queries, vm_cpu, own_cpu, began = self.queries, _cpu_seconds(self.pid), time.process_time(), time.perf_counter()
        work()
        return Measure(
            time.perf_counter() - began,
            self.queries - queries,
            _cpu_seconds(self.pid) - vm_cpu,
            time.process_time() - own_cpu,
        )


def median(runs: Sequence[Measure]) -> Measure:
    """The median of each field over ``runs``."""
    return Measure(*(statistics.median(getattr(run, name) for run in runs) for name in Measure.__slots__))


def shown(run: Measure) -> str:
    """A measure in one line."""
    return (f"{run.seconds:,.2f} s, {run.queries:,} queries, VictoriaMetrics CPU {run.vm_seconds:,.2f} s, "
            f"this process' CPU {run.own_seconds:,.2f} s")  # fmt: skip


def metering(database_url: str, counted: Counted, jobs: dict[str, list[NodeJob]], start: int, end: int,
             parts: Sequence[str], repeat: int) -> None:  # fmt: skip
    """Part 3 of the module: discovery and jobs, then each of ``parts`` (:data:`PARTS`) ``repeat`` times; prints
    it."""
    os.environ["FINOPS_DATABASE_URL"] = database_url
    settings = load_settings()
    sessions, pricing, policy = open_sessions(settings), load_pricing(settings), idle_policy(settings)
    tsdb = TsdbTelemetry(counted.client, PullOptions(step_seconds=INTERVAL_SECONDS))
    hour = end - HOUR
    with sessions.begin() as session:
        registered: list[int] = []
        found = counted.measure(lambda: registered.append(tsdb.register_gpus(session, start, end)))
    print(f"discovery: {registered[0]:,} GPUs registered in {shown(found)}")
    with sessions.begin() as session:
        print(f"{store_jobs(session, jobs, end):,} jobs stored; hour H = {from_epoch(hour):%Y-%m-%d %H:%M}")
    if "rollup" in parts:
        with sessions.begin() as session:
            began = time.perf_counter()
            rollup(session, pricing, hour + 1, meter=lambda *_: None)
        print(f"ledger built up to H without metering in {time.perf_counter() - began:.1f} s")
        first = counted.measure(lambda: run_rollup(sessions, pricing, policy, tsdb=tsdb))
        print(f"first run_rollup (H and the hours since, up to now): {shown(first)}")

    runs: dict[str, list[Measure]] = defaultdict(list)
    for _ in range(repeat):
        if "meter" in parts:
            with sessions.begin() as session:
                runs["TsdbMeter, hour H"].append(
                    counted.measure(lambda: tsdb.meter.meter_hours(session, [hour], hour + HOUR))
                )
            for minutes in (5, 30):
                with sessions() as session:
                    runs[f"TsdbMeter, first {minutes} minutes of H"].append(
                        counted.measure(lambda: tsdb.meter.meter_hours(session, [hour], hour + minutes * 60))  # noqa: B023
                    )
                    session.rollback()
        if "idle" in parts:
            with sessions.begin() as session:
                runs["idle episodes of H re-judged"].append(
                    counted.measure(lambda: rejudge_idle(session, [hour], policy, pricing, tsdb))
                )
        if "rollup" in parts:
            with sessions.begin() as session:
                mark_hours_dirty(session, [hour])
            runs["run_rollup: H and the current hour"].append(
                counted.measure(lambda: run_rollup(sessions, pricing, policy, tsdb=tsdb))
            )
    gpus = len(jobs) * GPUS_PER_NODE
    with sessions() as session:
        in_hour = (TsdbGpuMetering.start >= from_epoch(hour), TsdbGpuMetering.start < from_epoch(hour + HOUR))
        segments = session.scalar(select(func.count()).select_from(TsdbGpuMetering).where(*in_hour)) or 0
        bounds = session.scalar(
            select(func.count()).select_from(
                select(TsdbGpuMetering.start, TsdbGpuMetering.stop).where(*in_hour).distinct().subquery()
            )
        )
        stored = session.scalar(select(func.count()).select_from(TsdbGpuMetering)) or 1
        gpu_hours = session.scalar(
            select(func.count()).select_from(select(LedgerEntry.hour, LedgerEntry.gpu_id).distinct().subquery())
        )
    print(f"metering, medians of {repeat}; H has {segments:,} segments of {gpus:,} GPUs ({segments / gpus:.2f} a GPU) "
          f"with {bounds:,} distinct bounds:")  # fmt: skip
    for name, measures in runs.items():
        print(f"  {name}: {shown(median(measures))}")
    conninfo = make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(conninfo) as connection:
        sizes: dict[bool, int] = dict(connection.execute(STORAGE_SQL).fetchall())
    if gpu_hours:
        print(f"PostgreSQL in this mode: ledger {sizes.get(False, 0) / gpu_hours * 24 / 2**10:,.1f} KiB per GPU-day "
              f"({gpu_hours:,} GPU-hours)")  # fmt: skip
    if segments:
        print(f"  tsdb_gpu_metering {sizes.get(True, 0) / stored * segments / gpus * 24 / 2**10:,.1f} KiB per GPU-day "
              f"({segments / gpus:.2f} segments a GPU-hour)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("database_url", help="PostgreSQL SQLAlchemy URL; its schema is dropped and recreated")
    parser.add_argument("--gpus", type=int, default=10_000, help="fleet size (8 GPUs per node)")
    parser.add_argument("--hours", type=int, default=24, help="hours of 10-second readings (2 at least)")
    parser.add_argument("--job-hours", type=float, default=4.0, help="mean length of a job")
    parser.add_argument("--repeat", type=int, default=3, help="measurements of each metering case")
    parser.add_argument(
        "--parts",
        nargs="*",
        choices=PARTS,
        default=list(PARTS),
        help="what is measured after the import (none: the import and storage only)",
    )
    parser.add_argument(
        "--activity",
        choices=list(ACTIVITY_SETS),
        default="none",
        help="profiling fields each GPU exports besides: none, dcgm-exporter's default three, all eight, or the "
        "default three and DCGM 4.6's cycle counters",
    )
    parser.add_argument("--victoria-metrics", default="/usr/bin/victoria-metrics", help="VictoriaMetrics' binary")
    args = parser.parse_args()
    if args.hours < 2:
        parser.error("--hours: 2 at least (the metered hour reads the energy counter's hour before it)")
    engine = make_engine(args.database_url)
    if engine.dialect.name != "postgresql":
        parser.error("this benchmark measures the PostgreSQL service's metering: give a PostgreSQL URL")
    downgrade(engine, "base")
    upgrade(engine)
    engine.dispose()
    with open("/proc/loadavg") as load:
        print(f"load average at the start: {' '.join(load.read().split()[:3])}")
    end = floor_hour(int(time.time()))
    start = end - args.hours * HOUR
    with tempfile.TemporaryDirectory(prefix="tsdb-day-") as workdir, \
            victoria_metrics(args.victoria_metrics, Path(workdir)) as (url, pid):  # fmt: skip
        jobs = import_day(url, pid, args.gpus, start, end, args.job_hours, ACTIVITY_SETS[args.activity])
        storage(url, pid, Path(workdir) / "data", len(jobs) * GPUS_PER_NODE * args.hours / 24)
        if args.parts:
            metering(args.database_url, Counted(url, pid), jobs, start, end, args.parts, args.repeat)


if __name__ == "__main__":
    main()
