"""The hourly cost ledger: one row per GPU × UTC hour × holder, rebuilt for hours marked dirty.

A rebuild of hours [h0, h1) runs in the database, in a few set-based statements over session-local temporary
tables, and applies :mod:`finops.ledger.costmodel` in Python only where a GPU-hour has to be split:

1. the in-service GPU-hours that have a price (rates from the Python price catalog, passed in as a small table);
2. their holdings: every allocation clipped to every GPU-hour it overlaps;
3. the GPU-hours to split: a partial in-service hour, a holding that covers only part of the hour, several
   holdings, a MIG share; a MIG share or overlapping holdings (time-slicing) make a GPU-hour *shared*;
4. the metering, one pass over the readings: utilisation and energy increments (a window function over the
   chunk's readings sorted by GPU and time) summed per GPU-hour and holding (per GPU-hour as a whole where it is
   shared), written by ``CREATE TEMPORARY TABLE … AS`` so that PostgreSQL's parallel workers can share the scan
   and the sort (the SELECT of an ``INSERT`` runs in one process);
5. the common GPU-hour — in service all hour and held all hour by one whole-GPU allocation, or by none — costed
   by one ``INSERT … SELECT`` with the cost model's formulas: exact ``NUMERIC`` with half-even rounding on
   PostgreSQL, integer micro-units on SQLite (whose float-to-text conversion is not the shortest round-trip
   one, so the two products with a float reading call :func:`finops.ledger.costmodel.used_cost` and
   :func:`finops.ledger.costmodel.energy_cost` as registered SQL functions);
6. the GPU-hours to split, by :func:`finops.ledger.costmodel.gpu_hour_costs` in Python.

Steps 5 and 6 write the chunk's rows to a work table; the ledger's rows of the chunk are then replaced by them
in one statement. On PostgreSQL a rollup of several chunks computes them on other connections, one per CPU up to
4, while its own session writes the chunk before (binary ``COPY`` from the helper's work table into the ledger):
the ledger is still written in the rollup's one transaction. Both costing paths write identical rows:
``sql_costing=False`` sends every GPU-hour through Python, which the tests compare with. Rebuilding an hour
deletes and rewrites its rows, so recomputing changes nothing.
"""

from __future__ import annotations

import logging
import os
import queue
from collections import defaultdict, deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from itertools import islice
from typing import Any

from sqlalchemy import Connection, column, delete, false, func, insert, select, table, text
from sqlalchemy.orm import Session

from finops.db.hours import mark_hours_dirty
from finops.db.models import UNALLOCATED_TEAM, DirtyHour, Gpu, Job, LedgerEntry
from finops.db.sqltypes import MONEY_SCALE, Money
from finops.jobs.placement import job_keys
from finops.jobs.teams import team_by_name
from finops.ledger import costmodel
from finops.ledger.job_utilization import job_utilization_by_gpu_hour
from finops.ledger.team_hours import refresh_team_hours
from finops.pricing.catalog import PriceCatalog, PriceNotFound, Pricing, PricingModel
from finops.pricing.rules import pricing_models_by_node
from finops.timeutil import HOUR, floor_hour, from_epoch, to_epoch

log = logging.getLogger(__name__)

CHUNK_HOURS = 24
ROLLUP_CONNECTIONS = min(os.cpu_count() or 1, 4)
"""Connections that compute chunks of a rollup at once on PostgreSQL (:func:`rollup`): one per CPU of the host
running the rollup, at most 4, which keeps them well within the engine's pool (5 + 10 connections, shared with
the API)."""
ROLLUP_LOCK_KEY = 0x6770_7566_5F6C_6467  # pg_advisory_xact_lock key serialising rollups ("gpuf_ldg")
ENERGY_LOOKBACK_SECONDS = HOUR
"""An energy counter increment counts only if the previous reading is at most this much older: the energy
over a longer gap (a collector down for hours) cannot be placed in an hour, so it is left out. The rule
does not depend on how the hours are cut into rebuilds."""

LEDGER_COLUMNS = (
    "hour", "gpu_id", "job_pk", "team_id", "seconds", "used_gpu_seconds", "sample_count", "energy_joules",
    "allocated_cost", "used_cost", "idle_cost", "energy_cost", "currency", "pricing_model",
)  # fmt: skip

# Session-local work tables of a rebuild (emptied at its start).
_TEMP_TABLES = {
    "tmp_ledger_rates": "model VARCHAR(128) NOT NULL, pricing_model VARCHAR(16) NOT NULL, hour BIGINT NOT NULL, "
    "capacity {money} NOT NULL, PRIMARY KEY (model, pricing_model, hour)",
    "tmp_ledger_node_models": "node_id INTEGER PRIMARY KEY, pricing_model VARCHAR(16) NOT NULL",
    "tmp_ledger_gpu_hours": "gpu_id INTEGER NOT NULL, hour BIGINT NOT NULL, lo BIGINT NOT NULL, hi BIGINT NOT NULL, "
    "model VARCHAR(128) NOT NULL, pricing_model VARCHAR(16) NOT NULL, PRIMARY KEY (gpu_id, hour)",
    "tmp_ledger_holdings": "gpu_id INTEGER NOT NULL, hour BIGINT NOT NULL, gpu_hour BIGINT NOT NULL, "
    "allocation_id INTEGER NOT NULL, "
    "job_pk INTEGER NOT NULL, team_id INTEGER NOT NULL, start BIGINT NOT NULL, stop BIGINT NOT NULL, "
    "share_num INTEGER NOT NULL, share_den INTEGER NOT NULL, shared INTEGER NOT NULL",
    "tmp_ledger_split": "gpu_id INTEGER NOT NULL, hour BIGINT NOT NULL, shared INTEGER NOT NULL, "
    "PRIMARY KEY (gpu_id, hour)",
    # The chunk's ledger rows: the ledger's own columns (a binary COPY moves them between connections).
    "tmp_ledger_rows": "{ledger_columns}",
}
# Created by the metering statement itself (CREATE … AS, which PostgreSQL can run with parallel workers; the
# SELECT of an INSERT it cannot): gpu_id, hour, allocation_id, samples, utilization_sum, energy_joules.
_METERING_TABLE = "tmp_ledger_metering"

