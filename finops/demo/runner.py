"""``gpu-finops demo``: a week of a GPU cluster through the real pipeline, end to end, on this machine.

Steps: pick the input (the real Helios week, or the synthetic one), derive the job log and the GPUs'
readings, start the service as a child process on 127.0.0.1, run one collector agent per node shipping its
readings over HTTP, import the job log through the sacct importer, build the ledger, detect idle GPUs,
print the team report and budgets, then serve the dashboard (unless ``--headless``).
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import secrets
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import orjson
from sqlalchemy.orm import Session

from collector.agent import Agent
from collector.exposition import LatestSamples
from collector.shipper import Shipper
from collector.sources.replay import ReplaySource
from finops.analysis.budgets import budget_status, set_budget
from finops.analysis.idle import IdlePolicy, detect_idle
from finops.analysis.report import cost_report
from finops.analysis.report_format import report_dicts, report_table
from finops.db.engine import downgrade, make_engine, session_factory, upgrade
from finops.demo.activity import GpuProfile, nominal_h100_profile, profile_from_capture
from finops.demo.allocation import TeamSeries, derive_jobs, node_names
from finops.demo.helios import load_helios
from finops.demo.profiling import CAPTURES, IDLE_CAPTURE, JITTER, WorkloadProfile, load_profiles
from finops.demo.synthetic import synthetic_week
from finops.demo.workload import (
    IDLE_JOB_SHARE,
    PROFILE_WEIGHTS,
    SPARE_GPU_SHARE,
    Readings,
    Trace,
    node_sink,
    node_steps,
    plan_jobs,
    sacct_lines,
)
from finops.jobs.slurm_import import import_sacct
from finops.jobs.teams import map_account
from finops.ledger.rollup import rollup
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.service.dashboard_server import serve_dashboard
from finops.timeutil import HOUR, floor_hour, from_epoch, month_start, next_month_start, to_epoch, utc_now

H100_CAPTURE = "nvidia-smi-captures/linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
COLLECTOR_THREADS = 6
"""Nodes whose collectors replay at once. Each waits for the service's answer to a POST before it makes its next
batch, so more nodes at a time keep both the service and the collectors busy: six keep the service's four slots for
large bodies (:data:`finops.web.ingest_route.LARGE_INGEST_CONCURRENCY`) filled while two more make their batches."""
COLLECTOR_PROCESSES = 2
"""Processes the collectors replay from (:func:`_ship_trace`): one interpreter lock cannot make the batches of six
nodes as fast as the service stores them."""
REPLAY_YOUNG_THRESHOLD = 100_000
"""The cyclic garbage collector's youngest generation threshold while the demo's collectors replay the week
(:func:`_few_collections`; CPython's default is 700)."""
ACTOR = "system:demo"
"""Who the demo's team rules and budgets are audited as (:mod:`finops.access.audit`)."""
PLANNED_QUOTA_USE = Decimal("0.75")


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """Everything the demo needs; the CLI fills it from its options and the settings."""

    helios_dir: Path | None
    headless: bool
    report_json: Path | None
    database_url: str
    dashboard_port: int
    price_catalog: Path | None
    pricing_model: PricingModel
    shared_data: Path
    work_dir: Path
    minutes: int | None = None


@dataclass(frozen=True, slots=True)
class _Inputs:
    series: list[TeamSeries]
    gpu: GpuProfile
    profiles: tuple[WorkloadProfile, ...]
    idle_activity: dict[str, float]


DERIVED_NOTE = """\
DERIVED, not in the trace (docs/demo.md), each drawn per job with a fixed seed: busy or idle ({idle} idle); the SM,
tensor and DRAM activity of busy GPUs, as their utilisation times the activity-to-utilisation ratios of the real
DCGM captures above ({profiles}; each job's ratios times a factor in 1 ± {jitter}; SM activity is the capture's
GR_ENGINE_ACTIVE, an upper bound), or no activity field at all for the other {unmeasured} of jobs (not measured);
what idle jobs wait on: Lustre or NFS reads and InfiniBand traffic (the nodes' node_io rates), thermal throttling
(clocks-event reasons), memory held with no compute, an open notebook, or nothing; {spare} of the busy multi-GPU
jobs leave a GPU idle."""


def _percent(ratio: float) -> str:
    return f"{ratio * 100:.0f} %"


def _inputs(options: DemoOptions) -> _Inputs:
    capture = options.shared_data / H100_CAPTURE
    if capture.is_file():
        profile = profile_from_capture(capture)
    else:
        print(f"note: {capture} is missing; GPU readings use nominal H100 datasheet values instead")
        profile = nominal_h100_profile()
    if options.helios_dir is not None:
        series = load_helios(options.helios_dir)
        print(f"input: the real Helios 'Earth' week (CC-BY-4.0, Hu et al. SC '21) from {options.helios_dir};")
        print("       job log DERIVED from its per-minute allocation, GPU activity DERIVED from a capture")
    else:
        series = synthetic_week()
        print("input: a SYNTHETIC week shaped like Helios 'Earth' (seeded); --trace helios:DIR replays the real one")
    print(f"GPU readings: {profile.origin}")
    profiles, idle_activity = load_profiles(options.shared_data)
    if profiles:
        for workload in profiles:
            print(f"GPU activity profile '{workload.name}': DERIVED from the capture {workload.capture}")
        print(f"idle GPU activity: the capture {IDLE_CAPTURE} (NVIDIA L4: all 0), in {options.shared_data / CAPTURES}")
        shares = zip(profiles, PROFILE_WEIGHTS, strict=False)
        note = DERIVED_NOTE.format(
            idle=_percent(IDLE_JOB_SHARE),
            profiles=", ".join(f"'{workload.name}' {_percent(share)}" for workload, share in shares),
            jitter=_percent(JITTER),
            unmeasured=_percent(1 - sum(PROFILE_WEIGHTS)),
            spare=_percent(SPARE_GPU_SHARE),
        )
        print(textwrap.fill(" ".join(note.split()), width=116))
    else:
        print(f"note: {options.shared_data / CAPTURES} is missing; GPU activity is not measured (no activity field)")
    return _Inputs(series, profile, profiles, idle_activity)


def _fresh_database(url: str) -> None:
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        for stale in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            stale.unlink(missing_ok=True)
    engine = make_engine(url)
    downgrade(engine, "base")
    upgrade(engine)
    engine.dispose()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _launch_service(url: str, token: str, port: int, log_path: Path) -> subprocess.Popen[bytes]:
    """``gpu-finops serve`` (no scheduler) on 127.0.0.1:``port`` with the one-off shared ``token``, its log in
    ``log_path`` (a service's log, its shared-token warning included, is not the demo's output), started and not
    waited for (:func:`_await_service`): it imports its modules while the demo derives the week."""
    env = {**os.environ, "FINOPS_DATABASE_URL": url, "FINOPS_INGEST_TOKEN": token}
    command = [
        sys.executable,
        "-m",
        "finops.cli",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-scheduler",
    ]
    with log_path.open("wb") as log:
        return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)


