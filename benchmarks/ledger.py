"""Ledger build and month report at cluster scale on PostgreSQL: a month of 1,024 H100s read every minute.

Usage::

    .venv/bin/python benchmarks/ledger.py [DATABASE_URL] [--nodes 128] [--days 30] [--report-runs 7]
        [--keep | --reuse]

``DATABASE_URL`` defaults to ``postgresql+psycopg://postgres@127.0.0.1:5432/test_e``. Its schema is dropped and
migrated afresh (``finops.db.engine.downgrade(engine, "base")`` then ``upgrade``) unless ``--reuse`` finds the data of
an earlier ``--keep`` run. The schema is dropped again at the end unless ``--keep``: the full month is ~44 M
readings, several GB on disk. Prints figures; asserts nothing about time.

Workload, generated in SQL (``generate_series``, ``INSERT … SELECT``), deterministic apart from job lengths:

- ``--nodes`` nodes × 8 "NVIDIA H100 80GB HBM3" GPUs in service from 2026-10-01T00:00Z, nodes in four Slurm
  partitions billed on-demand (the default), reserved, spot and on-prem through pricing rules;
- jobs on "lanes" of GPUs that run one job after another with random lengths (30 % 5 min–2 h, 45 % 2 h–1 day,
  25 % 1–4 days) and random idle gaps (none for 40 %, else up to 4 h): multi-node lanes of 4 whole nodes,
  whole-node lanes, lanes of 4, 2, 1 and 1 GPUs, single-GPU lanes, on two nodes MIG lanes (3g.40gb, 3g.40gb
  and 1g.10gb on every GPU: shares 3/7, 3/7, 1/7) and on two nodes two time-sliced lanes per GPU (overlapping
  whole-GPU allocations); 12 teams plus ``__unmapped__`` jobs; jobs that outlast the month are still running;
- one reading per GPU per minute: utilisation in steps of 1 % (idle stretches at 0-3 %), power, an energy
  counter that grows by 14-34 kJ a minute and is reset once on one GPU in 128, and a 3-hour collector outage
  on some nodes.

For the waste reasons (docs/waste-reasons.md), not part of the readings: each node's fabric and storage rates per hour
(``node_io_hours``: InfiniBand, Lustre, NFS and disk; the storage rates high for one node-hour in 20, InfiniBand for
one in 30, background otherwise) and one job in 20 named as an Open OnDemand Jupyter session. The readings have no
clocks-event reasons and no memory held while idle, so no episode is throttled or a stalled process.

Timed, each printed beside its goal: the data generation; ``finops.ledger.rollup.rollup`` of the whole month into an
empty ledger (cold); ``finops.analysis.idle.rejudge_idle`` over the hours it rebuilt (what a month-old backfill
costs besides the ledger), with the part of it spent judging the episodes' waste reasons
(``finops.analysis.waste_facts.judge_episodes``) and the episodes by reason; the idle cost by reason of the month
(``finops.savings.waste_costs.waste_report``: every job-held GPU-hour given a reason); a re-rollup after one day is
marked dirty (incremental);
``finops.analysis.report.cost_report`` of the month by team (median of ``--report-runs`` warm runs, after ``VACUUM
ANALYZE ledger`` as autovacuum would run it after the bulk load); ``finops.analysis.budgets.budget_status``;
``finops.savings.commitments.commitment_report`` of the month (the demand series of the rented GPUs read from the
ledger, the least-cost commitment, spot and on-prem figures; median of ``--report-runs`` warm runs). The machine's load
average is printed with the figures: they are wall-clock times.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, make_url, text

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import finops.analysis.idle  # noqa: E402
from finops.analysis.budgets import budget_status  # noqa: E402
from finops.analysis.idle import IdlePolicy, rejudge_idle  # noqa: E402
from finops.analysis.report import cost_report  # noqa: E402
from finops.db.engine import downgrade, make_engine, session_factory, upgrade  # noqa: E402
from finops.ledger.rollup import rollup  # noqa: E402
from finops.pricing.catalog import (  # noqa: E402
    Pricing,
    PricingModel,
    load_catalog,
)
from finops.savings.commitments import commitment_report  # noqa: E402
from finops.savings.waste_costs import waste_report  # noqa: E402
from finops.timeutil import HOUR, to_epoch  # noqa: E402

DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test_e"
MODEL = "NVIDIA H100 80GB HBM3"
MONTH = datetime(2026, 10, 1, tzinfo=UTC)
GPUS_PER_NODE = 8
TEAMS = 12
ROLLUP_GOAL_SECONDS = 60.0
REPORT_GOAL_SECONDS = 0.1
PARTITIONS = (
    ("batch", None),
    ("reserved", PricingModel.RESERVED),
    ("spot", PricingModel.SPOT),
    ("onprem", PricingModel.ON_PREM),
)


def lanes(nodes: int) -> list[tuple[int, int, int, int, int, int, str | None]]:
    """``(first node, nodes, first GPU index, GPUs, share numerator, denominator, MIG profile)`` per lane.

    Nodes in the first quarter form multi-node lanes of 4 nodes (whole-node lanes when fewer than 4 are left),
    the second quarter whole-node lanes, the third lanes of 4, 2, 1 and 1 GPUs, the rest single-GPU lanes; the
    last four nodes are two MIG nodes and two time-sliced nodes (when there are at least 8 nodes).
    """
    special = 4 if nodes >= 8 else 0
    plain = nodes - special
    quarter = plain // 4
    result: list[tuple[int, int, int, int, int, int, str | None]] = []
    node = 0
    while node < quarter:
        width = min(4, quarter - node)
        result.append((node, width, 0, GPUS_PER_NODE, 1, 1, None))
        node += width
    for node in range(quarter, 2 * quarter):
        result.append((node, 1, 0, GPUS_PER_NODE, 1, 1, None))
    for node in range(2 * quarter, 3 * quarter):
        result += [(node, 1, first, width, 1, 1, None) for first, width in ((0, 4), (4, 2), (6, 1), (7, 1))]
    for node in range(3 * quarter, plain):
        result += [(node, 1, index, 1, 1, 1, None) for index in range(GPUS_PER_NODE)]
    if special:
        for node in (plain, plain + 1):
            for index in range(GPUS_PER_NODE):
                result += [(node, 1, index, 1, 3, 7, "3g.40gb"), (node, 1, index, 1, 3, 7, "3g.40gb")]
                result.append((node, 1, index, 1, 1, 7, "1g.10gb"))
        for node in (plain + 2, plain + 3):
            result += [(node, 1, index, 1, 1, 1, None) for index in range(GPUS_PER_NODE) for _ in range(2)]
    return result


def _exec(connection: Connection, sql: str, **params: object) -> int:
    return connection.execute(text(sql), params).rowcount


def _ensure_sample_partitions(connection: Connection, start: int, end: int) -> None:
    """Create the day partitions of [start, end) when ``gpu_samples`` is partitioned by day (migration 0003)."""
    try:
        from finops.ingest.partitions import create_partitions, is_partitioned
    except ImportError:  # a tree without day partitions: one plain table
        return
    if is_partitioned(connection):
        create_partitions(connection, range(start, end, 24 * HOUR))


def generate(engine: Engine, nodes: int, days: int) -> dict[str, float]:
    """Create the workload (module docstring) in the migrated, empty database; returns seconds per step."""
    start, end = to_epoch(MONTH), to_epoch(MONTH + timedelta(days=days))
    timings: dict[str, float] = {}
    with engine.begin() as c:
        began = time.perf_counter()
        _exec(c, "SELECT setseed(0.42)")
        _exec(
            c,
            "INSERT INTO teams (name) SELECT format('team-%s', lpad(i::text, 2, '0')) FROM generate_series(1, :n) i",
            n=TEAMS,
        )
        _exec(c, "INSERT INTO teams (name) VALUES ('__unmapped__'), ('__unallocated__')")
        partitions = [name for name, _ in PARTITIONS]
        _exec(
            c,
            """INSERT INTO nodes (hostname, partition)
                    SELECT format('bench-%s', lpad(n::text, 3, '0')), (CAST(:partitions AS text[]))[1 + n % 4]
                    FROM generate_series(0, :nodes - 1) n""",
            nodes=nodes,
            partitions=partitions,
        )
        for name, model in PARTITIONS:
            if model is not None:
                _exec(
                    c,
                    "INSERT INTO pricing_rules (selector, key, value, pricing_model) VALUES ('partition', '', :v, :m)",
                    v=name,
                    m=str(model),
                )
        _exec(
            c,
            """INSERT INTO gpus (uuid, node_id, gpu_index, model, memory_total_bytes, in_service_from)
                    SELECT format('GPU-bench-%s-%s', n.id, i), n.id, i, :model, 85899345920, :start
                    FROM nodes n CROSS JOIN generate_series(0, 7) i ORDER BY n.id, i""",
            model=MODEL,
            start=start,
        )
        _exec(
            c,
            """CREATE TEMPORARY TABLE bench_lanes (lane int PRIMARY KEY, first_node int, node_count int,
                    first_index int, gpu_count int, share_num int, share_den int, mig_profile text) ON COMMIT DROP""",
        )
        c.execute(
            text("INSERT INTO bench_lanes VALUES (:lane, :n0, :nn, :i0, :ni, :sn, :sd, :mig)"),
            [
                dict(zip(("lane", "n0", "nn", "i0", "ni", "sn", "sd", "mig"), (i, *lane), strict=True))
                for i, lane in enumerate(lanes(nodes))
            ],
        )
        # Candidate jobs per lane with random length and leading gap; a job starts after the lengths and gaps
        # before it. Those starting in the month are kept; those ending after it are still running.
        _exec(
            c,
            """
            CREATE TEMPORARY TABLE bench_jobs ON COMMIT DROP AS
            WITH draws AS (
                SELECT lane, k, random() AS r_kind, random() AS r_len, random() AS r_gap, random() AS r_gap_len,
                       random() AS r_team
                FROM bench_lanes CROSS JOIN generate_series(1, 400) k
            ), lengths AS (
                SELECT lane, k, r_team,
                       CASE WHEN r_kind < 0.30 THEN 300 + floor(r_len * 6900)
                            WHEN r_kind < 0.75 THEN 7200 + floor(r_len * 79200)
                            ELSE 86400 + floor(r_len * 259200) END::bigint AS length,
                       CASE WHEN r_gap < 0.40 THEN 0 ELSE 60 + floor(r_gap_len * 14340) END::bigint AS gap
                FROM draws
            ), placed AS (
                SELECT lane, k, r_team, length,
                       :start + SUM(length + gap) OVER (PARTITION BY lane ORDER BY k) - length AS job_start
                FROM lengths
            )
            SELECT lane, k, job_start, CASE WHEN job_start + length < :end THEN job_start + length END AS job_end,
                   CASE WHEN r_team < 0.04 THEN '__unmapped__'
                        ELSE format('team-%s', lpad((1 + (lane * 7 + k) % :teams)::text, 2, '0')) END AS team
            FROM placed WHERE job_start < :end""",
            start=start,
            end=end,
            teams=TEAMS,
        )
        _exec(
            c,
            """
            INSERT INTO jobs (scheduler, cluster, job_id, job_id_raw, "user", account, partition, name, state, submit,
                              start, "end", gpus, gpu_type, node_list, team_id)
            SELECT 'slurm', 'bench', format('%s_%s', b.lane, b.k), format('%s_%s', b.lane, b.k),
                   format('user%s', (b.lane + b.k) % 50), t.name, n.partition, 'train',
                   CASE WHEN b.job_end IS NULL THEN 'RUNNING' ELSE 'COMPLETED' END, b.job_start - 60, b.job_start,
                   b.job_end, l.node_count * l.gpu_count, l.mig_profile,
                   (SELECT string_agg(n2.hostname, ',' ORDER BY n2.id) FROM nodes n2
                     WHERE n2.id BETWEEN n.id AND n.id + l.node_count - 1), t.id
            FROM bench_jobs b JOIN bench_lanes l ON l.lane = b.lane JOIN teams t ON t.name = b.team
            JOIN nodes n ON n.hostname = format('bench-%s', lpad(l.first_node::text, 3, '0'))
            ORDER BY b.job_start, b.lane""",
        )
        _exec(
            c,
            """
            INSERT INTO allocations (job_pk, gpu_id, start, "end", share_num, share_den, mig_profile)
            SELECT j.id, g.id, j.start, j."end", l.share_num, l.share_den, l.mig_profile
            FROM bench_jobs b JOIN bench_lanes l ON l.lane = b.lane
            JOIN jobs j ON j.cluster = 'bench' AND j.job_id_raw = format('%s_%s', b.lane, b.k)
            JOIN nodes n ON n.hostname BETWEEN format('bench-%s', lpad(l.first_node::text, 3, '0'))
                                           AND format('bench-%s', lpad((l.first_node + l.node_count - 1)::text, 3, '0'))
            JOIN gpus g ON g.node_id = n.id AND g.gpu_index BETWEEN l.first_index AND l.first_index + l.gpu_count - 1
            ORDER BY j.start, g.id""",
        )
        _exec(
            c,
            "INSERT INTO budgets (team_id, month, project, amount, currency) "
            "SELECT id, :month, '', 250000, 'USD' FROM teams WHERE name LIKE 'team-%'",
            month=start,
        )
        timings["jobs"] = time.perf_counter() - began
    with engine.begin() as c:
        began = time.perf_counter()
        _ensure_sample_partitions(c, start, end)
        # Minute-major, as collectors deliver them. Each node reads at its own second of the minute.
        _exec(
            c,
            """
            INSERT INTO gpu_samples (gpu_id, ts, utilization_ratio, memory_used_bytes, power_watts, energy_joules)
            SELECT g.id, :start + m * 60 + g.node_id % 60, u, CASE WHEN u > 0.03 THEN 64424509440 ELSE 0 END,
                   (e_next - e) / 60.0, e
            FROM generate_series(0, :minutes - 1) m CROSS JOIN LATERAL (
                SELECT id, node_id,
                       CASE WHEN (id * 2654435761 + (m / 120) * 40503) % 100 < 15
                            THEN ((id + m) % 4) / 100.0
                            ELSE (35 + (id * 31 + m * 17) % 66) / 100.0 END AS u,
                       CASE WHEN id % 128 = 3 AND m >= (id * 997) % :minutes
                            THEN 24000.0 * (m - (id * 997) % :minutes) + 100.0 * ((m * 37 + id) % 100)
                            ELSE 1e9 + id * 1e6 + 24000.0 * m + 100.0 * ((m * 37 + id) % 100) END AS e,
                       1e9 + id * 1e6 + 24000.0 * (m + 1) + 100.0 * (((m + 1) * 37 + id) % 100) AS e_next
                FROM gpus
            ) g
            WHERE NOT (g.node_id % 50 = 7 AND m BETWEEN 14400 AND 14579)""",
            start=start,
            minutes=days * 1440,
        )
        timings["samples"] = time.perf_counter() - began
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        began = time.perf_counter()
        _exec(c, "VACUUM ANALYZE")
        timings["analyze"] = time.perf_counter() - began
    return timings


def reason_inputs(engine: Engine, days: int) -> float:
    """Replace the nodes' hourly fabric and storage rates and name one job in 20 as a Jupyter session (module
    docstring); returns the seconds it took."""
    start = to_epoch(MONTH)
    began = time.perf_counter()
    with engine.begin() as c:
        _exec(c, "DELETE FROM node_io_hours")
        # Per node-hour one draw for storage, one for InfiniBand; rates in bytes per second, mean and peak.
        _exec(
            c,
            """
            INSERT INTO node_io_hours (node_id, hour, kind, readings, rate_sum, rate_max, last_ts)
            SELECT n.id, h, k.kind, 360, 360 * k.rate, 1.6 * k.rate, h + 3590
            FROM nodes n CROSS JOIN generate_series(:start, :start + (:days * 24 - 1) * 3600, 3600) h
            CROSS JOIN LATERAL (SELECT random() AS r_storage, random() AS r_fabric, random() AS r_level
                                WHERE n.id IS NOT NULL AND h IS NOT NULL) d
            CROSS JOIN LATERAL (VALUES
                ('lustre_read', CASE WHEN d.r_storage < 0.05 THEN 2e8 + d.r_level * 2.8e9 ELSE d.r_level * 5e6 END),
                ('nfs_read', d.r_level * 2e6),
                ('disk_read', d.r_level * 1e7),
                ('infiniband_received',
                 CASE WHEN d.r_fabric < 0.033 THEN 2e8 + d.r_level * 5e9 ELSE d.r_level * 1e6 END),
                ('infiniband_transmitted', d.r_level * 1e6)
            ) AS k(kind, rate)""",
            start=start,
            days=days,
        )
        _exec(c, "UPDATE jobs SET name = CASE WHEN id % 20 = 0 THEN 'sys/dashboard/sys/jupyter' ELSE 'train' END")
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        _exec(c, "VACUUM ANALYZE node_io_hours")
    return time.perf_counter() - began


def counts(engine: Engine) -> dict[str, int]:
    """Row counts of the tables the benchmark fills."""
    queries = {
        "nodes": "SELECT count(*) FROM nodes",
        "gpus": "SELECT count(*) FROM gpus",
        "jobs": "SELECT count(*) FROM jobs",
        "running jobs": 'SELECT count(*) FROM jobs WHERE "end" IS NULL',
        "allocations": "SELECT count(*) FROM allocations",
        "MIG allocations": "SELECT count(*) FROM allocations WHERE share_num <> share_den",
        "time-sliced allocations": """SELECT count(*) FROM allocations a WHERE share_num = share_den AND EXISTS (
            SELECT 1 FROM allocations b WHERE b.gpu_id = a.gpu_id AND b.id <> a.id AND b.start < coalesce(a."end", 1e12)
            AND coalesce(b."end", 1e12) > a.start)""",
        "gpu_samples": "SELECT count(*) FROM gpu_samples",
        "ledger": "SELECT count(*) FROM ledger",
    }
    with engine.connect() as c:
        return {name: int(c.scalar(text(sql)) or 0) for name, sql in queries.items()}


def _data_present(engine: Engine, nodes: int, days: int) -> bool:
    try:
        with engine.connect() as c:
            found = c.execute(
                text(
                    "SELECT count(*), max(ts) FROM gpus LEFT JOIN LATERAL (SELECT ts FROM gpu_samples s "
                    "WHERE s.gpu_id = gpus.id ORDER BY ts DESC LIMIT 1) last ON true"
                )
            ).one()
    except Exception:  # no schema yet
        return False
    return (
        found[0] == nodes * GPUS_PER_NODE and found[1] is not None and found[1] >= to_epoch(MONTH) + (days - 1) * 86400
    )


def _timed_judging() -> list[float]:
    """Count the seconds :func:`finops.analysis.waste_facts.judge_episodes` takes inside idle detection from now on:
    the returned list's one element grows by each call's time."""
    spent = [0.0]
    judge = finops.analysis.idle.judge_episodes

    def timed(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return judge(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - began

    finops.analysis.idle.judge_episodes = timed  # type: ignore[assignment]
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("database_url", nargs="?", default=DEFAULT_URL, help=f"PostgreSQL URL (default {DEFAULT_URL})")
    parser.add_argument("--nodes", type=int, default=128, help="8-GPU nodes (default 128: 1,024 GPUs)")
    parser.add_argument("--days", type=int, default=30, help="days of 1-minute readings from 2026-10-01 (default 30)")
    parser.add_argument("--report-runs", type=int, default=7, help="warm runs of the month report (median)")
    keep = parser.add_mutually_exclusive_group()
    keep.add_argument("--keep", action="store_true", help="leave the data in the database at the end")
    keep.add_argument(
        "--reuse", action="store_true", help="reuse the data an earlier --keep run left, if complete, and keep it"
    )
    keep.add_argument("--generate-only", action="store_true", help="generate the data, keep it and stop")
    args = parser.parse_args()
    if make_url(args.database_url).get_backend_name() != "postgresql":
        parser.error("the workload is generated with PostgreSQL's generate_series: give a PostgreSQL URL")

    engine = make_engine(args.database_url)
    start, until = MONTH, MONTH + timedelta(days=args.days)
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    sessions = session_factory(engine)
    try:
        if args.reuse and _data_present(engine, args.nodes, args.days):
            print("reusing the data of an earlier --keep run; ledger and metering state emptied")
            upgrade(engine)
            with engine.begin() as c:
                _exec(c, "DELETE FROM ledger_team_hours")
                _exec(c, "DELETE FROM ledger")
                _exec(c, "DELETE FROM ledger_dirty_hours")
                for kept in ("metering_cursors", "gpu_hour_metering", "metered_holdings", "reading_arrivals"):
                    _exec(c, f"DELETE FROM {kept}")  # noqa: S608 - the names above; the next rollup reads every reading
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
                _exec(c, "VACUUM ANALYZE ledger")
            generation = None
        else:
            downgrade(engine, "base")
            upgrade(engine)
            generation = generate(engine, args.nodes, args.days)
        rows = counts(engine)
        gpu_hours = rows["gpus"] * args.days * 24
        print(
            f"workload: {rows['nodes']} nodes × {GPUS_PER_NODE} {MODEL}, {args.days} days from {start:%Y-%m-%d}: "
            f"{gpu_hours:,} GPU-hours, {rows['gpu_samples']:,} readings (1/min), {rows['jobs']:,} jobs "
            f"({rows['running jobs']:,} running at the end), {rows['allocations']:,} allocations "
            f"({rows['MIG allocations']:,} MIG shares, {rows['time-sliced allocations']:,} time-sliced)"
        )
        if generation is not None:
            total = sum(generation.values())
            print(
                f"data generation: {total:8.1f} s  (teams, nodes, jobs, allocations {generation['jobs']:.1f} s; "
                f"readings {generation['samples']:.1f} s; VACUUM ANALYZE {generation['analyze']:.1f} s)"
            )
        if args.generate_only:
            return
        print(f"waste reason inputs (node rates per hour, job names): {reason_inputs(engine, args.days):.1f} s")

        load_before = os.getloadavg()[0]
        began = time.perf_counter()
        hours: list[int] = []
        with sessions.begin() as session:
            rebuilt = rollup(session, pricing, to_epoch(until), rebuilt=hours).hours
        cold = time.perf_counter() - began
        ledger_rows = counts(engine)["ledger"]
        print(
            f"rollup, whole month, cold: {cold:8.1f} s  goal ≤ {ROLLUP_GOAL_SECONDS:.0f} s  "
            f"ratio {cold / ROLLUP_GOAL_SECONDS:.2f}  ({rebuilt:,} hours, {ledger_rows:,} ledger rows, "
            f"{gpu_hours / cold:,.0f} GPU-hours/s)"
        )
        # The month is in the past: what a backfill of it costs besides the ledger is re-judging its idle episodes
        # over the hours rebuilt, as every scheduled rollup does (finops.service.scheduler.run_rollup).
        judging = _timed_judging()
        began = time.perf_counter()
        with sessions.begin() as session:
            episodes = rejudge_idle(session, hours, IdlePolicy(), pricing)
        idle_seconds = time.perf_counter() - began
        print(
            f"idle re-judged, whole month: {idle_seconds:6.1f} s  ({episodes:,} episodes; "
            f"{idle_seconds / cold:.2f} × the cold rollup), of which judging their waste reasons {judging[0]:.1f} s"
        )
        with engine.connect() as c:
            by_reason = c.execute(text("SELECT reason, count(*) FROM idle_episodes GROUP BY reason ORDER BY 2 DESC"))
            print("  episodes by reason: " + ", ".join(f"{reason} {n:,}" for reason, n in by_reason))
        began = time.perf_counter()
        with sessions() as session:
            waste = waste_report(session, start, until)
        waste_seconds = time.perf_counter() - began
        totals: dict[str, float] = {}
        for row in waste.rows:
            totals[row.reason] = totals.get(row.reason, 0.0) + float(row.cost)
        print(
            f"idle cost by reason, month: {waste_seconds:6.1f} s  ({len(waste.rows)} team-month-reason rows, "
            f"{len(waste.jobs):,} low-utilisation jobs; "
            + ", ".join(f"{reason} {cost:,.0f} USD" for reason, cost in sorted(totals.items(), key=lambda t: -t[1]))
            + ")"
        )
        # What autovacuum does soon after a bulk load; the report's plan depends on it. Not timed.
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
            _exec(c, "VACUUM ANALYZE ledger")

        day = to_epoch(start) + (args.days // 2) * 86400
        with sessions.begin() as session:
            session.execute(
                text("INSERT INTO ledger_dirty_hours (hour) SELECT generate_series(:a, :b, 3600)"),
                {"a": day, "b": day + 23 * HOUR},
            )
        began = time.perf_counter()
        with sessions.begin() as session:
            rebuilt = rollup(session, pricing, to_epoch(until)).hours
        incremental = time.perf_counter() - began
        print(
            f"rollup, one dirty day:     {incremental:8.2f} s  ({rebuilt} hours rebuilt: the day and the newest hour; "
            f"cold build ÷ {args.days} days = {cold / args.days:.2f} s)"
        )

        runs = []
        for _ in range(args.report_runs + 1):
            with sessions() as session:
                began = time.perf_counter()
                report = cost_report(session, start, until, "team")
                runs.append(time.perf_counter() - began)
        median = statistics.median(runs[1:])
        print(
            f"cost_report, month by team: {median * 1000:7.1f} ms  goal ≤ {REPORT_GOAL_SECONDS * 1000:.0f} ms  "
            f"ratio {median / REPORT_GOAL_SECONDS:.2f}  (median of {args.report_runs} warm runs, first "
            f"{runs[0] * 1000:.0f} ms; {len(report)} teams, total {sum(r.allocated_cost for r in report):,.2f} USD)"
        )

        with sessions() as session:
            began = time.perf_counter()
            statuses = budget_status(session, until - timedelta(seconds=1))
            budgets = time.perf_counter() - began
        print(f"budget_status, month:      {budgets * 1000:7.1f} ms  ({len(statuses)} budgets)")

        runs = []
        for _ in range(args.report_runs + 1):
            with sessions() as session:
                began = time.perf_counter()
                commitments = commitment_report(session, pricing.catalog, until, args.days)
                runs.append(time.perf_counter() - began)
        plans = ", ".join(
            f"{c.model} commit {c.best.quantity} of peak {c.demand.peak_gpus} over {c.demand.hours} h, saving "
            f"{c.best.saving_per_month:,.2f} USD/month at {c.best.utilisation or 0:.1%} utilisation"
            for c in commitments.commitments
        )
        print(
            f"commitment_report, month:  {statistics.median(runs[1:]) * 1000:7.1f} ms  (median of {args.report_runs} "
            f"warm runs, first {runs[0] * 1000:.0f} ms; {plans}; {len(commitments.on_prem)} on-prem model(s))"
        )
        print(f"load average (1 min) before the cold rollup {load_before:.1f}, now {os.getloadavg()[0]:.1f}, "
              f"on {os.cpu_count()} CPUs")  # fmt: skip
    finally:
        if not (args.keep or args.reuse or args.generate_only):
            downgrade(engine, "base")
        engine.dispose()


if __name__ == "__main__":
    main()
