"""The SQL of a ledger rebuild (:mod:`finops.ledger.rollup`), where it differs by database too: the session-local
work tables, the set-based steps 1, 2, 3 and 5 of a rebuild (in-service GPU-hours and their rates, holdings, the
GPU-hours to split, the costing of the common GPU-hours) and the statement settings they run under. Step 4, the
metering of the readings, is :mod:`finops.ledger.metering`.

Each step is a function that runs its statement on a connection with the rollup's work tables
(:func:`prepare_work_tables`); times are epoch seconds, hours hour-aligned, [h0, end) the chunk clipped at the
rollup's ``until``. The per-database variants are chosen here (the costing's exact arithmetic: ``NUMERIC`` on
PostgreSQL, registered Python functions on SQLite); generic differences (``TRUNCATE``, settings, ``COPY``,
``ANALYZE``) are :mod:`finops.db.dialect`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, TextClause, column, insert, table, text

from collector.contract.wire import ACTIVITY_COLUMNS
from finops.db.dialect import NO_PARALLEL_WORKERS, SHORT_SPAN_HOURS, emptying, run_statements, transaction_settings
from finops.db.ledger_tables import LedgerEntry
from finops.db.sqltypes import MONEY_SCALE, Money
from finops.ledger import costmodel
from finops.pricing.catalog import PriceCatalog, PricingModel
from finops.timeutil import HOUR

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
    # capacity: the cost of the hour's span (the hour, or up to the rollup's end in the hour that cuts); NULL: the
    # GPU model has no price under that pricing model at that hour (its GPU-hours are unpriced).
    "tmp_ledger_rates": "model VARCHAR(128) NOT NULL, pricing_model VARCHAR(16) NOT NULL, hour BIGINT NOT NULL, "
    "capacity {money}, PRIMARY KEY (model, pricing_model, hour)",
    "tmp_ledger_node_models": "node_id INTEGER PRIMARY KEY, pricing_model VARCHAR(16) NOT NULL",
    # The in-service periods of GPUs clipped to the chunk's hours [lo, hi): a GPU's inventory periods, else (a GPU a
    # collector reported) from in_service_from on. Allocations add in-service time of their own (step 1).
    "tmp_ledger_service": "gpu_id INTEGER NOT NULL, hour BIGINT NOT NULL, lo BIGINT NOT NULL, hi BIGINT NOT NULL",
    # covered = 1: a service period covers the GPU-hour's whole span [hour, min(hour + 3600, end)): the hour, or up
    # to the rollup's end where that cuts it (the current hour).
    "tmp_ledger_gpu_hours": "gpu_id INTEGER NOT NULL, hour BIGINT NOT NULL, lo BIGINT NOT NULL, hi BIGINT NOT NULL, "
    "covered INTEGER NOT NULL, model VARCHAR(128) NOT NULL, pricing_model VARCHAR(16) NOT NULL, "
    "PRIMARY KEY (gpu_id, hour)",
    "tmp_ledger_holdings": "gpu_id INTEGER NOT NULL, hour BIGINT NOT NULL, gpu_hour BIGINT NOT NULL, "
    "allocation_id INTEGER NOT NULL, "
    "job_pk INTEGER NOT NULL, team_id INTEGER NOT NULL, start BIGINT NOT NULL, stop BIGINT NOT NULL, "
    "share_num INTEGER NOT NULL, share_den INTEGER NOT NULL, shared INTEGER NOT NULL",
    "tmp_ledger_split": "gpu_id INTEGER NOT NULL, hour BIGINT NOT NULL, shared INTEGER NOT NULL, "
    "PRIMARY KEY (gpu_id, hour)",
    # The chunk's ledger rows: the ledger's own columns (a binary COPY moves them between connections).
    "tmp_ledger_rows": "{ledger_columns}",
    # Step 4 (finops.ledger.metering): per GPU, its cursor (NULL: never metered) and the instant the readings are
    # read from; the new cursors; the holdings the readings before them were assigned by.
    "tmp_ledger_cursors": "gpu_id INTEGER PRIMARY KEY, lo BIGINT NOT NULL, through BIGINT",
    "tmp_ledger_new_cursors": "gpu_id INTEGER PRIMARY KEY, through BIGINT NOT NULL",
    "tmp_ledger_metered_holdings": "gpu_id INTEGER NOT NULL, hour BIGINT NOT NULL, allocation_id INTEGER NOT NULL, "
    "start BIGINT NOT NULL, stop BIGINT NOT NULL, shared INTEGER NOT NULL",
}
# Created by the metering statements themselves (CREATE … AS, which PostgreSQL can run with parallel workers; the
# SELECT of an INSERT it cannot): gpu_id, hour, allocation_id, samples, utilization_sum, energy_joules, readings,
# profiled and, per activity of ACTIVITIES, <activity>_sum and <activity>_n; before it, the sums of the readings
# metered now and of the whole chunk in integer units (finops.ledger.metering).
METERING_TABLE = "tmp_ledger_metering"
_METERING_TABLES = ("tmp_ledger_delta", "tmp_ledger_units", METERING_TABLE)

# 1. In-service GPU-hours of the chunk that have a row in tmp_ledger_rates (a rate, or NULL: unpriced). A GPU is in
# service over its inventory periods (gpu_service) when it has any, else from in_service_from on when a collector
# reported it (a UUID), and while an allocation holds it whatever those say: first the periods clipped to each hour
# (tmp_ledger_service), then per GPU-hour the span [lo, hi) from the earliest to the latest in-service instant of
# the periods and the allocations, and whether a period covers the whole hour. Where they leave gaps inside [lo, hi)
# the GPU-hour is split by the cost model (step 3), which counts only the in-service seconds.
_SERVICE = text("""
WITH RECURSIVE hours (hour) AS (
    SELECT CAST(:h0 AS BIGINT) UNION ALL SELECT hour + 3600 FROM hours WHERE hour + 3600 < :end
), periods (gpu_id, start, stop) AS (
    SELECT s.gpu_id, s.start, CASE WHEN s."end" IS NULL OR s."end" > :end THEN CAST(:end AS BIGINT) ELSE s."end" END
    FROM gpu_service s WHERE s.start < :end AND (s."end" IS NULL OR s."end" > :h0)
    UNION ALL
    SELECT g.id, g.in_service_from, CAST(:end AS BIGINT) FROM gpus g
    WHERE g.uuid IS NOT NULL AND g.in_service_from < :end
      AND NOT EXISTS (SELECT 1 FROM gpu_service s WHERE s.gpu_id = g.id)
)
INSERT INTO tmp_ledger_service (gpu_id, hour, lo, hi)
SELECT p.gpu_id, h.hour, CASE WHEN p.start > h.hour THEN p.start ELSE h.hour END,
       CASE WHEN p.stop < h.hour + 3600 THEN p.stop ELSE h.hour + 3600 END
