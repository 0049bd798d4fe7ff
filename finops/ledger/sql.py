"""The SQL of a ledger rebuild (:mod:`finops.ledger.rollup`), where it differs by database too: the session-local
work tables, the set-based steps 1 to 5 of a rebuild (in-service GPU-hours and their rates, holdings, the GPU-hours to
split, the metering of the readings, the costing of the common GPU-hours) and the statement settings they run
under.

Each step is a function that runs its statement on a connection with the rollup's work tables
(:func:`prepare_work_tables`); times are epoch seconds, hours hour-aligned, [h0, end) the chunk clipped at the
rollup's ``until``. The per-database variants are chosen here (the metering's plan hint for SQLite, the costing's
exact arithmetic: ``NUMERIC`` on PostgreSQL, registered Python functions on SQLite); generic differences
(``TRUNCATE``, settings, ``COPY``, ``ANALYZE``) are :mod:`finops.db.dialect`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, TextClause, column, insert, table, text

from collector.contract.wire import ACTIVITY_COLUMNS
from finops.db.dialect import emptying, run_statements, transaction_settings
from finops.db.models import LedgerEntry
from finops.db.sqltypes import MONEY_SCALE, Money
from finops.ledger import costmodel
from finops.pricing.catalog import PriceCatalog, PricingModel
from finops.timeutil import HOUR

ENERGY_LOOKBACK_SECONDS = HOUR
"""An energy counter increment counts only if the previous reading is at most this much older: the energy
over a longer gap (a collector down for hours) cannot be placed in an hour, so it is left out. The rule
does not depend on how the hours are cut into rebuilds."""

ACTIVITIES = tuple(name.removesuffix("_ratio") for name in ACTIVITY_COLUMNS)
"""The hardware activities (:data:`collector.contract.wire.ACTIVITY_COLUMNS` without ``_ratio``): the metering's
``<activity>_sum`` and ``<activity>_n`` columns, the ledger's ``<activity>_ratio``."""

LEDGER_COLUMNS = (
    "hour", "gpu_id", "job_pk", "team_id", "seconds", "used_gpu_seconds", "sample_count", "energy_joules",
    "allocated_cost", "used_cost", "idle_cost", "energy_cost", "currency", "pricing_model", "profiled_seconds",
    *ACTIVITY_COLUMNS, "sm_active_cost",
)  # fmt: skip