def _await_service(process: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
    """Return once the service ``process`` (:func:`_launch_service`) answers ``/healthz``. RuntimeError with its
    log's end (``log_path``) if it exits or does not answer within 60 s."""
    deadline = time.monotonic() + 60
    with httpx.Client(timeout=2) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(
                    f"the service exited with code {process.returncode} before it was ready; {log_path} ends: "
                    + log_path.read_text(errors="replace")[-2000:]
                )
            try:
                if client.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.2)
    raise RuntimeError(f"the service did not answer /healthz within 60 s; its log is {log_path}")


def _drain(agent: Agent, source: ReplaySource) -> int:
    accepted = 0
    while not source.exhausted:
        accepted += agent.cycle()
    return accepted


@contextmanager
def _few_collections() -> Iterator[None]:
    """The youngest generation of the cyclic garbage collector collected every :data:`REPLAY_YOUNG_THRESHOLD`
    container objects instead of every 700, while inside, then as before. A collector's step of the replay
    (:data:`finops.demo.workload.STEP_MINUTES`) is some 30,000 readings, dicts and rows alive until it is shipped
    and none of them garbage in a cycle (reference counting frees them); with the default threshold each step set
    off dozens of collections, which walked them all and moved them into the older generations, whose collections
    then walked them again: about 40 % of the collectors' CPU."""
    young, middle, oldest = gc.get_threshold()
    gc.set_threshold(REPLAY_YOUNG_THRESHOLD, middle, oldest)
    try:
        yield
    finally:
        gc.set_threshold(young, middle, oldest)