# 1. In-service GPU-hours [lo, hi) of the chunk that have a rate.
_GPU_HOURS = text("""
WITH RECURSIVE hours (hour) AS (
    SELECT CAST(:h0 AS BIGINT) UNION ALL SELECT hour + 3600 FROM hours WHERE hour + 3600 < :end
)
INSERT INTO tmp_ledger_gpu_hours (gpu_id, hour, lo, hi, model, pricing_model)
SELECT g.id, h.hour,
       CASE WHEN g.in_service_from > h.hour THEN g.in_service_from ELSE h.hour END,
       CASE WHEN h.hour + 3600 < :end THEN h.hour + 3600 ELSE :end END,
       g.model, COALESCE(n.pricing_model, :default_model)
FROM gpus g CROSS JOIN hours h LEFT JOIN tmp_ledger_node_models n ON n.node_id = g.node_id
WHERE g.in_service_from < h.hour + 3600 AND g.in_service_from < :end
  AND EXISTS (SELECT 1 FROM tmp_ledger_rates r WHERE r.model = g.model
              AND r.pricing_model = COALESCE(n.pricing_model, :default_model) AND r.hour = h.hour)
""")

# 2. Holdings: allocations clipped to each GPU-hour [lo, hi) they overlap, with the GPU-hour as one key (gpu_id ×
# 2^32 + hour: one join column whose statistics make PostgreSQL hash the holdings, not the readings, when the
# readings are assigned to them in step 4). ``shared`` = 1 for every holding of a
# shared GPU-hour: one with a MIG share, or where a holding starts before an earlier one (by start, then
# allocation id) has stopped (time-slicing).
_HOLDINGS = text("""
INSERT INTO tmp_ledger_holdings (gpu_id, hour, gpu_hour, allocation_id, job_pk, team_id, start, stop, share_num,
                                 share_den, shared)
SELECT gpu_id, hour, gpu_id * 4294967296 + hour, allocation_id, job_pk, team_id, start, stop, share_num, share_den,
       MAX(CASE WHEN share_num <> share_den OR overlapping = 1 THEN 1 ELSE 0 END) OVER (PARTITION BY gpu_id, hour)
FROM (
    SELECT clipped.*,
           CASE WHEN MAX(stop) OVER (PARTITION BY gpu_id, hour ORDER BY start, allocation_id
                                     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) > start THEN 1 ELSE 0 END
               AS overlapping
    FROM (
        SELECT gh.gpu_id, gh.hour, a.id AS allocation_id, a.job_pk, j.team_id,
               CASE WHEN a.start > gh.lo THEN a.start ELSE gh.lo END AS start,
               CASE WHEN a."end" IS NULL OR a."end" > gh.hi THEN gh.hi ELSE a."end" END AS stop,
               a.share_num, a.share_den
        FROM allocations a
        JOIN jobs j ON j.id = a.job_pk
        JOIN tmp_ledger_gpu_hours gh
          ON gh.gpu_id = a.gpu_id AND gh.hi > a.start AND (a."end" IS NULL OR a."end" > gh.lo)
        WHERE a.start < :end AND (a."end" IS NULL OR a."end" > :h0)
    ) clipped
    WHERE stop > start
) ordered
""")

# 3. GPU-hours the Python cost model splits (all of them when :everything = 1): a partial in-service hour, or
# holdings other than one whole-GPU allocation all hour.
_SPLIT = text("""
INSERT INTO tmp_ledger_split (gpu_id, hour, shared)
SELECT gh.gpu_id, gh.hour, COALESCE(MAX(h.shared), 0)
FROM tmp_ledger_gpu_hours gh
LEFT JOIN tmp_ledger_holdings h ON h.gpu_id = gh.gpu_id AND h.hour = gh.hour
GROUP BY gh.gpu_id, gh.hour, gh.lo, gh.hi
HAVING :everything = 1 OR gh.lo <> gh.hour OR gh.hi <> gh.hour + 3600 OR COUNT(h.allocation_id) > 1
    OR (COUNT(h.allocation_id) = 1
        AND (MIN(h.start) <> gh.lo OR MAX(h.stop) <> gh.hi OR MAX(h.share_num) <> MAX(h.share_den)))
""")