FROM periods p JOIN hours h ON p.start < h.hour + 3600 AND p.stop > h.hour
""")
_GPU_HOURS = text("""
WITH RECURSIVE hours (hour) AS (
    SELECT CAST(:h0 AS BIGINT) UNION ALL SELECT hour + 3600 FROM hours WHERE hour + 3600 < :end
), pieces (gpu_id, hour, lo, hi, covered) AS (
    SELECT gpu_id, hour, lo, hi,
           CASE WHEN lo = hour AND hi = CASE WHEN hour + 3600 < :end THEN hour + 3600 ELSE :end END THEN 1 ELSE 0 END
    FROM tmp_ledger_service
    UNION ALL
    SELECT a.gpu_id, h.hour, CASE WHEN a.start > h.hour THEN a.start ELSE h.hour END,
           CASE WHEN a."end" IS NOT NULL AND a."end" < h.hour + 3600 AND a."end" < :end THEN a."end"
                WHEN h.hour + 3600 < :end THEN h.hour + 3600 ELSE :end END, 0
    FROM allocations a JOIN hours h ON a.start < h.hour + 3600 AND (a."end" IS NULL OR a."end" > h.hour)
    WHERE a.start < :end AND (a."end" IS NULL OR a."end" > :h0)
)
INSERT INTO tmp_ledger_gpu_hours (gpu_id, hour, lo, hi, covered, model, pricing_model)
SELECT p.gpu_id, p.hour, MIN(p.lo), MAX(p.hi), MAX(p.covered), g.model, COALESCE(n.pricing_model, :default_model)
FROM pieces p JOIN gpus g ON g.id = p.gpu_id LEFT JOIN tmp_ledger_node_models n ON n.node_id = g.node_id
WHERE p.hi > p.lo
  AND EXISTS (SELECT 1 FROM tmp_ledger_rates r WHERE r.model = g.model
              AND r.pricing_model = COALESCE(n.pricing_model, :default_model) AND r.hour = p.hour)