_REPLAY: tuple[Trace, Readings, str, str] | None = None
"""What the collector processes replay (:func:`_ship_trace`), set before they are forked."""


def _ship_nodes(part: int, parts: int) -> int:
    """Replay every ``parts``-th node of :data:`_REPLAY` from the ``part``-th on: one collector agent per node (a
    :class:`ReplaySource` of its steps, shipping each step as one batch), :data:`COLLECTOR_THREADS` ÷ ``parts``
    nodes at a time; returns the readings the service accepted."""
    assert _REPLAY is not None, "set by _ship_trace before the processes are forked"
    trace, readings, service_url, token = _REPLAY
    traffic = trace.traffic()
    work = []
    for node in trace.nodes[part::parts]:
        source = ReplaySource(node_steps(trace, node, readings))
        sink = node_sink(Shipper(service_url, token, node), traffic, node)
        work.append((Agent([source], LatestSamples(), sink), source))
    with _few_collections(), ThreadPoolExecutor(max(1, COLLECTOR_THREADS // parts)) as pool:
        return sum(pool.map(lambda pair: _drain(*pair), work))


def _ship_trace(trace: Trace, readings: Readings, service_url: str, token: str) -> int:
    """Replay ``trace`` from :data:`COLLECTOR_PROCESSES` processes forked from this one (each with its own
    interpreter lock, as collectors on their own nodes have), the nodes dealt among them (:func:`_ship_nodes`);
    returns the readings the service accepted."""
    global _REPLAY
    _REPLAY = (trace, readings, service_url, token)
    try:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(COLLECTOR_PROCESSES, mp_context=context) as pool:
            parts = [pool.submit(_ship_nodes, part, COLLECTOR_PROCESSES) for part in range(COLLECTOR_PROCESSES)]
            return sum(part.result() for part in parts)
    finally:
        _REPLAY = None


def run_demo(options: DemoOptions) -> int:
    """Run the demo; returns the process exit code (0 on success)."""
    began = time.perf_counter()
    _fresh_database(options.database_url)
    token, port = secrets.token_urlsafe(24), _free_port()
    options.work_dir.mkdir(parents=True, exist_ok=True)
    service_log = options.work_dir / "demo-service.log"
    service = _launch_service(options.database_url, token, port, service_log)
    try:
        inputs = _inputs(options)
        series, profile = inputs.series, inputs.gpu
        if options.minutes is not None:
            series = [TeamSeries(s.team, s.quota, s.running[: options.minutes]) for s in series]
        minutes = len(series[0].running)
        now = utc_now().replace(second=0, microsecond=0)
        jobs = derive_jobs(series)
        trace = Trace(
            jobs, node_names(series), now - timedelta(minutes=minutes), minutes, plan_jobs(jobs, inputs.profiles)
        )
        gpus = len(trace.nodes) * 8
        print(
            f"{len(series)} teams, {gpus} GPUs on {len(trace.nodes)} nodes, {len(trace.jobs)} jobs, "
            f"{minutes} minutes from {trace.start:%Y-%m-%d %H:%M} to {trace.end:%Y-%m-%d %H:%M} UTC"
        )
        engine = make_engine(options.database_url)
        sessions = session_factory(engine)
        pricing = Pricing(load_catalog(options.price_catalog), options.pricing_model)
        with sessions.begin() as session:
            for team in series:
                map_account(session, team.team, team.team, actor=ACTOR)
        _await_service(service, port, service_log)
        shipped_at = time.perf_counter()
        readings = Readings(profile, inputs.idle_activity)
        accepted = _ship_trace(trace, readings, f"http://127.0.0.1:{port}", token)
        ingest_seconds = time.perf_counter() - shipped_at
    finally:
        service.terminate()
        service.wait(timeout=60)
    print(f"ingest: {accepted:,} GPU readings over HTTP in {ingest_seconds:.1f} s ({accepted / ingest_seconds:,.0f}/s)")

    log_path = options.work_dir / "demo-sacct.txt"
    log_path.write_text("\n".join(sacct_lines(trace)) + "\n")
    ledger_at = time.perf_counter()
    with sessions.begin() as session, log_path.open() as handle:
        imported = import_sacct(session, handle, source=str(log_path))
    print(f"jobs: {imported.jobs} imported from {log_path} ({len(imported.errors)} bad lines)")
    with sessions.begin() as session:
        hours = rollup(session, pricing, to_epoch(trace.end)).hours
    with sessions.begin() as session:  # a transaction that has written nothing reads the readings on helpers too
        episodes = detect_idle(session, trace.start, trace.end, IdlePolicy(), pricing)
        _set_demo_budgets(session, series, pricing, profile.model, trace.end)
    ledger_seconds = time.perf_counter() - ledger_at
    print(f"ledger: {hours} hours built, {episodes} idle episodes, in {ledger_seconds:.1f} s")

    start, end = from_epoch(floor_hour(to_epoch(trace.start))), from_epoch(floor_hour(to_epoch(trace.end) - 1) + HOUR)
    with sessions() as session:
        rows = cost_report(session, start, end, "team")
        statuses = budget_status(session, trace.end)
    print(f"\nCost by team, {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC ({options.pricing_model} prices)")
    print(report_table(rows, "team"))
    print("\nBudgets this month (derived: 75 % of each team's quota at list price)")
    for s in statuses:
        print(
            f"  {s.team:<14} spent {s.spent:>12,.2f} of {s.budget:>12,.2f} {s.currency} ({s.used_percent} %), "
            f"forecast {s.forecast:,.2f}"
        )
    if options.report_json is not None:
        options.report_json.write_bytes(orjson.dumps(report_dicts(rows, "team"), option=orjson.OPT_INDENT_2))
        print(f"\nreport JSON written to {options.report_json}")
    total = time.perf_counter() - began
    print(f"\ndemo: {accepted:,} GPU readings, {total:.1f} s end to end, {accepted / total:,.0f} readings/s overall")
    engine.dispose()
    print(explore_hint(options.database_url, trace.start, options.dashboard_port))
    if options.headless:
        return 0
    return serve_dashboard("127.0.0.1", options.dashboard_port, options.database_url)


def explore_hint(database_url: str, since: datetime, dashboard_port: int) -> str:
    """What the demo prints last: where its database is, and the commands that explore the replayed days from
    ``since`` (its first day) on and the dashboard on ``dashboard_port``, with the program named as it was run
    (``.venv/bin/gpu-finops``, or ``gpu-finops``)."""
    day = f"{since:%Y-%m-%d}"
    program = sys.argv[0] if Path(sys.argv[0]).name == "gpu-finops" else "gpu-finops"  # as the user ran it
    commands = (
        (f"report --start {day} --by job", "cost per job: name, team, user, start, end, GPUs"),
        (f"report --start {day} --by gpu_model", "cost per GPU model of the price catalog"),
        ("budget status", "each team's budget this month, spend and forecast"),
        (f"idle list --start {day}", "idle episodes, costliest first"),
        ("alerts list", "firing alerts"),
        (f"dashboard --port {dashboard_port}", f"the dashboard on http://127.0.0.1:{dashboard_port}"),
    )
    return "\n".join(
        [
            f"\nThe demo's data is in {database_url}. To explore it with the other commands, in this shell:",
            f"  export FINOPS_DATABASE_URL={database_url}",
            *(f"  {program} {command:<40} # {what}" for command, what in commands),
        ]
    )


def _set_demo_budgets(
    session: Session, series: list[TeamSeries], pricing: Pricing, gpu_model: str, at: datetime
) -> None:
    """Give each team a month budget of 75 % of its quota's list-price cost (a demo figure, not data)."""
    hours_in_month = Decimal((next_month_start(at) - month_start(at)).total_seconds()) / HOUR
    rate = pricing.catalog.rate(gpu_model, pricing.model, at)
    for team in series:
        amount = (team.quota * hours_in_month * rate * PLANNED_QUOTA_USE).quantize(Decimal("1"))
        set_budget(session, team.team, amount, at, catalog=pricing.catalog, actor=ACTOR)