# 4. Metering per GPU, hour and holding: readings with utilisation, Σ utilisation, Σ energy increments. An energy
# counter that goes down was reset (driver reload): the new reading is the energy since then. Increments run between
# consecutive readings that carry a counter value, so a missing value (a failed read, a GPU without a counter) does
# not lose the energy across it: readings are ordered by one 64-bit key o, gpu_id × 2^32 + ts (ids below 2^31,
# instants before 2106), which sorts faster than the pair, negated for a reading without a value, so that those come
# first, all together, and each reading with a value follows the previous one with a value (one scan and one sort, in
# an order the plan cannot change, so the float sums come out the same every time). For the readings with a value, the
# step dk of k from the previous reading is the time since it when that reading is the same GPU's, and more than 2^32
# − the chunk's span (far more than the gap) when it is another GPU's, so ``dk > gap`` also starts each GPU afresh.
# The window runs over the chunk's readings alone (nothing else in the sort, and PostgreSQL can sort them in parallel
# workers); the increment of each GPU's first reading of the chunk, from the GPU's last reading in the lookback before
# it (two key lookups per GPU, not a scan of the day before), is a row of its own (the first reading's windowed
# increment is 0: its predecessor in the key order is another GPU's), so every sum adds the same terms as one window
# over both. Each reading is assigned to the holding that contains it in a GPU-hour
# that is not shared (its holdings are disjoint), else to none (allocation_id NULL: the unallocated rest, or a shared
# GPU-hour as a whole), and summed per GPU-hour key and holding. The metering does not depend on which GPU-hours are
# costed in SQL. On SQLite, ``gpu_id IN (…)`` makes it range-scan the (gpu_id, ts) key per GPU; PostgreSQL reads the
# day partitions the chunk spans.
_METERING_SQL = """
CREATE TEMPORARY TABLE tmp_ledger_metering AS
WITH windowed AS (
    SELECT k, k % 4294967296 AS ts, u,
           CASE WHEN e IS NULL OR pe IS NULL OR dk IS NULL OR dk > :gap THEN 0.0 WHEN e < pe THEN e ELSE e - pe END
               AS de
    FROM (
        SELECT k, u, e, k - LAG(k) OVER w AS dk, LAG(e) OVER w AS pe
        FROM (SELECT k, u, e, CASE WHEN e IS NULL THEN -k ELSE k END AS o
              FROM (SELECT r.gpu_id * 4294967296 + r.ts AS k, r.utilization_ratio AS u, r.energy_joules AS e
                    FROM gpu_samples r WHERE {per_gpu}r.ts >= :h0 AND r.ts < :end) scanned) keyed
        WINDOW w AS (ORDER BY o ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)
    ) lagged
), firsts AS (
    SELECT f.gpu_id * 4294967296 + f.ts AS k, f.ts, CAST(NULL AS DOUBLE PRECISION) AS u,
           CASE WHEN f.ts - p.ts > :gap THEN 0.0 WHEN f.energy_joules < p.energy_joules THEN f.energy_joules
                ELSE f.energy_joules - p.energy_joules END AS de
    FROM (SELECT g.id,
                 (SELECT MIN(ts) FROM gpu_samples WHERE gpu_id = g.id AND ts >= :h0 AND ts < :end
                    AND energy_joules IS NOT NULL) AS first_ts,
                 (SELECT MAX(ts) FROM gpu_samples WHERE gpu_id = g.id AND ts >= :lookback AND ts < :h0
                    AND energy_joules IS NOT NULL) AS previous_ts
          FROM gpus g) b
    JOIN gpu_samples f ON f.gpu_id = b.id AND f.ts = b.first_ts AND f.ts >= :h0 AND f.ts < :end
    JOIN gpu_samples p ON p.gpu_id = b.id AND p.ts = b.previous_ts AND p.ts >= :lookback AND p.ts < :h0
), readings AS (
    SELECT k, ts, u, de FROM firsts
    UNION ALL
    SELECT k, ts, u, de FROM windowed
)
SELECT CAST(gpu_hour / 4294967296 AS INTEGER) AS gpu_id, gpu_hour % 4294967296 AS hour, allocation_id,
       CAST(samples AS INTEGER) AS samples, utilization_sum, energy_joules
FROM (
    SELECT s.k - s.ts % 3600 AS gpu_hour, d.allocation_id, COUNT(s.u) AS samples,
           COALESCE(SUM(s.u), 0.0) AS utilization_sum, COALESCE(SUM(s.de), 0.0) AS energy_joules
    FROM readings s
    LEFT JOIN tmp_ledger_holdings d
      ON d.gpu_hour = s.k - s.ts % 3600 AND s.ts >= d.start AND s.ts < d.stop AND d.shared = 0
    GROUP BY s.k - s.ts % 3600, d.allocation_id
) metered
"""
_METERING = {
    "sqlite": text(_METERING_SQL.replace("{per_gpu}", "r.gpu_id IN (SELECT id FROM gpus) AND ")),
    "postgresql": text(_METERING_SQL.replace("{per_gpu}", "")),
}

# 5. The common GPU-hours, costed in SQL: their base columns, then (_costing_sql) the dialect's exact used and
# energy cost, then the ledger row.
_COMMON_BASE = """
SELECT gh.hour, gh.gpu_id, h.job_pk, COALESCE(h.team_id, :unallocated) AS team_id, r.capacity,
       COALESCE(m.samples, 0) AS sample_count, COALESCE(m.energy_joules, 0.0) AS energy_joules,
       CASE WHEN h.job_pk IS NOT NULL AND m.samples > 0 THEN m.utilization_sum / m.samples END AS utilization,
       gh.pricing_model
FROM tmp_ledger_gpu_hours gh
JOIN tmp_ledger_rates r ON r.model = gh.model AND r.pricing_model = gh.pricing_model AND r.hour = gh.hour
LEFT JOIN tmp_ledger_holdings h ON h.gpu_id = gh.gpu_id AND h.hour = gh.hour
LEFT JOIN tmp_ledger_metering m
  ON m.gpu_id = gh.gpu_id AND m.hour = gh.hour AND COALESCE(m.allocation_id, 0) = COALESCE(h.allocation_id, 0)
WHERE NOT EXISTS (SELECT 1 FROM tmp_ledger_split sp WHERE sp.gpu_id = gh.gpu_id AND sp.hour = gh.hour)
"""
_COMMON_INSERT = """
INSERT INTO tmp_ledger_rows ({columns})
SELECT hour, gpu_id, job_pk, team_id, 3600,
       CASE WHEN utilization IS NULL THEN 0.0 ELSE 3600 * utilization END, sample_count, energy_joules,
       capacity, used, CASE WHEN utilization IS NULL THEN 0 ELSE capacity - used END, energy, :currency, pricing_model
FROM ({costed}) costed
"""


def _pg_half_even(numerator: str, denominator: int) -> str:
    """SQL for ``numerator ÷ denominator`` (a non-negative exact NUMERIC over a positive integer) rounded
    half-even to an integer, as NUMERIC. PostgreSQL's ``round`` rounds halves away from zero; this does not."""
    q = f"div({numerator}, {denominator})"
    twice_rest = f"2 * ({numerator} - {denominator} * {q})"
    up = f"{twice_rest} > {denominator} OR ({twice_rest} = {denominator} AND mod({q}, 2) = 1)"
    return f"({q} + CASE WHEN {up} THEN 1 ELSE 0 END)"


