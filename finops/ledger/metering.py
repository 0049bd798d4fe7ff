"""Step 4 of a ledger rebuild (:mod:`finops.ledger.rollup`): the metering of a chunk's readings per GPU-hour and
holding — readings with a utilisation and their sum, the energy counter's increments, and the hardware activity
(readings, profiled readings, per activity the sum and count) — into the session-local table
:data:`METERING_TABLE`, from ``gpu_samples`` or from the segments a TSDB metered (``tsdb_gpu_metering``).

The other steps, and the statement settings all of them run under, are in :mod:`finops.ledger.sql`.
"""

from __future__ import annotations

from sqlalchemy import Connection, TextClause, text

from finops.db.dialect import transaction_settings
from finops.ledger.sql import ACTIVITIES
from finops.timeutil import HOUR

ENERGY_LOOKBACK_SECONDS = HOUR
"""An energy counter increment counts only if the previous reading is at most this much older: the energy
over a longer gap (a collector down for hours) cannot be placed in an hour, so it is left out. The rule
does not depend on how the hours are cut into rebuilds."""

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

# PostgreSQL: the readings go from the window straight into a hash join with the holdings and a hash aggregate (a few
# GPU-hours × holdings groups), whatever the statistics of the day partitions say. Freshly written partitions that
# autovacuum has not analysed yet are estimated at a few hundred rows, for which the planner chose to sort the
# window's output twice more (a merge join, then a sorted aggregate): a third more time on 368,640 readings, and
# more with every column the sorts carry.
_PG_METERING_SETTINGS = {"enable_mergejoin": "off", "enable_sort": "off"}

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
    with transaction_settings(connection, _PG_METERING_SETTINGS):
        connection.execute(
            _METERING[connection.dialect.name, profiled],
            {"h0": h0, "end": end, "lookback": h0 - ENERGY_LOOKBACK_SECONDS, "gap": ENERGY_LOOKBACK_SECONDS},
        )
