"""Dashboard load time on a month of a 1,024-GPU cluster in PostgreSQL: Overview and Teams, cold and warm.

Usage::

    .venv/bin/python benchmarks/dashboard.py [DATABASE_URL] [--nodes 128] [--days 30] [--runs 5] [--reuse]
        [--explain]

``DATABASE_URL`` defaults to ``postgresql+psycopg://postgres@127.0.0.1:5432/test_f``; its ``public`` schema is
dropped, migrated afresh and filled (unless ``--reuse`` finds the data of an earlier run). Prints figures, with
the load average of the machine around the browser timings; asserts nothing about time.

Workload, generated in SQL (``generate_series``), deterministic: ``--nodes`` nodes × 8 "NVIDIA H100 80GB HBM3"
GPUs in four Slurm partitions and two clusters; 12 teams with a budget each this month; on every node one
whole-node job after another (4 to 12 hours, one slot in ten left empty: capacity no job held), each holding its
8 GPUs (allocations); a ledger row per GPU and hour for ``--days`` days up to the current hour (1,024 × 720 ≈
737k rows; and their team-hours), priced at 2.50 USD per GPU-hour with utilisation varying by GPU and hour (some
jobs idle); and raw readings, one a minute, for the last 6 hours only (for the GPUs & nodes page).

Timed with the real server and a real browser: ``gpu-finops dashboard`` on 127.0.0.1 (one server per case, so
that no case finds another's results cached) and Debian's headless Chromium (Playwright), until the page's script
has run to its end and its first table is on screen:

- cold rerun: the page open in its tab, rerun ("r") once every cached result has expired (the one-minute TTL of
  ``st.cache_data``, and of the ledger read in ``st.cache_resource``): what a viewer meets when the page's data
  is fetched again, the frontend already loaded;
- cold load: the page opened in a new tab on a server whose caches are empty (the server's imports and the
  browser's cache of the frontend warmed on the Prices page first, which reads no ledger);
- warm rerun and warm load: the same with every result cached (medians of ``--runs``);
- Prices: a load of the Prices page, i.e. what the frontend itself takes, in every load above.

Cases: Overview and Teams with the default period (month to date) and ``?period=30d``, Teams with one team chosen
(``?team=team-03``: burn-down and breakdowns), and the GPUs & nodes page on its 6 hours of readings. Goal: cold
≤ 2 s, warm ≤ 300 ms (the reruns; the loads add the frontend's own time). Beside them, the query functions the two
pages call, each timed once on a new engine (no Streamlit). ``--explain`` prints ``EXPLAIN ANALYZE`` of the
Overview's ledger queries.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from sqlalchemy import Engine, text

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

os.environ.setdefault("STREAMLIT_LOGGER_LEVEL", "error")  # its caches warn when imported outside a server

from dashboards.data import TTL_SECONDS  # noqa: E402
from finops.db.engine import make_engine, session_factory, upgrade  # noqa: E402
from finops.ledger.team_hours import refresh_team_hours  # noqa: E402
from finops.timeutil import to_epoch  # noqa: E402

DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test_f"
MODEL = "NVIDIA H100 80GB HBM3"
TEAMS = 12
RATE = "2.500000"
SAMPLE_HOURS = 6
COLD_GOAL_SECONDS = 2.0
WARM_GOAL_SECONDS = 0.3
CASES: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("Overview", "", {}),
    ("Overview", "", {"period": "30d"}),
    ("Teams", "teams", {}),
    ("Teams", "teams", {"period": "30d"}),
    ("Teams", "teams", {"team": "team-03"}),
    ("GPUs & nodes", "gpus", {}),
)


def generate(engine: Engine, nodes: int, days: int, now: datetime) -> dict[str, int]:
    """Fill the migrated, empty database at ``engine``; returns row counts per table."""
    last_hour = to_epoch(now) - to_epoch(now) % 3600
    first_hour = last_hour - (days * 24 - 1) * 3600
    month = datetime(now.year, now.month, 1, tzinfo=UTC)
    sample_from = last_hour + 3600 - SAMPLE_HOURS * 3600
    parameters = {
        "nodes": nodes, "first": first_hour, "last": last_hour, "teams": TEAMS, "model": MODEL, "rate": RATE,
        "month": to_epoch(month), "sample_from": sample_from, "now": to_epoch(now),
    }  # fmt: skip
    statements = [
        """INSERT INTO teams (name)
           SELECT format('team-%s', lpad(i::text, 2, '0')) FROM generate_series(0, :teams - 1) i""",
        "INSERT INTO teams (name) VALUES ('__unallocated__'), ('__unmapped__')",
        """INSERT INTO nodes (hostname, partition)
           SELECT format('gpu-%s', lpad(n::text, 3, '0')),
                  (ARRAY['batch', 'interactive', 'reserved', 'spot'])[n % 4 + 1]
           FROM generate_series(0, :nodes - 1) n""",
        """INSERT INTO gpus (uuid, node_id, gpu_index, model, memory_total_bytes, in_service_from)
           SELECT format('GPU-%s-%s', n.id, i), n.id, i, :model, 85899345920, :first
           FROM nodes n CROSS JOIN generate_series(0, 7) i ORDER BY n.id, i""",
        # Whole-node jobs back to back: job k on node n covers [first + k·len, first + (k+1)·len), len = 4..12 h;
        # every tenth slot is left empty.
        """CREATE TEMPORARY TABLE bench_slots AS
           SELECT n.id AS node_id, n.rn, k, 4 + n.rn % 9 AS len,
                  :first + k * (4 + n.rn % 9) * 3600 AS lo, :first + (k + 1) * (4 + n.rn % 9) * 3600 AS hi
           FROM (SELECT id, row_number() OVER (ORDER BY id) - 1 AS rn FROM nodes) n
           CROSS JOIN generate_series(0, (:last - :first) / 14400 + 1) k
           WHERE :first + k * (4 + n.rn % 9) * 3600 <= :last AND (n.rn * 7 + k) % 10 <> 0""",
        """INSERT INTO jobs (scheduler, cluster, job_id, job_id_raw, "user", account, partition, name, state,
                             submit, start, "end", gpus, gpu_type, node_list, team_id, project)
           SELECT 'slurm', CASE WHEN s.rn < :nodes / 2 THEN 'orion' ELSE 'vega' END,
                  (100000 + s.rn * 1000 + s.k)::text, (100000 + s.rn * 1000 + s.k)::text,
                  format('user-%s', (s.rn * 3 + s.k) % 40), format('acct-%s', (s.rn + s.k) % :teams),
                  nd.partition, 'train', CASE WHEN s.hi > :now THEN 'RUNNING' ELSE 'COMPLETED' END,
                  s.lo - 60, s.lo, CASE WHEN s.hi > :now THEN NULL ELSE s.hi END, 8, 'h100', nd.hostname,
                  t.id, NULL
           FROM bench_slots s JOIN nodes nd ON nd.id = s.node_id
           JOIN teams t ON t.name = format('team-%s', lpad(((s.rn + s.k) % :teams)::text, 2, '0'))""",
        """INSERT INTO allocations (job_pk, gpu_id, start, "end", share_num, share_den)
           SELECT j.id, g.id, j.start, j."end", 1, 1
           FROM jobs j JOIN nodes nd ON nd.hostname = j.node_list JOIN gpus g ON g.node_id = nd.id""",
        # One ledger row per GPU and hour: the job of the node's slot holding the hour, or __unallocated__.
        """INSERT INTO ledger (hour, gpu_id, job_pk, team_id, seconds, used_gpu_seconds, sample_count, energy_joules,
                               allocated_cost, used_cost, idle_cost, energy_cost, currency, pricing_model)
           SELECT h.hour, g.id, j.id, COALESCE(j.team_id, u.id), 3600,
                  CASE WHEN j.id IS NULL THEN 0 ELSE 36 * x.pct END,
                  CASE WHEN j.id IS NULL THEN 0 ELSE 60 END, 1440000 + 36000 * x.pct,
                  CAST(:rate AS numeric),
                  CASE WHEN j.id IS NULL THEN 0 ELSE CAST(:rate AS numeric) * x.pct / 100 END,
                  CASE WHEN j.id IS NULL THEN 0 ELSE CAST(:rate AS numeric) * (100 - x.pct) / 100 END,
                  CAST(0.056 + 0.0014 * x.pct AS numeric(20, 6)), 'USD', 'on-demand'
           FROM generate_series(:first, :last, 3600) h(hour)
           CROSS JOIN (SELECT g.id, g.node_id, n.rn, 4 + n.rn % 9 AS len
                       FROM gpus g JOIN (SELECT id, row_number() OVER (ORDER BY id) - 1 AS rn FROM nodes) n
                       ON n.id = g.node_id) g
           JOIN teams u ON u.name = '__unallocated__'
           LEFT JOIN jobs j ON j.job_id_raw = (100000 + g.rn * 1000 + (h.hour - :first) / (g.len * 3600))::text
           CROSS JOIN LATERAL (
               SELECT CASE WHEN j.id % 7 = 0 THEN 0 ELSE (g.id * 31 + h.hour / 3600 * 17) % 101 END AS pct
           ) x""",
        """INSERT INTO budgets (team_id, month, project, amount, currency)
           SELECT id, :month, '', 120000 + 20000 * (id % 5), 'USD' FROM teams WHERE name LIKE 'team-%'""",
    ]
    with engine.begin() as connection:
        for statement in statements:
            connection.execute(text(statement), parameters)
        refresh_team_hours(connection, first_hour, last_hour + 3600)
        partitioned = connection.execute(
            text("SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass('gpu_samples')")
        ).scalar()
        if partitioned:
            for day in range(sample_from - sample_from % 86400, last_hour + 3600, 86400):
                name = datetime.fromtimestamp(day, UTC).strftime("gpu_samples_p%Y%m%d")
                connection.execute(
                    text(f'CREATE TABLE IF NOT EXISTS "{name}" PARTITION OF gpu_samples '
                         f"FOR VALUES FROM ({day}) TO ({day + 86400})")
                )  # fmt: skip
        connection.execute(
            text("""INSERT INTO gpu_samples (gpu_id, ts, utilization_ratio, power_watts, temperature_celsius,
                                             clocks_event_reasons, memory_used_bytes, energy_joules)
                    SELECT g.id, t, ((g.id * 13 + t / 60) % 101) / 100.0, 150 + (g.id * 7 + t / 60) % 550,
                           40 + (g.id + t / 600) % 45, CASE WHEN (g.id + t / 60) % 50 = 0 THEN 4 ELSE 0 END,
                           1073741824, 1000.0 * t
                    FROM gpus g CROSS JOIN generate_series(:sample_from, :now, 60) t"""),
            parameters,
        )
        connection.execute(text("ANALYZE"))
        counts = {
            table: int(connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())  # noqa: S608
            for table in ("nodes", "gpus", "jobs", "allocations", "ledger", "budgets", "gpu_samples")
        }
    return counts


def reset(url: str) -> Engine:
    """Drop and recreate the ``public`` schema at ``url``, migrate it; returns its engine."""
    engine = make_engine(url)
    with engine.begin() as connection:
        connection.execute(text("DROP SCHEMA public CASCADE"))
        connection.execute(text("CREATE SCHEMA public"))
    engine.dispose()
    engine = make_engine(url)
    upgrade(engine)
    return engine


# Records every change of Streamlit's script state (rerunRequested / running / notRunning) with its time since
# navigation start. A run short enough to end before the frontend renders goes from rerunRequested straight to
# notRunning: "running" never reaches the page, so either state marks a run that has begun.
_STATE_RECORDER = """
window.__scriptStates = [];
new MutationObserver(records => {
    const now = performance.now();
    const states = window.__scriptStates;
    const push = state => {
        if (state && (!states.length || states[states.length - 1][1] !== state)) states.push([now, state]);
    };
    for (const record of records) {
        if (record.type !== "attributes" || record.target.getAttribute("data-testid") !== "stApp") continue;
        push(record.oldValue);  // a state the batch went through (a fast run may start and end in one batch)
    }
    const app = document.querySelector('[data-testid="stApp"]');
    push(app && app.getAttribute("data-test-script-state"));
}).observe(document, {
    subtree: true, childList: true, attributes: true, attributeOldValue: true,
    attributeFilter: ["data-test-script-state"],
});
"""
_FINISHED_SINCE = """since => {
    const states = window.__scriptStates.filter(s => s[0] >= since);
    return states.some(s => s[1] === "running" || s[1] === "rerunRequested")
        && states[states.length - 1][1] === "notRunning"
        && document.querySelector('[data-testid="stDataFrame"]') !== null;
}"""


def _finished(tab: Page, since: float) -> float:
    """Wait until a script run that began after ``since`` (ms since navigation) has finished and a table is on
    screen; returns when it finished (ms since navigation)."""
    tab.wait_for_function(_FINISHED_SINCE, arg=since, timeout=120_000, polling=20)
    if tab.locator('[data-testid="stException"]').count():
        raise RuntimeError(f"{tab.url}: {tab.locator('[data-testid=stException]').first.inner_text()}")
    return float(tab.evaluate("window.__scriptStates[window.__scriptStates.length - 1][0]"))


def _load(context: BrowserContext, url: str) -> tuple[Page, float]:
    """Open ``url`` in a new tab; (the tab, seconds from navigation until its script finished)."""
    tab = context.new_page()
    tab.add_init_script(_STATE_RECORDER)
    tab.goto(url)
    return tab, _finished(tab, 0.0) / 1000


_STARTED_SINCE = """since => window.__scriptStates.some(
    s => s[0] >= since && (s[1] === "running" || s[1] === "rerunRequested"))"""


def _rerun(tab: Page) -> float:
    """Seconds from asking the open page to run again ("r", Streamlit's rerun key, pressed outside any input) until
    it has finished. A key press the page missed (it may still be settling) is repeated, timed from the last."""
    for _ in range(5):
        tab.locator("h1").first.click()
        since = float(tab.evaluate("performance.now()"))
        tab.keyboard.press("r")
        with contextlib.suppress(PlaywrightTimeoutError):
            tab.wait_for_function(_STARTED_SINCE, arg=since, timeout=10_000, polling=20)
            return (_finished(tab, since) - since) / 1000
    raise RuntimeError(f"{tab.url} did not rerun")


@contextmanager
def dashboard(url: str) -> Iterator[str]:
    """``gpu-finops dashboard`` on a free port of 127.0.0.1 on the database at ``url``; yields its base URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    env = {k: v for k, v in os.environ.items() if k != "FINOPS_PROMETHEUS_URL"} | {"FINOPS_DATABASE_URL": url}
    process = subprocess.Popen(
        [sys.executable, "-m", "finops.cli", "dashboard", "--port", str(port)],
        env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{base}/_stcore/health").status_code == 200:
                    break
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("the dashboard did not start")
            time.sleep(0.3)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)


@dataclass(slots=True)
class Timing:
    """Seconds, for one page and query string on its own server: the Prices page loaded and rerun (no ledger
    read: the frontend's and Streamlit's own time); the page loaded cold (new tab, empty caches) and rerun in its
    tab once the caches have expired (cold, without the frontend's load); loaded warm in new tabs and rerun warm
    in its tab (one figure per run)."""

    baseline: float = 0.0
    baseline_reruns: list[float] = field(default_factory=list)
    cold_load: float = 0.0
    cold_rerun: float = 0.0
    warm_loads: list[float] = field(default_factory=list)
    warm_reruns: list[float] = field(default_factory=list)


def time_pages(database: str, browser: Browser, runs: int) -> list[Timing]:
    """Time every case of :data:`CASES`, each on its own server (so that no case finds another's results cached)."""
    timings = [Timing() for _ in CASES]
    tabs: list[Page] = []
    with ExitStack() as stack:
        bases = [stack.enter_context(dashboard(database)) for _ in CASES]
        context = browser.new_context()
        stack.callback(context.close)
        for timing, base, (_, path, params) in zip(timings, bases, CASES, strict=True):
            url = f"{base}/{path}" + ("?" + "&".join(f"{k}={v}" for k, v in params.items()) if params else "")
            for _ in range(2):  # the first load warms the browser's cache and the server's imports
                tab, timing.baseline = _load(context, f"{base}/prices")
            timing.baseline_reruns = [_rerun(tab) for _ in range(runs)]
            tab.close()
            tab, timing.cold_load = _load(context, url)
            tabs.append(tab)
            for _ in range(runs):
                other, seconds = _load(context, url)
                timing.warm_loads.append(seconds)
                other.close()
            timing.warm_reruns = [_rerun(tab) for _ in range(runs)]
        time.sleep(TTL_SECONDS + 2)  # every cached result expires
        for timing, tab in zip(timings, tabs, strict=True):
            timing.cold_rerun = _rerun(tab)
    return timings


def time_queries(url: str, now: datetime) -> None:
    """The query functions behind Overview and Teams, each timed once on a new engine (no Streamlit)."""
    from finops.analysis.dashboard_queries import ledger_cube, month_overview
    from finops.analysis.report import cost_report
    from finops.timeutil import month_start

    engine = make_engine(url)
    start = month_start(now)
    end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    at = now.replace(second=0, microsecond=0)
    calls = {
        "ledger_cube, month to date (Overview, Teams)": lambda s: ledger_cube(s, start, end),
        "ledger_cube, 30 days": lambda s: ledger_cube(s, end - timedelta(days=30), end),
        "ledger_cube, month to date, team-03": lambda s: ledger_cube(s, start, end, team="team-03"),
        "month_overview (month spend, forecast, budgets)": lambda s: month_overview(s, at),
        "for comparison: cost_report by team, month": lambda s: cost_report(s, start, end, "team"),
        "for comparison: cost_report by job, month": lambda s: cost_report(s, start, end, "job"),
    }
    with session_factory(engine)() as session:
        session.execute(text("SELECT 1"))
        for name, call in calls.items():
            began = time.perf_counter()
            call(session)
            print(f"  {name:<50} {(time.perf_counter() - began) * 1000:6.0f} ms")
    engine.dispose()


def explain(engine: Engine, now: datetime) -> None:
    """EXPLAIN ANALYZE of the ledger queries the Overview runs (month to date, no filter)."""
    from sqlalchemy import event

    from finops.analysis.dashboard_queries import ledger_cube, month_overview
    from finops.timeutil import month_start

    start = month_start(now)
    end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    captured: list[tuple[str, Any]] = []

    def capture(conn: object, cursor: object, statement: str, parameters: Any, *_: object) -> None:
        if "ledger" in statement and statement.lstrip().upper().startswith("SELECT"):
            captured.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", capture)
    try:
        with session_factory(engine)() as session:
            ledger_cube(session, start, end)
            month_overview(session, now.replace(second=0, microsecond=0))
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    with engine.connect() as connection:
        raw = connection.connection.dbapi_connection
        assert raw is not None
        for statement, parameters in captured:
            cursor = raw.cursor()
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, parameters)
            print("\n".join(row[0] for row in cursor.fetchall()), end="\n\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url", nargs="?", default=DEFAULT_URL)
    parser.add_argument("--nodes", type=int, default=128)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--reuse", action="store_true", help="keep the data of an earlier run if there is some")
    parser.add_argument("--explain", action="store_true", help="print EXPLAIN ANALYZE of the report queries")
    args = parser.parse_args()
    now = datetime.now(UTC)
    engine = make_engine(args.url)
    reuse = False
    if args.reuse:
        with engine.connect() as connection:
            has = connection.execute(text("SELECT to_regclass('ledger') IS NOT NULL")).scalar()
            reuse = bool(has) and bool(connection.execute(text("SELECT EXISTS (SELECT 1 FROM ledger)")).scalar())
        if reuse:
            upgrade(engine)
    if not reuse:
        engine.dispose()
        engine = reset(args.url)
        began = time.perf_counter()
        counts = generate(engine, args.nodes, args.days, now)
        print(
            f"generated in {time.perf_counter() - began:.1f} s: " + ", ".join(f"{k} {v:,}" for k, v in counts.items())
        )
    if args.explain:
        explain(engine, now)
    engine.dispose()
    print("query functions:")
    time_queries(args.url, now)
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    before = os.getloadavg()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            timings = time_pages(args.url, browser, args.runs)
        finally:
            browser.close()
    after = os.getloadavg()
    print(
        f"load average (1, 5, 15 min) before the browser timings {', '.join(f'{x:.2f}' for x in before)}, "
        f"after {', '.join(f'{x:.2f}' for x in after)} ({os.cpu_count()} CPUs)"
    )
    print(f"browser, medians of {args.runs} warm runs; a load includes the frontend's own (the Prices page's):")
    print(
        f"{'page':<13} {'URL':<15} {'cold: rerun':>11} {'load':>8} {'warm: rerun':>12} {'load':>8}"
        f" {'Prices: rerun':>14} {'load':>8}"
    )
    for (title, _, params), timing in zip(CASES, timings, strict=True):
        query = "?" + "&".join(f"{k}={v}" for k, v in params.items()) if params else "(default)"
        print(
            f"{title:<13} {query:<15} {timing.cold_rerun * 1000:8.0f} ms {timing.cold_load * 1000:5.0f} ms "
            f"{statistics.median(timing.warm_reruns) * 1000:9.0f} ms "
            f"{statistics.median(timing.warm_loads) * 1000:5.0f} ms "
            f"{statistics.median(timing.baseline_reruns) * 1000:11.0f} ms {timing.baseline * 1000:5.0f} ms"
        )
    print(f"goal: cold ≤ {COLD_GOAL_SECONDS * 1000:.0f} ms, warm ≤ {WARM_GOAL_SECONDS * 1000:.0f} ms")


if __name__ == "__main__":
    main()