def _costing_sql(dialect: str) -> str:
    """The SELECT of step 5 with used and energy cost columns for ``dialect``.

    PostgreSQL: used = allocated × utilisation and energy = joules × tariff × PUE ÷ 3.6e6, with the float
    readings as the decimals of their shortest text, exact NUMERIC products rounded half-even to micro-units.
    SQLite: the registered functions of :func:`_register_sqlite_functions` on micro-units.
    """
    if dialect == "postgresql":
        utilization = "CAST(CAST(LEAST(GREATEST(utilization, 0.0), 1.0) AS text) AS numeric)"
        joules = "CAST(CAST(energy_joules AS text) AS numeric)"
        used = _pg_half_even("used_units", 1)
        energy = _pg_half_even("energy_tenths", 36)
        return f"""
            SELECT e.*, CASE WHEN utilization IS NULL THEN 0 ELSE {used} * 0.000001 END AS used,
                   {energy} * 0.000001 AS energy
            FROM (SELECT b.*, capacity * {utilization} * 1000000 AS used_units,
                         {joules} * CAST(:energy_factor AS numeric) AS energy_tenths
                  FROM ({_COMMON_BASE}) b) e"""  # noqa: S608 - only constant SQL is inlined
    return f"""
        SELECT b.*, CASE WHEN utilization IS NULL THEN 0 ELSE finops_used_cost(capacity, utilization) END AS used,
               finops_energy_cost(energy_joules) AS energy
        FROM ({_COMMON_BASE}) b"""  # noqa: S608 - only constant SQL is inlined


def _register_sqlite_functions(connection: Connection, catalog: PriceCatalog) -> None:
    """SQL functions on this SQLite connection, in micro-units: ``finops_used_cost(allocated, utilisation)`` and
    ``finops_energy_cost(joules)`` at the catalog's tariff and PUE (:mod:`finops.ledger.costmodel` formulas)."""
    scale = Decimal(1).scaleb(MONEY_SCALE)

    def used(allocated: int, utilization: float) -> int:
        return int(costmodel.used_cost(Decimal(allocated) / scale, utilization) * scale)

    def energy(joules: float) -> int:
        return int(costmodel.energy_cost(joules, catalog.tariff_per_kwh, catalog.pue) * scale)

    dbapi = connection.connection.driver_connection
    dbapi.create_function("finops_used_cost", 2, used, deterministic=True)  # type: ignore[union-attr]
    dbapi.create_function("finops_energy_cost", 1, energy, deterministic=True)  # type: ignore[union-attr]


@dataclass(frozen=True, slots=True)
class _Metering:
    samples: int
    utilization_sum: float
    energy_joules: float