# Session-local work tables of a rebuild (emptied at its start).
_TEMP_TABLES = {
    # capacity NULL: the GPU model has no price under that pricing model at that hour (its GPU-hours are unpriced).
    "tmp_ledger_rates": "model VARCHAR(128) NOT NULL, pricing_model VARCHAR(16) NOT NULL, hour BIGINT NOT NULL, "
    "capacity {money}, PRIMARY KEY (model, pricing_model, hour)",
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
# SELECT of an INSERT it cannot): gpu_id, hour, allocation_id, samples, utilization_sum, energy_joules, readings,
# profiled and, per activity of ACTIVITIES, <activity>_sum and <activity>_n.
METERING_TABLE = "tmp_ledger_metering"

# 1. In-service GPU-hours [lo, hi) of the chunk that have a row in tmp_ledger_rates (a rate, or NULL: unpriced).
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
# over both. The GPUs drive those lookups (CROSS JOIN, whose order SQLite keeps): each GPU's first and previous
# reading with a value are searched once (at most the chunk's readings of the GPU, when none has one) and then read by
# key. Joined the other way, SQLite scanned every stored reading and searched the chunk again for each of the chunk's:
# work quadratic in the readings of a GPU without a counter, and growing with every day stored. Each reading is
# assigned to the holding that contains it in a GPU-hour that is not shared (its holdings are disjoint), else to none
# (allocation_id NULL: the unallocated rest, or a shared GPU-hour as a whole), and summed per GPU-hour key and
# holding. Hardware activity rides along where the chunk has some (an hour in ``profiled_hours``, which ingest marks
# when it stores readings that carry activity): per GPU-hour and holding, the readings, those with any activity field
# (profiled), and per activity the sum of its values and how many readings had one (the firsts' rows carry none).
# Elsewhere the activity columns are constants (no readings counted, nothing profiled), so that GPU-hours without
# profiling data cost the metering no more than before it kept activity. The metering does not depend on which
# GPU-hours are costed in SQL. On SQLite, ``gpu_id IN (…)`` makes it range-scan the (gpu_id, ts) key per GPU;
# PostgreSQL reads the day partitions the chunk spans.
_METERING_SQL = """
CREATE TEMPORARY TABLE tmp_ledger_metering AS
WITH windowed AS (
    SELECT k, k % 4294967296 AS ts, u,
           CASE WHEN e IS NULL OR pe IS NULL OR dk IS NULL OR dk > :gap THEN 0.0 WHEN e < pe THEN e ELSE e - pe END
               AS de{windowed_extra}
    FROM (
        SELECT k, u, e, k - LAG(k) OVER w AS dk, LAG(e) OVER w AS pe{carried}
        FROM (SELECT k, u, e, CASE WHEN e IS NULL THEN -k ELSE k END AS o{carried}
              FROM (SELECT r.gpu_id * 4294967296 + r.ts AS k, r.utilization_ratio AS u, r.energy_joules AS e{scanned}
                    FROM gpu_samples r WHERE {per_gpu}r.ts >= :h0 AND r.ts < :end) scanned) keyed
        WINDOW w AS (ORDER BY o ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)
    ) lagged
), firsts AS (
    SELECT f.gpu_id * 4294967296 + f.ts AS k, f.ts, CAST(NULL AS DOUBLE PRECISION) AS u,
           CASE WHEN f.ts - p.ts > :gap THEN 0.0 WHEN f.energy_joules < p.energy_joules THEN f.energy_joules
                ELSE f.energy_joules - p.energy_joules END AS de{firsts_extra}
    FROM (SELECT g.id,
                 (SELECT MIN(ts) FROM gpu_samples WHERE gpu_id = g.id AND ts >= :h0 AND ts < :end
                    AND energy_joules IS NOT NULL) AS first_ts,
                 (SELECT MAX(ts) FROM gpu_samples WHERE gpu_id = g.id AND ts >= :lookback AND ts < :h0
                    AND energy_joules IS NOT NULL) AS previous_ts
          FROM gpus g) b
    CROSS JOIN gpu_samples f CROSS JOIN gpu_samples p
    WHERE f.gpu_id = b.id AND f.ts = b.first_ts AND f.ts >= :h0 AND f.ts < :end
      AND p.gpu_id = b.id AND p.ts = b.previous_ts AND p.ts >= :lookback AND p.ts < :h0
), readings AS (
    SELECT k, ts, u, de{union_extra} FROM firsts
    UNION ALL
    SELECT k, ts, u, de{union_extra} FROM windowed
)
SELECT CAST(gpu_hour / 4294967296 AS INTEGER) AS gpu_id, gpu_hour % 4294967296 AS hour, allocation_id,
       CAST(samples AS INTEGER) AS samples, utilization_sum, energy_joules{outer}
FROM (
    SELECT s.k - s.ts % 3600 AS gpu_hour, d.allocation_id, COUNT(s.u) AS samples,
           COALESCE(SUM(s.u), 0.0) AS utilization_sum, COALESCE(SUM(s.de), 0.0) AS energy_joules{aggregates}
    FROM readings s
    LEFT JOIN tmp_ledger_holdings d
      ON d.gpu_hour = s.k - s.ts % 3600 AND s.ts >= d.start AND s.ts < d.stop AND d.shared = 0
    GROUP BY s.k - s.ts % 3600, d.allocation_id
) metered
"""
_CARRIED = "".join(f", {a}" for a in ACTIVITIES)
_PROFILED_PARTS = {
    "windowed_extra": f", 1 AS n{_CARRIED}",
    "carried": _CARRIED,
    "scanned": "".join(f", r.{a}_ratio AS {a}" for a in ACTIVITIES),
    "firsts_extra": ", CAST(NULL AS INTEGER) AS n"
    + "".join(f", CAST(NULL AS DOUBLE PRECISION) AS {a}" for a in ACTIVITIES),
    "union_extra": f", n{_CARRIED}",
    "aggregates": ", COUNT(s.n) AS readings, COUNT(CASE WHEN "
    + " OR ".join(f"s.{a} IS NOT NULL" for a in ACTIVITIES)
    + " THEN 1 END) AS profiled"
    + "".join(f", COALESCE(SUM(s.{a}), 0.0) AS {a}_sum, COUNT(s.{a}) AS {a}_n" for a in ACTIVITIES),
    "outer": ", CAST(readings AS INTEGER) AS readings, CAST(profiled AS INTEGER) AS profiled"
    + "".join(f", {a}_sum, CAST({a}_n AS INTEGER) AS {a}_n" for a in ACTIVITIES),
}
_UNPROFILED_PARTS = dict.fromkeys(_PROFILED_PARTS, "") | {
    "outer": ", CAST(0 AS INTEGER) AS readings, CAST(0 AS INTEGER) AS profiled"
    + "".join(f", CAST(0 AS DOUBLE PRECISION) AS {a}_sum, CAST(0 AS INTEGER) AS {a}_n" for a in ACTIVITIES),
}
_PER_GPU = {"sqlite": "r.gpu_id IN (SELECT id FROM gpus) AND ", "postgresql": ""}


def _metering_statement(dialect: str, parts: dict[str, str]) -> TextClause:
    """The metering statement for ``dialect`` with its activity ``parts`` filled in."""
    statement = _METERING_SQL.replace("{per_gpu}", _PER_GPU[dialect])
    for name, part in parts.items():
        statement = statement.replace("{" + name + "}", part)
    return text(statement)


_METERING = {
    (dialect, profiled): _metering_statement(dialect, _PROFILED_PARTS if profiled else _UNPROFILED_PARTS)
    for dialect in _PER_GPU
    for profiled in (True, False)
}
"""The metering statement by (dialect, whether the chunk has profiled hours)."""
_PROFILED = text("SELECT 1 FROM profiled_hours WHERE hour >= :h0 AND hour < :end LIMIT 1")

# 4'. The same metering table from the segments metered in a TSDB (tsdb_gpu_metering)
# instead of the readings: a segment lies in one hour and within one holding or none (its bounds are cut at every
# allocation's start and end), so assigning whole segments gives the sums the readings would.
_TSDB_METERING = text(
    """
CREATE TEMPORARY TABLE tmp_ledger_metering AS
SELECT gpu_id, hour, allocation_id, CAST(SUM(samples) AS INTEGER) AS samples,
       COALESCE(SUM(utilization_sum), 0.0) AS utilization_sum, COALESCE(SUM(energy_joules), 0.0) AS energy_joules,
       CAST(SUM(readings) AS INTEGER) AS readings, CAST(SUM(profiled) AS INTEGER) AS profiled{activity_sums}
FROM (
    SELECT s.gpu_id, s.start - s.start % 3600 AS hour, d.allocation_id, s.samples, s.utilization_sum, s.energy_joules,
           s.readings, s.profiled{activities}
    FROM tsdb_gpu_metering s
    LEFT JOIN tmp_ledger_holdings d
      ON d.gpu_id = s.gpu_id AND d.hour = s.start - s.start % 3600 AND s.start >= d.start AND s.stop <= d.stop
         AND d.shared = 0
    WHERE s.start >= :h0 AND s.start < :end
) segments
GROUP BY gpu_id, hour, allocation_id
""".replace(
        "{activity_sums}",
        "".join(f", COALESCE(SUM({a}_sum), 0.0) AS {a}_sum, CAST(SUM({a}_n) AS INTEGER) AS {a}_n" for a in ACTIVITIES),
    ).replace("{activities}", "".join(f", s.{a}_sum, s.{a}_n" for a in ACTIVITIES))
)

# 5. The common GPU-hours, costed in SQL: their base columns, then (_PG_COSTED, _SQLITE_COSTED) the database's exact
# used and energy cost, then the ledger row.
_COMMON_BASE = """
SELECT gh.hour, gh.gpu_id, h.job_pk, COALESCE(h.team_id, :unallocated) AS team_id, r.capacity,
       COALESCE(m.samples, 0) AS sample_count, COALESCE(m.energy_joules, 0.0) AS energy_joules,
       CASE WHEN h.job_pk IS NOT NULL AND m.samples > 0 THEN m.utilization_sum / m.samples END AS utilization,
       gh.pricing_model,
       CASE WHEN h.job_pk IS NOT NULL AND m.readings > 0
            THEN (3600 * m.profiled + m.readings - 1) / m.readings ELSE 0 END AS profiled_seconds{activity_means}
FROM tmp_ledger_gpu_hours gh
JOIN tmp_ledger_rates r ON r.model = gh.model AND r.pricing_model = gh.pricing_model AND r.hour = gh.hour
LEFT JOIN tmp_ledger_holdings h ON h.gpu_id = gh.gpu_id AND h.hour = gh.hour
LEFT JOIN tmp_ledger_metering m
  ON m.gpu_id = gh.gpu_id AND m.hour = gh.hour AND COALESCE(m.allocation_id, 0) = COALESCE(h.allocation_id, 0)
WHERE NOT EXISTS (SELECT 1 FROM tmp_ledger_split sp WHERE sp.gpu_id = gh.gpu_id AND sp.hour = gh.hour)
""".replace(
    "{activity_means}",
    "".join(
        f",\n       CASE WHEN h.job_pk IS NOT NULL AND m.{a}_n > 0 THEN m.{a}_sum / m.{a}_n END AS {a}"
        for a in ACTIVITIES
    ),
)
_COMMON_INSERT = """
INSERT INTO tmp_ledger_rows ({columns})
SELECT hour, gpu_id, job_pk, team_id, 3600,
       CASE WHEN utilization IS NULL THEN 0.0 ELSE 3600 * utilization END, sample_count, energy_joules,
       capacity, CASE WHEN capacity IS NULL THEN NULL ELSE used END,
       CASE WHEN capacity IS NULL THEN NULL WHEN utilization IS NULL THEN 0 ELSE capacity - used END,
       energy, :currency, pricing_model, profiled_seconds, {activities},
       CASE WHEN capacity IS NULL THEN NULL ELSE sm_active_cost END
FROM ({costed}) costed
"""


def _pg_half_even(numerator: str, denominator: int) -> str:
    """SQL for ``numerator ÷ denominator`` (a non-negative exact NUMERIC over a positive integer) rounded
    half-even to an integer, as NUMERIC. PostgreSQL's ``round`` rounds halves away from zero; this does not."""
    q = f"div({numerator}, {denominator})"
    twice_rest = f"2 * ({numerator} - {denominator} * {q})"
    up = f"{twice_rest} > {denominator} OR ({twice_rest} = {denominator} AND mod({q}, 2) = 1)"
    return f"({q} + CASE WHEN {up} THEN 1 ELSE 0 END)"


# The SELECT of step 5 with used and energy cost columns. PostgreSQL: used = allocated × utilisation and energy =
# joules × tariff × PUE ÷ 3.6e6, with the float readings as the decimals of their shortest text, exact NUMERIC
# products rounded half-even to micro-units. SQLite: the registered functions of _register_sqlite_functions on
# micro-units.
_PG_UTILIZATION = "CAST(CAST(LEAST(GREATEST(utilization, 0.0), 1.0) AS text) AS numeric)"
_PG_SM_ACTIVE = "CAST(CAST(LEAST(GREATEST(sm_active, 0.0), 1.0) AS text) AS numeric)"
_PG_JOULES = "CAST(CAST(energy_joules AS text) AS numeric)"
_PG_USED = _pg_half_even("used_units", 1)
_PG_SM_ACTIVE_COST = _pg_half_even("sm_active_units", 1)
_PG_ENERGY = _pg_half_even("energy_tenths", 36)
_PG_COSTED = f"""
            SELECT e.*, CASE WHEN utilization IS NULL THEN 0 ELSE {_PG_USED} * 0.000001 END AS used,
                   {_PG_ENERGY} * 0.000001 AS energy,
                   CASE WHEN sm_active IS NULL THEN NULL ELSE {_PG_SM_ACTIVE_COST} * 0.000001 END AS sm_active_cost
            FROM (SELECT b.*, capacity * {_PG_UTILIZATION} * 1000000 AS used_units,
                         capacity * {_PG_SM_ACTIVE} * 1000000 AS sm_active_units,
                         {_PG_JOULES} * CAST(:energy_factor AS numeric) AS energy_tenths
                  FROM ({_COMMON_BASE}) b) e"""  # noqa: S608 - only constant SQL is inlined
_SQLITE_COSTED = f"""
        SELECT b.*, CASE WHEN utilization IS NULL OR capacity IS NULL THEN 0
                         ELSE finops_used_cost(capacity, utilization) END AS used,
               finops_energy_cost(energy_joules) AS energy,
               CASE WHEN sm_active IS NULL OR capacity IS NULL THEN NULL
                    ELSE finops_used_cost(capacity, sm_active) END AS sm_active_cost
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


def _pg_costing(connection: Connection, catalog: PriceCatalog) -> dict[str, Any]:
    return {"energy_factor": catalog.tariff_per_kwh * catalog.pue * 10}  # ÷ 36 = × 10^6 ÷ 3.6e6


def _sqlite_costing(connection: Connection, catalog: PriceCatalog) -> dict[str, Any]:
    _register_sqlite_functions(connection, catalog)
    return {}


def _common(costed: str) -> TextClause:
    return text(
        _COMMON_INSERT.format(columns=", ".join(LEDGER_COLUMNS), costed=costed, activities=", ".join(ACTIVITIES))
    )


# Per database: the statement of step 5, and what it needs first (parameters of its own, registered functions).
_COSTING: dict[str, tuple[TextClause, Callable[[Connection, PriceCatalog], dict[str, Any]]]] = {
    "postgresql": (_common(_PG_COSTED), _pg_costing),
    "sqlite": (_common(_SQLITE_COSTED), _sqlite_costing),
}

# tmp_ledger_rows with the ledger's column types and tmp_ledger_rates with its capacity as money, so that binds are
# stored as the ledger stores them (money in integer micro-units on SQLite: :class:`finops.db.sqltypes.Money`).
_RATES = table("tmp_ledger_rates", *map(column, ("model", "pricing_model", "hour")), column("capacity", Money()))
WORK_ROWS = table("tmp_ledger_rows", *(column(name, LedgerEntry.__table__.c[name].type) for name in LEDGER_COLUMNS))


def load_prices(
    connection: Connection,
    rates: dict[tuple[str, PricingModel, int], Decimal | None],
    node_models: dict[int, PricingModel],
) -> None:
    """Fill ``tmp_ledger_rates`` with each rate's capacity cost of a whole hour (``rates``: price per GPU-hour by
    GPU model, pricing model and hour, None where the catalog has none; bound as :class:`Money`: integer
    micro-units on SQLite) and ``tmp_ledger_node_models`` with the nodes' pricing models (``node_models``: by node
    id)."""
    if rates:
        connection.execute(
            insert(_RATES),
            [
                {
                    "model": m,
                    "pricing_model": str(p),
                    "hour": h,
                    "capacity": None if r is None else costmodel.capacity_cost(r, HOUR),
                }
                for (m, p, h), r in rates.items()
            ],
        )
    if node_models:
        connection.execute(
            text("INSERT INTO tmp_ledger_node_models VALUES (:node, :model)"),
            [{"node": node, "model": str(model)} for node, model in node_models.items()],
        )


def prepare_work_tables(connection: Connection) -> None:
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
    run_statements(
        connection, [*creates, *emptying(connection, list(_TEMP_TABLES)), f"DROP TABLE IF EXISTS {METERING_TABLE}"]
    )


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


def statement_settings(connection: Connection) -> AbstractContextManager[None]:
    """Apply :data:`_PG_SETTINGS` for the transaction's next statements (PostgreSQL; nothing on SQLite), and put
    the previous values back when the block ends (transaction-local settings: a rollback undoes them too)."""
    return transaction_settings(connection, _PG_SETTINGS)


# A helper connection computing chunks of a rollup (:func:`finops.ledger.rollup.rollup`) runs without parallel
# workers: the helpers keep the cores busy between them, and workers would only add their own overhead.
HELPER_SETTINGS = {"max_parallel_workers_per_gather": "0"}


def fill_gpu_hours(connection: Connection, h0: int, end: int, default_model: PricingModel) -> None:
    """Step 1: fill ``tmp_ledger_gpu_hours`` with the in-service GPU-hours [lo, hi) of [h0, end) that have a row
    in ``tmp_ledger_rates`` (:func:`load_prices`: a rate, or NULL when the model has none), under their node's
    pricing model or ``default_model``."""
    connection.execute(_GPU_HOURS, {"h0": h0, "end": end, "default_model": str(default_model)})


def fill_holdings(connection: Connection, h0: int, end: int) -> None:
    """Step 2: fill ``tmp_ledger_holdings`` with the allocations clipped to the GPU-hours of step 1."""
    connection.execute(_HOLDINGS, {"h0": h0, "end": end})


def fill_split(connection: Connection, everything: bool) -> None:
    """Step 3: fill ``tmp_ledger_split`` with the GPU-hours the Python cost model splits (all of them when
    ``everything``: the reference path, ``sql_costing=False``)."""
    connection.execute(_SPLIT, {"everything": 1 if everything else 0})


def meter(connection: Connection, h0: int, end: int, *, from_tsdb: bool = False) -> None:
    """Step 4: create :data:`METERING_TABLE` (gpu_id, hour, allocation_id, samples, utilization_sum,
    energy_joules, readings, profiled, and ``<activity>_sum``, ``<activity>_n`` per :data:`ACTIVITIES`) from the
    readings of [h0, end), with energy increments from readings up to
    :data:`ENERGY_LOOKBACK_SECONDS` before h0, and hardware activity only when an hour of [h0, end) is in
    ``profiled_hours`` (else readings, profiled and the activity sums are 0); ``from_tsdb``: from the segments of
    [h0, end) in ``tsdb_gpu_metering`` instead (metered from a TSDB before the rebuild:
    :mod:`finops.ingest.tsdb_metering`)."""
    if from_tsdb:
        connection.execute(_TSDB_METERING, {"h0": h0, "end": end})
        return
    profiled = connection.scalar(_PROFILED, {"h0": h0, "end": end}) is not None
    connection.execute(
        _METERING[connection.dialect.name, profiled],
        {"h0": h0, "end": end, "lookback": h0 - ENERGY_LOOKBACK_SECONDS, "gap": ENERGY_LOOKBACK_SECONDS},
    )


def cost_common(connection: Connection, catalog: PriceCatalog, unallocated_team: int) -> None:
    """Step 5: add the ledger rows of the common GPU-hours (those not in ``tmp_ledger_split``) to
    ``tmp_ledger_rows``, costed in SQL with the cost model's formulas at ``catalog``'s tariff, PUE and currency;
    unallocated time goes to team id ``unallocated_team``. On SQLite the cost functions are registered on the
    connection first (:func:`_register_sqlite_functions`)."""
    statement, setup = _COSTING[connection.dialect.name]
    parameters: dict[str, Any] = {"unallocated": unallocated_team, "currency": catalog.currency}
    parameters.update(setup(connection, catalog))
    connection.execute(statement, parameters)


_GPU_SECONDS_BY_MODEL = text("""
SELECT gh.model, CASE WHEN r.capacity IS NULL THEN 0 ELSE 1 END AS priced, SUM(gh.hi - gh.lo) AS gpu_seconds
FROM tmp_ledger_gpu_hours gh
JOIN tmp_ledger_rates r ON r.model = gh.model AND r.pricing_model = gh.pricing_model AND r.hour = gh.hour
GROUP BY gh.model, CASE WHEN r.capacity IS NULL THEN 0 ELSE 1 END
""")


def gpu_seconds_by_model(connection: Connection) -> dict[tuple[str, bool], int]:
    """In-service GPU-seconds of the chunk (step 1) by (GPU model, priced): what the rebuild wrote, priced and
    unpriced."""
    return {(r.model, bool(r.priced)): int(r.gpu_seconds) for r in connection.execute(_GPU_SECONDS_BY_MODEL)}


def work_counts(connection: Connection) -> tuple[int, int]:
    """(GPU-hours of the chunk, of which split by the cost model), from the work tables, for the debug log."""
    gpu_hours = connection.scalar(text("SELECT COUNT(*) FROM tmp_ledger_gpu_hours")) or 0
    split = connection.scalar(text("SELECT COUNT(*) FROM tmp_ledger_split")) or 0
    return gpu_hours, split