GROUP BY p.gpu_id, p.hour, g.model, COALESCE(n.pricing_model, :default_model)
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

# 3. GPU-hours the Python cost model splits (all of them when :everything = 1): a partial in-service hour (gaps in
# its service included: no period covers it and no one allocation holds it all), or holdings other than one
# whole-GPU allocation all hour. The hour's span ends at the rollup's end where that cuts it (the current hour of a
# 5-minute rollup): a GPU in service and held by one job up to then is costed in SQL, for the span's seconds.
_SPLIT = text("""
INSERT INTO tmp_ledger_split (gpu_id, hour, shared)
SELECT gh.gpu_id, gh.hour, COALESCE(MAX(h.shared), 0)
FROM tmp_ledger_gpu_hours gh
LEFT JOIN tmp_ledger_holdings h ON h.gpu_id = gh.gpu_id AND h.hour = gh.hour
GROUP BY gh.gpu_id, gh.hour, gh.lo, gh.hi, gh.covered
HAVING :everything = 1 OR gh.lo <> gh.hour OR gh.hi <> CASE WHEN gh.hour + 3600 < :end THEN gh.hour + 3600 ELSE :end END
    OR COUNT(h.allocation_id) > 1
    OR (COUNT(h.allocation_id) = 0 AND gh.covered = 0)
    OR (COUNT(h.allocation_id) = 1
        AND (MIN(h.start) <> gh.lo OR MAX(h.stop) <> gh.hi OR MAX(h.share_num) <> MAX(h.share_den)))
""")