def rollup(
    session: Session,
    pricing: Pricing,
    until: int,
    *,
    sql_costing: bool = True,
    connections: int = ROLLUP_CONNECTIONS,
) -> int:
    """Bring the ledger up to ``until`` (epoch seconds): rebuild every dirty hour before it, and every hour
    from the newest hour in the ledger (or, for an empty ledger, the first GPU's entry into service) to it.

    The newest hour is always rebuilt because it was built only up to the previous ``until``, so hours
    without samples or job changes (a silent collector, an idle cluster) still accrue capacity cost.
    Hours missing a GPU that has no price stay dirty, so they are rebuilt after the catalog is fixed. A chunk's
    dirty marks are removed before its data is read (:func:`_unmark`), so that data committed while it is rebuilt
    is rebuilt by the next rollup. The newest hour built (the one ``until - 1`` falls in, usually the current one)
    keeps its mark, so that an ingest marking it (every POST of the current hour does) does not wait for this
    rollup's transaction, which would have removed the mark, to end; the next rollup reads the mark and rebuilds
    the hour (which it would anyway when it is the ledger's newest), and the first rollup past it removes it.
    ``sql_costing`` as in :func:`rebuild`. Returns the number of hours rebuilt completely.

    The hours are rebuilt in chunks of at most :data:`CHUNK_HOURS` consecutive hours (a day partition of readings
    each). On PostgreSQL, several chunks are computed at once on up to ``connections`` extra connections
    (:func:`_chunks_built_elsewhere`) when this transaction has written nothing yet; everything is still written
    in this session's transaction. Half a day of hours or more is then cut into at least ``connections``
    chunks, so that a single dirty day is shared by the helpers too. Otherwise, and on SQLite, chunk after chunk
    by :func:`rebuild`.

    Rollups are serialised: two at once (the scheduler and ``gpu-finops rollup``, or two schedulers) would each
    delete the hours' rows before the other's were committed and write them twice. On PostgreSQL by a
    transaction-scoped advisory lock (:data:`ROLLUP_LOCK_KEY`); on SQLite by taking the database's write lock
    first (a write that changes nothing), as a transaction that read before writing cannot wait for the lock
    and fails "database is locked". The second waits, then finds the hours done.
    """
    dialect = session.connection().dialect.name
    if dialect == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": ROLLUP_LOCK_KEY})
    elif dialect == "sqlite":
        session.execute(delete(DirtyHour).where(false()))
    dirty = {to_epoch(h) for h in session.scalars(select(DirtyHour.hour).where(DirtyHour.hour < from_epoch(until)))}
    newest = session.scalar(select(func.max(LedgerEntry.hour))) or session.scalar(select(func.min(Gpu.in_service_from)))
    since = floor_hour(to_epoch(newest)) if newest is not None else floor_hour(until - 1)
    hours = sorted(dirty | set(range(min(since, floor_hour(until - 1)), until, HOUR)))
    helpers = dialect == "postgresql" and connections > 1
    longest = CHUNK_HOURS
    if helpers and len(hours) >= CHUNK_HOURS // 2:
        longest = min(CHUNK_HOURS, -(-len(hours) // connections))  # a chunk for each helper at least
    chunks = list(_contiguous_chunks(hours, longest))
    built: Iterator[set[int]]
    if helpers and len(chunks) > 1 and _nothing_written(session):
        built = _chunks_built_elsewhere(session, chunks, pricing, until, sql_costing, connections)
    else:
        built = _chunks_built_here(session, chunks, pricing, until, sql_costing)
    unpriced: set[int] = set().union(*built)
    mark_hours_dirty(session, unpriced)
    return len(hours) - len(unpriced)


def _contiguous_chunks(hours: list[int], longest: int) -> Iterator[tuple[int, int]]:
    """[h0, h1) runs of consecutive hours, at most ``longest`` hours long."""
    start = previous = None
    for hour in hours:
        if start is None or previous is None or hour != previous + HOUR or hour - start >= longest * HOUR:
            if start is not None and previous is not None:
                yield start, previous + HOUR
            start = hour
        previous = hour
    if start is not None and previous is not None:
        yield start, previous + HOUR


def rebuild(session: Session, h0: int, h1: int, pricing: Pricing, until: int, *, sql_costing: bool = True) -> set[int]:
    """Rewrite the ledger rows of hours [h0, h1) (epoch seconds, hour-aligned), clipped at ``until``.

    A GPU whose model has no price in the catalog gets no rows (logged once per model); the other GPUs'
    rows are written. Returns the hours that miss such GPUs, to be rebuilt once the catalog has the price.
    ``sql_costing`` False costs every GPU-hour with the Python cost model instead of only those to split (the
    rows are the same; it is the reference the SQL costing is tested against). The team-hours of [h0, h1) are
    rewritten after the rows (:func:`finops.ledger.team_hours.refresh_team_hours`).
    """
    unpriced = _compute(session, h0, h1, pricing, until, team_by_name(session, UNALLOCATED_TEAM).id, sql_costing)
    _store(session, h0, h1, None)
    return unpriced


def _store(session: Session, h0: int, h1: int, copied: bytes | None) -> None:
    """Replace the ledger rows of hours [h0, h1) by the chunk's computed rows, and rewrite its team-hours.

    ``copied`` None: the rows are in this connection's ``tmp_ledger_rows``; else they are that table's binary
    ``COPY`` output from another connection (PostgreSQL's binary COPY format), written by ``COPY … FROM STDIN``.
    """
    session.execute(delete(LedgerEntry).where(LedgerEntry.hour >= from_epoch(h0), LedgerEntry.hour < from_epoch(h1)))
    names = ", ".join(LEDGER_COLUMNS)
    if copied is None:
        session.execute(text(f"INSERT INTO ledger ({names}) SELECT {names} FROM tmp_ledger_rows"))  # noqa: S608
    else:
        cursor = session.connection().connection.driver_connection.cursor()  # type: ignore[union-attr]
        with cursor, cursor.copy(f"COPY ledger ({names}) FROM STDIN (FORMAT binary)") as copy:
            copy.write(copied)
    refresh_team_hours(session, h0, h1)


def _chunks_built_here(
    session: Session, chunks: Sequence[tuple[int, int]], pricing: Pricing, until: int, sql_costing: bool
) -> Iterator[set[int]]:
    """The unpriced hours of each chunk [h0, h1), rebuilt by :func:`rebuild` in the session's own connection."""
    for h0, h1 in chunks:
        _unmark(session, h0, h1, until)
        yield rebuild(session, h0, h1, pricing, until, sql_costing=sql_costing)


def _unmark(session: Session, h0: int, h1: int, until: int) -> None:
    """Remove the dirty marks of hours [h0, h1), before their data is read, but not that of the newest hour
    built up to ``until`` (:func:`rollup` says why). Data committed after that marks its hours again (on
    PostgreSQL its insert of a mark waits for this transaction, which deleted the mark, to end), so it is rebuilt
    next time; removing the marks after the rebuild would remove those too."""
    stop = min(h1, floor_hour(until - 1))
    session.execute(delete(DirtyHour).where(DirtyHour.hour >= from_epoch(h0), DirtyHour.hour < from_epoch(stop)))


def _nothing_written(session: Session) -> bool:
    """Whether this PostgreSQL transaction has written nothing yet (no transaction id assigned): then another
    connection sees the same data as it does."""
    return bool(session.scalar(text("SELECT txid_current_if_assigned() IS NULL")))


def _chunks_built_elsewhere(
    session: Session,
    chunks: Sequence[tuple[int, int]],
    pricing: Pricing,
    until: int,
    sql_costing: bool,
    connections: int,
) -> Iterator[set[int]]:
    """The unpriced hours of each chunk [h0, h1), in order, once :func:`_store` has written its rows in
    ``session``.

    The rows are computed (:func:`_compute`) on up to ``connections`` other connections of the session's
    engine, a chunk each at a time and a few chunks ahead, so that PostgreSQL computes several chunks on
    several cores while this session writes the one before (``benchmarks/ledger.py`` has figures). Each helper
    connection reads in a transaction of its own, which it rolls back; the rollup's inputs (readings, jobs,
    allocations, GPUs, prices) are what is committed, which is what ``session`` sees too as long as it has not
    written them (:func:`_nothing_written`). A helper's error is raised here, and the rollup's transaction with
    it is rolled back by its owner. PostgreSQL only.
    """
    bind = session.get_bind()
    engine = bind.engine if isinstance(bind, Connection) else bind
    unallocated_team = team_by_name(session, UNALLOCATED_TEAM).id
    idle: queue.SimpleQueue[Connection] = queue.SimpleQueue()

    def compute(h0: int, h1: int) -> tuple[set[int], bytes]:
        connection = idle.get()
        try:
            with Session(bind=connection) as helper:
                unpriced = _compute(helper, h0, h1, pricing, until, unallocated_team, sql_costing)
            return unpriced, _copy_out(connection)
        finally:
            idle.put(connection)

    with ExitStack() as stack:
        for _ in range(min(connections, len(chunks))):
            connection = stack.enter_context(engine.connect())
            stack.callback(connection.begin().rollback)  # helpers write only temporary tables: nothing to keep
            # The helpers keep the cores busy between them: parallel workers would only add their own overhead.
            connection.exec_driver_sql("SET LOCAL max_parallel_workers_per_gather = 0")
            idle.put(connection)
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=connections, thread_name_prefix="ledger-chunk"))
        stack.callback(pool.shutdown, cancel_futures=True)
        pending: deque[tuple[int, int, Future[tuple[set[int], bytes]]]] = deque()
        queued = iter(chunks)
        for h0, h1 in islice(queued, connections + 1):
            _unmark(session, h0, h1, until)
            pending.append((h0, h1, pool.submit(compute, h0, h1)))
        while pending:
            h0, h1, future = pending.popleft()
            unpriced, copied = future.result()
            for n0, n1 in islice(queued, 1):
                _unmark(session, n0, n1, until)
                pending.append((n0, n1, pool.submit(compute, n0, n1)))
            _store(session, h0, h1, copied)
            yield unpriced


def _load_prices(
    connection: Connection,
    rates: dict[tuple[str, PricingModel, int], Decimal],
    node_models: dict[int, PricingModel],
) -> None:
    """Fill ``tmp_ledger_rates`` with each rate's capacity cost of a whole hour (bound as :class:`Money`: integer
    micro-units on SQLite) and ``tmp_ledger_node_models`` with the nodes' pricing models."""
    if rates:
        connection.execute(
            insert(_RATES),
            [
                {"model": m, "pricing_model": str(p), "hour": h, "capacity": costmodel.capacity_cost(r, HOUR)}
                for (m, p, h), r in rates.items()
            ],
        )
    if node_models:
        connection.execute(
            text("INSERT INTO tmp_ledger_node_models VALUES (:node, :model)"),
            [{"node": node, "model": str(model)} for node, model in node_models.items()],
        )


def _copy_out(connection: Connection) -> bytes:
    """This connection's ``tmp_ledger_rows`` in PostgreSQL's binary COPY format (:data:`LEDGER_COLUMNS`)."""
    cursor = connection.connection.driver_connection.cursor()  # type: ignore[union-attr]
    with cursor, cursor.copy(f"COPY tmp_ledger_rows ({', '.join(LEDGER_COLUMNS)}) TO STDOUT (FORMAT binary)") as copy:
        return b"".join(bytes(data) for data in copy)


def _compute(
    session: Session, h0: int, h1: int, pricing: Pricing, until: int, unallocated_team: int, sql_costing: bool
) -> set[int]:
    """Fill the work table ``tmp_ledger_rows`` of the session's connection with the ledger rows of hours [h0, h1)
    clipped at ``until``, as :func:`rebuild` describes; the ledger itself is not touched. Returns the hours that
    miss a price."""
    connection = session.connection()
    dialect = connection.dialect.name
    end = min(h1, until)
    _prepare_work_tables(connection, dialect)
    with _statement_settings(connection, dialect):
        node_models = pricing_models_by_node(session, pricing.model)
        rates, unpriced = _rates(session, pricing, node_models, h0, end)
        _load_prices(connection, rates, node_models)
        bounds = {"h0": h0, "end": end}
        connection.execute(_GPU_HOURS, {**bounds, "default_model": str(pricing.model)})
        connection.execute(_HOLDINGS, bounds)
        connection.execute(_SPLIT, {"everything": 0 if sql_costing else 1})
        _analyze(connection, dialect, "tmp_ledger_gpu_hours", "tmp_ledger_holdings", "tmp_ledger_split")
        connection.execute(
            _METERING[dialect], {**bounds, "lookback": h0 - ENERGY_LOOKBACK_SECONDS, "gap": ENERGY_LOOKBACK_SECONDS}
        )
        _analyze(connection, dialect, "tmp_ledger_metering")
        catalog = pricing.catalog
        if dialect == "sqlite":
            _register_sqlite_functions(connection, catalog)
        common = text(_COMMON_INSERT.format(columns=", ".join(LEDGER_COLUMNS), costed=_costing_sql(dialect)))
        parameters: dict[str, Any] = {"unallocated": unallocated_team, "currency": catalog.currency}
        if dialect == "postgresql":
            parameters["energy_factor"] = catalog.tariff_per_kwh * catalog.pue * 10  # ÷ 36 = × 10^6 ÷ 3.6e6
        connection.execute(common, parameters)
        rows = _split_rows(connection, rates, unallocated_team, catalog, h0, h1)
        if log.isEnabledFor(logging.DEBUG):
            gpu_hours = connection.scalar(text("SELECT COUNT(*) FROM tmp_ledger_gpu_hours")) or 0
            split = connection.scalar(text("SELECT COUNT(*) FROM tmp_ledger_split")) or 0
            log.debug("ledger hours [%d, %d): %d GPU-hours costed in SQL, %d split by the cost model",
                      h0, h1, gpu_hours - split, split)  # fmt: skip
        _insert_rows(connection, dialect, rows)
    return unpriced


def _prepare_work_tables(connection: Connection, dialect: str) -> None:
    """Create the session's temporary work tables if needed and empty them, and drop the previous metering table
    (PostgreSQL: one round trip)."""
    money = Money().compile(dialect=connection.dialect)
    ledger = LedgerEntry.__table__.c
    ledger_columns = ", ".join(
        f"{name} {ledger[name].type.compile(dialect=connection.dialect)}{'' if ledger[name].nullable else ' NOT NULL'}"
        for name in LEDGER_COLUMNS
    )
    creates = [
        f"CREATE TEMPORARY TABLE IF NOT EXISTS {name} ({columns.format(money=money, ledger_columns=ledger_columns)})"
        for name, columns in _TEMP_TABLES.items()
    ]
    drop = f"DROP TABLE IF EXISTS {_METERING_TABLE}"
    if dialect == "postgresql":
        connection.exec_driver_sql("; ".join([*creates, f"TRUNCATE {', '.join(_TEMP_TABLES)}", drop]))
        return
    connection.exec_driver_sql(drop)
    for create, name in zip(creates, _TEMP_TABLES, strict=True):
        connection.exec_driver_sql(create)
        connection.exec_driver_sql(f"DELETE FROM {name}")  # noqa: S608 - constant table names