# 5. The common GPU-hours, costed in SQL: their base columns, then (_PG_COSTED, _SQLITE_COSTED) the database's exact
# used and energy cost, then the ledger row.
_COMMON_BASE = """
SELECT gh.hour, gh.gpu_id, h.job_pk, COALESCE(h.team_id, :unallocated) AS team_id, r.capacity,
       COALESCE(m.samples, 0) AS sample_count, COALESCE(m.energy_joules, 0.0) AS energy_joules,
       CASE WHEN h.job_pk IS NOT NULL AND m.samples > 0 THEN m.utilization_sum / m.samples END AS utilization,
       gh.pricing_model,
       CASE WHEN h.job_pk IS NOT NULL AND m.readings > 0
            THEN ((gh.hi - gh.lo) * m.profiled + m.readings - 1) / m.readings ELSE 0 END AS profiled_seconds,
       gh.hi - gh.lo AS span{activity_means}
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
SELECT hour, gpu_id, job_pk, team_id, span,
       CASE WHEN utilization IS NULL THEN 0.0 ELSE span * utilization END, sample_count, energy_joules,
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
    end: int,
) -> None:
    """Fill ``tmp_ledger_rates`` with each rate's capacity cost of its hour's span, the hour or, for the hour the
    rollup's ``end`` (epoch seconds) cuts, up to ``end`` (``rates``: price per GPU-hour by GPU model, pricing model
    and hour, None where the catalog has none; bound as :class:`Money`: integer micro-units on SQLite), and
    ``tmp_ledger_node_models`` with the nodes' pricing models (``node_models``: by node id)."""
    if rates:
        connection.execute(
            insert(_RATES),
            [
                {
                    "model": m,
                    "pricing_model": str(p),
                    "hour": h,
                    "capacity": None if r is None else costmodel.capacity_cost(r, min(HOUR, end - h)),
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
        connection,
        [
            *creates,
            # The metering looks each reading's holdings up by GPU-hour: an index keeps that a lookup per reading
            # when the planner underestimates the readings of day partitions not yet analysed (else it may compare
            # every reading with every holding).
            "CREATE INDEX IF NOT EXISTS tmp_ledger_holdings_gpu_hour ON tmp_ledger_holdings (gpu_hour)",
            *emptying(connection, list(_TEMP_TABLES)),
            *(f"DROP TABLE IF EXISTS {t}" for t in _METERING_TABLES),
        ],
    )


# PostgreSQL settings for the rebuild's statements, restored afterwards: float output as the shortest round-trip
# text (the costing reads float readings through it; > 0 selects it), the sort of a chunk's readings in memory
# (a day of 1,024 GPUs read every minute takes ~150 MB; more spills to disk), and no JIT compilation (it costs
# more than it saves on statements planned afresh for every chunk).
_PG_SETTINGS = {"extra_float_digits": "1", "work_mem": "256MB", "jit": "off"}
# For a chunk of many hours, parallel workers priced so that the metering's scan and sort of the readings are shared
# with them (the workers' tuples arrive sorted; the default costs keep the whole sort in the session's own process).
# The other statements read temporary tables, which workers cannot.
_PG_PARALLEL = {"parallel_setup_cost": "0", "parallel_tuple_cost": "0"}


def statement_settings(connection: Connection, hours: int) -> AbstractContextManager[None]:
    """Apply :data:`_PG_SETTINGS` for the transaction's next statements (PostgreSQL; nothing on SQLite), with
    parallel workers for a chunk of ``hours`` ≥ :data:`finops.db.dialect.SHORT_SPAN_HOURS` and none for a shorter
    one (the 5-minute cycle's), and put the previous values back when the block ends (transaction-local settings: a
    rollback undoes them too)."""
    workers = _PG_PARALLEL if hours >= SHORT_SPAN_HOURS else NO_PARALLEL_WORKERS
    return transaction_settings(connection, {**_PG_SETTINGS, **workers})


# A helper connection computing chunks of a rollup (:func:`finops.ledger.rollup.rollup`) runs without parallel
# workers: the helpers keep the cores busy between them, and workers would only add their own overhead.
HELPER_SETTINGS = NO_PARALLEL_WORKERS


def fill_gpu_hours(connection: Connection, h0: int, end: int, default_model: PricingModel) -> None:
    """Step 1: fill ``tmp_ledger_gpu_hours`` with the in-service GPU-hours [lo, hi) of [h0, end) that have a row
    in ``tmp_ledger_rates`` (:func:`load_prices`: a rate, or NULL when the model has none), under their node's
    pricing model or ``default_model``; their service periods clipped to the hours in ``tmp_ledger_service``."""
    connection.execute(_SERVICE, {"h0": h0, "end": end})
    connection.execute(_GPU_HOURS, {"h0": h0, "end": end, "default_model": str(default_model)})


def fill_holdings(connection: Connection, h0: int, end: int) -> None:
    """Step 2: fill ``tmp_ledger_holdings`` with the allocations clipped to the GPU-hours of step 1."""
    connection.execute(_HOLDINGS, {"h0": h0, "end": end})


def fill_split(connection: Connection, end: int, everything: bool) -> None:
    """Step 3: fill ``tmp_ledger_split`` with the GPU-hours the Python cost model splits (all of them when
    ``everything``: the reference path, ``sql_costing=False``); ``end`` (epoch seconds) is where the rollup cuts its
    last hour."""
    connection.execute(_SPLIT, {"everything": 1 if everything else 0, "end": end})


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
SELECT g.model, CASE WHEN r.allocated_cost IS NULL THEN 0 ELSE 1 END AS priced, SUM(r.seconds) AS gpu_seconds
FROM tmp_ledger_rows r JOIN gpus g ON g.id = r.gpu_id
GROUP BY g.model, CASE WHEN r.allocated_cost IS NULL THEN 0 ELSE 1 END
""")


def gpu_seconds_by_model(connection: Connection) -> dict[tuple[str, bool], int]:
    """In-service GPU-seconds of the chunk's rows (``tmp_ledger_rows``, once written) by (GPU model, priced): what
    the rebuild wrote, priced and unpriced (an unpriced row has no allocated cost)."""
    return {(r.model, bool(r.priced)): int(r.gpu_seconds) for r in connection.execute(_GPU_SECONDS_BY_MODEL)}


def work_counts(connection: Connection) -> tuple[int, int]:
    """(GPU-hours of the chunk, of which split by the cost model), from the work tables, for the debug log."""
    gpu_hours = connection.scalar(text("SELECT COUNT(*) FROM tmp_ledger_gpu_hours")) or 0
    split = connection.scalar(text("SELECT COUNT(*) FROM tmp_ledger_split")) or 0
    return gpu_hours, split