# PostgreSQL settings for the rebuild's statements, restored afterwards: float output as the shortest round-trip
# text (the costing reads float readings through it; > 0 selects it), the sort of a chunk's readings in memory
# (a day of 1,024 GPUs read every minute takes ~150 MB; more spills to disk), no JIT compilation (it costs
# more than it saves on statements planned afresh for every chunk), and parallel workers priced so that the
# metering's scan and sort of the readings are shared with them (the workers' tuples arrive sorted; the default
# costs keep the whole sort in the session's own process). The other statements read temporary tables, which
# workers cannot.
_PG_SETTINGS = {
    "extra_float_digits": "1",
    "work_mem": "256MB",
    "jit": "off",
    "parallel_setup_cost": "0",
    "parallel_tuple_cost": "0",
}


@contextmanager
def _statement_settings(connection: Connection, dialect: str) -> Iterator[None]:
    """Apply :data:`_PG_SETTINGS` for the transaction's next statements, then put the previous values back
    (transaction-local settings: a rollback undoes them too)."""
    if dialect != "postgresql":
        yield
        return
    names = list(_PG_SETTINGS)
    current = ", ".join(f"current_setting('{name}')" for name in names)
    previous = dict(zip(names, connection.exec_driver_sql(f"SELECT {current}").one(), strict=True))

    def apply(values: dict[str, str]) -> None:
        changes = ", ".join(f"set_config('{name}', %({name})s, true)" for name in values)
        connection.exec_driver_sql(f"SELECT {changes}", values)

    apply(_PG_SETTINGS)
    yield  # on an error the transaction is rolled back, and its settings with it
    apply(previous)


def _analyze(connection: Connection, dialect: str, *tables: str) -> None:
    """Give PostgreSQL's planner statistics of freshly filled work tables (autovacuum never analyzes temporary
    tables; without them it misjudges the joins by orders of magnitude)."""
    if dialect == "postgresql":
        connection.exec_driver_sql(f"ANALYZE {', '.join(tables)}")


def _rates(
    session: Session, pricing: Pricing, node_models: dict[int, PricingModel], h0: int, end: int
) -> tuple[dict[tuple[str, PricingModel, int], Decimal], set[int]]:
    """Rate per (GPU model, pricing model, hour) for the GPU-hours in service in [h0, end), and the hours that
    miss a rate for some in-service GPU (logged once per GPU model and pricing model)."""
    first_hour: dict[tuple[str, PricingModel], int] = {}
    for model, node_id, entered in session.execute(
        select(Gpu.model, Gpu.node_id, func.min(Gpu.in_service_from))
        .where(Gpu.in_service_from < from_epoch(end))
        .group_by(Gpu.model, Gpu.node_id)
    ):
        key = (model, node_models.get(node_id, pricing.model))
        hour = floor_hour(max(h0, to_epoch(entered)))
        first_hour[key] = min(first_hour.get(key, hour), hour)
    rates: dict[tuple[str, PricingModel, int], Decimal] = {}
    unpriced: set[int] = set()
    for (model, pricing_model), first in sorted(first_hour.items()):
        logged = False
        for hour in range(first, end, HOUR):
            try:
                rates[model, pricing_model, hour] = pricing.catalog.rate(model, pricing_model, from_epoch(hour))
            except PriceNotFound as exc:
                unpriced.add(hour)
                if not logged:
                    log.error("GPU-hours of model %r left out of the ledger: %s", model, exc)
                    logged = True
    return rates, unpriced


# The GPU-hours to split, their holdings in allocation id order, and their metering.
_SPLIT_HOURS = text("""
SELECT sp.gpu_id, sp.hour, sp.shared, gh.lo, gh.hi, gh.model, gh.pricing_model,
       h.allocation_id, h.job_pk, h.team_id, h.start, h.stop, h.share_num, h.share_den
FROM tmp_ledger_split sp
JOIN tmp_ledger_gpu_hours gh ON gh.gpu_id = sp.gpu_id AND gh.hour = sp.hour
LEFT JOIN tmp_ledger_holdings h ON h.gpu_id = sp.gpu_id AND h.hour = sp.hour
ORDER BY sp.gpu_id, sp.hour, h.allocation_id
""")
_SPLIT_METERING = text("""
SELECT m.gpu_id, m.hour, m.allocation_id, m.samples, m.utilization_sum, m.energy_joules
FROM tmp_ledger_metering m JOIN tmp_ledger_split sp ON sp.gpu_id = m.gpu_id AND sp.hour = m.hour
""")


@dataclass(frozen=True, slots=True)
class _Holding:
    """An allocation holding a GPU for [start, stop) of one hour: its share of the GPU, job and team."""

    allocation_id: int
    start: int
    stop: int
    share: Fraction
    job_pk: int
    team_id: int


@dataclass(slots=True)
class _GpuHour:
    gpu_id: int
    hour: int
    lo: int
    hi: int
    shared: bool
    rate: Decimal
    pricing_model: str
    holdings: list[_Holding]


def _split_rows(
    connection: Connection,
    rates: dict[tuple[str, PricingModel, int], Decimal],
    unallocated_team: int,
    catalog: PriceCatalog,
    h0: int,
    h1: int,
) -> list[dict[str, object]]:
    """Ledger rows of the GPU-hours in ``tmp_ledger_split`` (of the chunk [h0, h1)), by the Python cost model."""
    gpu_hours: dict[tuple[int, int], _GpuHour] = {}
    for r in connection.execute(_SPLIT_HOURS):
        gpu_hour = gpu_hours.get((r.gpu_id, r.hour))
        if gpu_hour is None:
            rate = rates[r.model, PricingModel(r.pricing_model), r.hour]
            gpu_hour = _GpuHour(r.gpu_id, r.hour, r.lo, r.hi, bool(r.shared), rate, r.pricing_model, [])
            gpu_hours[r.gpu_id, r.hour] = gpu_hour
        if r.allocation_id is not None:
            share = Fraction(r.share_num, r.share_den)
            gpu_hour.holdings.append(_Holding(r.allocation_id, r.start, r.stop, share, r.job_pk, r.team_id))
    metering: dict[tuple[int, int], dict[int | None, _Metering]] = defaultdict(dict)
    for m in connection.execute(_SPLIT_METERING):
        metering[m.gpu_id, m.hour][m.allocation_id] = _Metering(m.samples, m.utilization_sum, m.energy_joules)
    usage = _job_usage(connection, gpu_hours, h0, h1)
    rows: list[dict[str, object]] = []
    for key, gpu_hour in gpu_hours.items():
        rows.extend(_gpu_hour_rows(gpu_hour, metering.get(key, {}), unallocated_team, catalog, usage.get(key, {})))
    return rows


def _job_usage(
    connection: Connection, gpu_hours: dict[tuple[int, int], _GpuHour], h0: int, h1: int
) -> dict[tuple[int, int], dict[int, float]]:
    """``{(gpu_id, hour): {job_pk: usage}}`` for the shared GPU-hours with several holdings whose jobs' own
    utilisation the collectors measured (:func:`finops.ledger.job_utilization.job_utilization_by_gpu_hour`, matched to
    jobs by :func:`finops.jobs.placement.job_keys`); none read when no such GPU-hour is in the chunk."""
    shared = [key for key, gpu_hour in gpu_hours.items() if gpu_hour.shared and len(gpu_hour.holdings) > 1]
    if not shared:
        return {}
    measured = job_utilization_by_gpu_hour(connection, h0, h1)
    wanted = {key: measured[key] for key in shared if key in measured}
    if not wanted:
        return {}
    job_pks = {holding.job_pk for key in wanted for holding in gpu_hours[key].holdings}
    keys = {
        row.id: job_keys(row.scheduler, row.job_id, row.job_id_raw)
        for row in connection.execute(
            select(Job.id, Job.scheduler, Job.job_id, Job.job_id_raw).where(Job.id.in_(job_pks))
        )
    }
    usage: dict[tuple[int, int], dict[int, float]] = {}
    for key, ratios in wanted.items():
        for job_pk in {holding.job_pk for holding in gpu_hours[key].holdings}:
            found = [ratios[k] for k in sorted(keys.get(job_pk, ())) if k in ratios]
            if found:
                usage.setdefault(key, {})[job_pk] = found[0]
    return usage


def _gpu_hour_rows(
    gpu_hour: _GpuHour,
    by_allocation: dict[int | None, _Metering],
    unallocated_team: int,
    catalog: PriceCatalog,
    usage: Mapping[int, float],
) -> list[dict[str, object]]:
    """Ledger rows of one GPU for the in-service part [lo, hi) of one hour.

    A GPU-hour held by disjoint whole-GPU holdings is metered per holding (the readings inside it; the rest
    under None). A shared GPU-hour (a MIG share, or holdings that overlap: time-slicing) is metered as a whole
    (under None): every holder gets the GPU's mean utilisation, and the hour's energy is split in proportion to
    GPU-seconds. Holdings go to the cost model with their place in the hour and, by job, the ``usage`` measured
    for the job on this GPU-hour (:func:`_job_usage`), which split overlapping holdings.
    """
    held = gpu_hour.holdings
    whole = by_allocation.get(None) if gpu_hour.shared else None
    holdings = []
    for holding in held:
        inside = whole if gpu_hour.shared else by_allocation.get(holding.allocation_id)
        utilization = inside.utilization_sum / inside.samples if inside and inside.samples else None
        holdings.append(
            costmodel.Holding(
                holding.job_pk,
                holding.stop - holding.start,
                utilization,
                holding.share,
                offset=holding.start - gpu_hour.lo,
                usage=usage.get(holding.job_pk),
            )
        )
    span = gpu_hour.hi - gpu_hour.lo
    costs = costmodel.gpu_hour_costs(gpu_hour.rate, span, holdings)
    rows: list[dict[str, object]] = []
    for i, cost in enumerate(costs):
        holder = held[i] if i < len(held) else None
        if whole is not None:
            metered: _Metering | None = whole
            joules = whole.energy_joules * cost.gpu_seconds / span
        else:
            metered = by_allocation.get(holder.allocation_id if holder is not None else None)
            joules = metered.energy_joules if metered else 0.0
        rows.append(
            {
                "hour": gpu_hour.hour,
                "gpu_id": gpu_hour.gpu_id,
                "job_pk": cost.job,
                "team_id": unallocated_team if holder is None else holder.team_id,
                "seconds": cost.gpu_seconds,
                "used_gpu_seconds": cost.used_gpu_seconds,
                "sample_count": metered.samples if metered else 0,
                "energy_joules": joules,
                "allocated_cost": cost.allocated,
                "used_cost": cost.used,
                "idle_cost": cost.idle,
                "energy_cost": costmodel.energy_cost(joules, catalog.tariff_per_kwh, catalog.pue),
                "currency": catalog.currency,
                "pricing_model": gpu_hour.pricing_model,
            }
        )
    return rows


# tmp_ledger_rows with the ledger's column types and tmp_ledger_rates with its capacity as money, so that binds are
# stored as the ledger stores them (money in integer micro-units on SQLite: :class:`finops.db.sqltypes.Money`).
_RATES = table("tmp_ledger_rates", *map(column, ("model", "pricing_model", "hour")), column("capacity", Money()))
_WORK_ROWS = table("tmp_ledger_rows", *(column(name, LedgerEntry.__table__.c[name].type) for name in LEDGER_COLUMNS))


def _insert_rows(connection: Connection, dialect: str, rows: Sequence[dict[str, object]]) -> None:
    """Add ledger rows to ``tmp_ledger_rows``: ``COPY`` on PostgreSQL, an executemany elsewhere."""
    if not rows:
        return
    names = ", ".join(LEDGER_COLUMNS)
    if dialect != "postgresql":
        connection.execute(insert(_WORK_ROWS), list(rows))
        return
    cursor = connection.connection.driver_connection.cursor()  # type: ignore[union-attr]
    with cursor, cursor.copy(f"COPY tmp_ledger_rows ({names}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row([row[name] for name in LEDGER_COLUMNS])
