"""Step 4 of a ledger rebuild (:mod:`finops.ledger.rollup`): the metering of a chunk's readings per GPU-hour and
holding — readings with a utilisation and their sum, the energy counter's increments, and the hardware activity
(readings, profiled readings, per activity the sum and count) — into the session-local table
:data:`METERING_TABLE`, from ``gpu_samples`` or from the segments a TSDB metered (``tsdb_gpu_metering``).

Each reading is metered once. What a rollup summed is kept (``gpu_hour_metering``, exact integers in fixed point),
with each GPU's cursor (``metering_cursors``: the instant after its last reading summed) and the holdings the
readings were assigned by (``metered_holdings``); the next rollup meters each GPU's readings from its cursor on and
adds them. A GPU-hour whose holdings changed since (a job imported, ended or moved) is metered again from its start,
and so is a GPU with late readings (:mod:`finops.ledger.metering_state`); the sums are then what metering all of the
hour's readings at once gives, to the last unit. A price or catalogue change re-costs hours without reading a
reading.

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
RATIO_SCALE = 2**40
"""Units of a utilisation or activity ratio in the kept sums: each reading's ratio is rounded down to a multiple of
2^-40 (9.1e-13), so that sums are exact integers and adding a rollup's readings to an earlier rollup's sum gives the
sum of all (a float sum depends on the order of its terms). 2^40 × 3,600 readings an hour stays below 2^53."""
ENERGY_SCALE = 2**20
"""Units of an energy counter increment in the kept sums: 2^-20 J (9.5e-7 J), each increment rounded down."""
MAX_INCREMENT_JOULES = 2**40
"""An energy counter increment of this many joules or more (1.1 TJ: a 700 W GPU for 50 years) is no GPU's energy
but a broken counter: it is left out, as an increment over a gap is, and keeps the sums within 64 bits."""

# 4. Metering of the readings that are new to the kept sums, per GPU, hour and holding: readings with a utilisation, Σ
# utilisation, Σ energy increments. Each GPU's readings from its lower bound lo on (tmp_ledger_cursors: its cursor, or
# the chunk's start, or the start of an hour metered again) to the chunk's end are read. An energy counter that goes
# down was reset (driver reload): the new reading is the energy since then. Increments run between consecutive readings
# that carry a counter value, so a missing value (a failed read, a GPU without a counter) does not lose the energy
# across it: readings are ordered by one 64-bit key o, gpu_id × 2^32 + ts (ids below 2^31, instants before 2106), which
# sorts faster than the pair, negated for a reading without a value, so that those come first, all together, and each
# reading with a value follows the previous one with a value. For the readings with a value, the step dk of k from the
# previous reading is the time since it when that reading is the same GPU's, and more than 2^32 − the chunk's span (far
# more than the gap) when it is another GPU's, so ``dk > gap`` also starts each GPU afresh. The window runs over the
# readings read alone (nothing else in the sort, and PostgreSQL can sort them in parallel workers); the increment of
# each GPU's first reading from lo on, from the GPU's last reading in the lookback before lo (two key lookups per GPU,
# not a scan of the hours before), is a row of its own (the first reading's windowed increment is 0: its predecessor in
# the key order is another GPU's), so every sum adds the same terms as one window over both. Each GPU's first and
# previous reading with a value are searched once (a materialised CTE) and their values then read by key, in scalar
# subqueries that are index lookups whatever the planner estimates. Each reading is assigned to the holding that
# contains it in a GPU-hour that is not shared (its holdings are disjoint), else to none (allocation_id 0: the
# unallocated rest, or a shared GPU-hour as a whole), and summed per GPU-hour key and holding in integer units
# (RATIO_SCALE, ENERGY_SCALE), with the last reading's instant (the GPU's next cursor). Hardware activity rides along
# where the chunk has some (an hour in ``profiled_hours``, which ingest marks when it stores readings that carry
# activity): the readings with any activity field (profiled), and per activity the sum of its values and how many
# readings had one (the firsts' rows carry none). Elsewhere the activity columns are constants, so that GPU-hours
# without profiling data cost the metering no more than before it kept activity. The readings are read per GPU from lo
# by the (gpu_id, ts) key (SQLite: CROSS JOIN, whose order it keeps; PostgreSQL: LATERAL behind OFFSET 0, so that it is
# not flattened into a scan of the day partition); a chunk that no rollup metered before (every GPU from the chunk's
# start) is read by a scan of its day partitions on PostgreSQL instead.
_METERING_SQL = """
CREATE TEMPORARY TABLE tmp_ledger_delta AS
WITH windowed AS (
    SELECT k, k % 4294967296 AS ts, u, n,
           CASE WHEN e IS NULL OR pe IS NULL OR dk IS NULL OR dk > :gap THEN 0.0 WHEN e < pe THEN e ELSE e - pe END
               AS de{windowed_extra}
    FROM (
        SELECT k, u, e, n, k - LAG(k) OVER w AS dk, LAG(e) OVER w AS pe{carried}
        FROM (SELECT k, u, e, n, CASE WHEN e IS NULL THEN -k ELSE k END AS o{carried}
              FROM ({scan}) scanned) keyed
        WINDOW w AS (ORDER BY o ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)
    ) lagged
), bounds AS MATERIALIZED (
    SELECT c.gpu_id,
           (SELECT MIN(ts) FROM gpu_samples WHERE gpu_id = c.gpu_id AND ts >= c.lo AND ts < :end
              AND ts >= :lo_min AND energy_joules IS NOT NULL) AS first_ts,
           (SELECT MAX(ts) FROM gpu_samples WHERE gpu_id = c.gpu_id AND ts >= c.lo - :gap AND ts < c.lo
              AND ts >= :lookback AND ts < :end AND energy_joules IS NOT NULL) AS previous_ts
    FROM tmp_ledger_cursors c WHERE c.lo < :end
), firsts AS (
    SELECT gpu_id * 4294967296 + first_ts AS k, first_ts AS ts, CAST(NULL AS DOUBLE PRECISION) AS u,
           CAST(NULL AS INTEGER) AS n,
           CASE WHEN first_ts - previous_ts > :gap THEN 0.0 WHEN fe < pe THEN fe ELSE fe - pe END AS de{firsts_extra}
    FROM (SELECT b.gpu_id, b.first_ts, b.previous_ts,
                 (SELECT energy_joules FROM gpu_samples
                  WHERE gpu_id = b.gpu_id AND ts = b.first_ts AND ts >= :lo_min AND ts < :end) AS fe,
                 (SELECT energy_joules FROM gpu_samples
                  WHERE gpu_id = b.gpu_id AND ts = b.previous_ts AND ts >= :lookback AND ts < :end) AS pe
          FROM bounds b WHERE b.first_ts IS NOT NULL AND b.previous_ts IS NOT NULL) looked_up
), readings AS (
    SELECT k, ts, u, n, de{union_extra} FROM firsts
    UNION ALL
    SELECT k, ts, u, n, de{union_extra} FROM windowed
)
SELECT CAST(gpu_hour / 4294967296 AS INTEGER) AS gpu_id, gpu_hour % 4294967296 AS hour,
       CAST(COALESCE(allocation_id, 0) AS INTEGER) AS allocation_id, CAST(samples AS INTEGER) AS samples,
       CAST(utilization_units AS BIGINT) AS utilization_units, CAST(energy_units AS BIGINT) AS energy_units,
       CAST(readings AS INTEGER) AS readings, last_ts{outer}
FROM (
    SELECT s.k - s.ts % 3600 AS gpu_hour, d.allocation_id, COUNT(s.u) AS samples,
           COALESCE(SUM({u_units}), 0) AS utilization_units, COALESCE(SUM({de_units}), 0) AS energy_units,
           COUNT(s.n) AS readings, MAX(s.ts) AS last_ts{aggregates}
    FROM readings s
    LEFT JOIN tmp_ledger_holdings d
      ON d.gpu_hour = s.k - s.ts % 3600 AND s.ts >= d.start AND s.ts < d.stop AND d.shared = 0
    GROUP BY s.k - s.ts % 3600, d.allocation_id
) metered
"""
_RATIO_UNITS = {
    "postgresql": "CAST(floor({x} * " + f"{RATIO_SCALE}.0) AS BIGINT)",
    "sqlite": "CAST({x} * " + f"{RATIO_SCALE}.0 AS INTEGER)",
}
"""A non-negative ratio as integer units of 2^-40, rounded down (SQLite's CAST to INTEGER truncates)."""
_ENERGY_UNITS = {
    dialect: "CASE WHEN {x} < "
    + f"{MAX_INCREMENT_JOULES}.0 THEN "
    + units.replace("{scale}", str(ENERGY_SCALE))
    + " END"
    for dialect, units in (
        ("postgresql", "CAST(floor({x} * {scale}.0) AS BIGINT)"),
        ("sqlite", "CAST({x} * {scale}.0 AS INTEGER)"),
    )
}
"""A non-negative energy increment as integer units of 2^-20 J, rounded down; NULL (left out) from
:data:`MAX_INCREMENT_JOULES` on."""
_SCANS = {
    # Every GPU from the chunk's start: the day partitions scanned (PostgreSQL), or the key range-scanned per GPU.
    ("postgresql", True): "SELECT r.gpu_id * 4294967296 + r.ts AS k, r.utilization_ratio AS u, r.energy_joules AS e, "
    "1 AS n{scanned} FROM gpu_samples r WHERE r.ts >= :lo_min AND r.ts < :end",
    ("postgresql", False): "SELECT c.gpu_id * 4294967296 + r.ts AS k, r.utilization_ratio AS u, r.energy_joules AS e, "
    "1 AS n{scanned} FROM tmp_ledger_cursors c CROSS JOIN LATERAL (SELECT * FROM gpu_samples g "
    "WHERE g.gpu_id = c.gpu_id AND g.ts >= c.lo AND g.ts >= :lo_min AND g.ts < :end OFFSET 0) r WHERE c.lo < :end",
    ("sqlite", True): "SELECT r.gpu_id * 4294967296 + r.ts AS k, r.utilization_ratio AS u, r.energy_joules AS e, "
    "1 AS n{scanned} FROM tmp_ledger_cursors c CROSS JOIN gpu_samples r "
    "WHERE r.gpu_id = c.gpu_id AND r.ts >= c.lo AND r.ts < :end AND c.lo < :end",
}
_SCANS["sqlite", False] = _SCANS["sqlite", True]
_CARRIED = "".join(f", {a}" for a in ACTIVITIES)


def _profiled_parts(dialect: str) -> dict[str, str]:
    units = _RATIO_UNITS[dialect]
    return {
        "windowed_extra": _CARRIED,
        "carried": _CARRIED,
        "scanned": "".join(f", r.{a}_ratio AS {a}" for a in ACTIVITIES),
        "firsts_extra": "".join(f", CAST(NULL AS DOUBLE PRECISION) AS {a}" for a in ACTIVITIES),
        "union_extra": _CARRIED,
        "aggregates": ", COUNT(CASE WHEN "
        + " OR ".join(f"s.{a} IS NOT NULL" for a in ACTIVITIES)
        + " THEN 1 END) AS profiled"
        + "".join(
            f", COALESCE(SUM({units.format(x=f's.{a}')}), 0) AS {a}_units, COUNT(s.{a}) AS {a}_n" for a in ACTIVITIES
        ),
        "outer": ", CAST(profiled AS INTEGER) AS profiled"
        + "".join(f", CAST({a}_units AS BIGINT) AS {a}_units, CAST({a}_n AS INTEGER) AS {a}_n" for a in ACTIVITIES),
    }


def _unprofiled_parts(dialect: str) -> dict[str, str]:
    return dict.fromkeys(_profiled_parts(dialect), "") | {
        "outer": ", CAST(0 AS INTEGER) AS profiled"
        + "".join(f", CAST(0 AS BIGINT) AS {a}_units, CAST(0 AS INTEGER) AS {a}_n" for a in ACTIVITIES),
    }


def _metering_statement(dialect: str, cold: bool, profiled: bool) -> TextClause:
    """The metering statement for ``dialect``, reading a chunk no rollup metered before (``cold``) or per GPU from
    its lower bound, with the activity parts filled in when ``profiled``."""
    statement = _METERING_SQL.replace("{scan}", _SCANS[dialect, cold])
    parts = (_profiled_parts if profiled else _unprofiled_parts)(dialect)
    parts |= {"u_units": _RATIO_UNITS[dialect].format(x="s.u"), "de_units": _ENERGY_UNITS[dialect].format(x="s.de")}
    for name, part in parts.items():
        statement = statement.replace("{" + name + "}", part)
    return text(statement)


_METERING = {
    (dialect, cold, profiled): _metering_statement(dialect, cold, profiled)
    for dialect in ("postgresql", "sqlite")
    for cold in (True, False)
    for profiled in (True, False)
}
"""The metering statement by (dialect, whether the chunk is read whole, whether it has profiled hours)."""
_PROFILED = text("SELECT 1 FROM profiled_hours WHERE hour >= :h0 AND hour < :end LIMIT 1")

# 4a. Each GPU's lower bound: its cursor, else the chunk's start (a GPU no rollup metered, or one whose cursor lies
# before the chunk: its readings up to the chunk's start are in the sums of earlier hours).
_CURSORS = text("""
INSERT INTO tmp_ledger_cursors (gpu_id, lo, through)
SELECT g.id, CASE WHEN c.through IS NULL OR c.through < :h0 THEN :h0 ELSE c.through END, c.through
FROM gpus g LEFT JOIN metering_cursors c ON c.gpu_id = g.id
""")
# 4b. A GPU-hour of the chunk some of whose readings were metered (its hour before the GPU's cursor) is metered again
# from its start when its holdings up to the cursor differ from those its readings were assigned by
# (metered_holdings): an allocation added, removed, moved, or the GPU-hour now shared. The GPU's lower bound moves
# back to the first such hour (the readings after it are metered again too).
_CHANGED = text("""
WITH current_holdings AS (
    SELECT h.gpu_id, h.hour, h.allocation_id, h.start,
           CASE WHEN h.stop < c.through THEN h.stop ELSE c.through END AS stop, h.shared
    FROM tmp_ledger_holdings h JOIN tmp_ledger_cursors c ON c.gpu_id = h.gpu_id
    WHERE h.start < c.through
), kept_holdings AS (
    SELECT s.gpu_id, s.hour, s.allocation_id, s.start, s.stop, s.shared FROM metered_holdings s
    WHERE s.hour >= :h0 AND s.hour < :end
), changed AS (
    SELECT gpu_id, MIN(hour) AS hour FROM (
        SELECT * FROM (SELECT * FROM current_holdings EXCEPT SELECT * FROM kept_holdings) added
        UNION ALL
        SELECT * FROM (SELECT * FROM kept_holdings EXCEPT SELECT * FROM current_holdings) removed
    ) differing
    GROUP BY gpu_id
)
UPDATE tmp_ledger_cursors SET lo = (SELECT hour FROM changed WHERE changed.gpu_id = tmp_ledger_cursors.gpu_id)
WHERE EXISTS (SELECT 1 FROM changed
              WHERE changed.gpu_id = tmp_ledger_cursors.gpu_id AND changed.hour < tmp_ledger_cursors.lo)
""")
_BOUNDS = text(
    "SELECT MIN(CASE WHEN lo < :end THEN lo END), COUNT(CASE WHEN lo <> :h0 THEN 1 END) FROM tmp_ledger_cursors"
)
"""The lowest bound below the chunk's end, and how many GPUs are not read from the chunk's start (one round trip)."""

# 4c. The chunk's sums: those kept of the hours before each GPU's lower bound, plus what was metered now.
_UNITS = text(
    """
CREATE TEMPORARY TABLE tmp_ledger_units AS
SELECT gpu_id, hour, allocation_id, CAST(SUM(samples) AS INTEGER) AS samples,
       CAST(SUM(utilization_units) AS BIGINT) AS utilization_units, CAST(SUM(energy_units) AS BIGINT) AS energy_units,
       CAST(SUM(readings) AS INTEGER) AS readings, CAST(SUM(profiled) AS INTEGER) AS profiled{unit_sums}
FROM (
    SELECT m.gpu_id, m.hour, m.allocation_id, m.samples, m.utilization_units, m.energy_units, m.readings,
           m.profiled{kept}
    FROM gpu_hour_metering m JOIN tmp_ledger_cursors c ON c.gpu_id = m.gpu_id
    WHERE m.hour >= :h0 AND m.hour < :end AND m.hour < c.lo
    UNION ALL
    SELECT gpu_id, hour, allocation_id, samples, utilization_units, energy_units, readings, profiled{new}
    FROM tmp_ledger_delta
) parts
GROUP BY gpu_id, hour, allocation_id
""".replace(
        "{unit_sums}",
        "".join(
            f", CAST(SUM({a}_units) AS BIGINT) AS {a}_units, CAST(SUM({a}_n) AS INTEGER) AS {a}_n" for a in ACTIVITIES
        ),
    )
    .replace("{kept}", "".join(f", m.{a}_units, m.{a}_n" for a in ACTIVITIES))
    .replace("{new}", "".join(f", {a}_units, {a}_n" for a in ACTIVITIES))
)
# 4d. The metering table the costing reads (allocation_id NULL: none), the sums as floats.
_FROM_UNITS = text(
    f"""
CREATE TEMPORARY TABLE tmp_ledger_metering AS
SELECT gpu_id, hour, NULLIF(allocation_id, 0) AS allocation_id, samples,
       CAST(utilization_units AS DOUBLE PRECISION) / {RATIO_SCALE}.0 AS utilization_sum,
       CAST(energy_units AS DOUBLE PRECISION) / {ENERGY_SCALE}.0 AS energy_joules, readings, profiled{{activities}}
FROM tmp_ledger_units
""".replace(  # noqa: S608 - only constant SQL is inlined
        "{activities}",
        "".join(f", CAST({a}_units AS DOUBLE PRECISION) / {RATIO_SCALE}.0 AS {a}_sum, {a}_n" for a in ACTIVITIES),
    )
)
# 4e. What the rollup keeps of the chunk besides its sums: each GPU's new cursor (after its last reading metered, never
# before its cursor), and the holdings the readings before it were assigned by.
_NEW_CURSORS = text("""
INSERT INTO tmp_ledger_new_cursors (gpu_id, through)
SELECT c.gpu_id, CASE WHEN c.through IS NULL OR d.last_ts + 1 > c.through THEN d.last_ts + 1 ELSE c.through END
FROM tmp_ledger_cursors c JOIN (SELECT gpu_id, MAX(last_ts) AS last_ts FROM tmp_ledger_delta GROUP BY gpu_id) d
  ON d.gpu_id = c.gpu_id
""")
_HOLDINGS_METERED = text("""
INSERT INTO tmp_ledger_metered_holdings (gpu_id, hour, allocation_id, start, stop, shared)
SELECT h.gpu_id, h.hour, h.allocation_id, h.start, CASE WHEN h.stop < t.through THEN h.stop ELSE t.through END,
       h.shared
FROM tmp_ledger_holdings h
JOIN (SELECT c.gpu_id, COALESCE(n.through, c.through) AS through
      FROM tmp_ledger_cursors c LEFT JOIN tmp_ledger_new_cursors n ON n.gpu_id = c.gpu_id) t
  ON t.gpu_id = h.gpu_id
WHERE h.start < t.through
""")

# PostgreSQL: the readings go from the window straight into a hash join with the holdings and a hash aggregate (a few
# GPU-hours × holdings groups), whatever the statistics of the day partitions say. Freshly written partitions that
# autovacuum has not analysed yet are estimated at a few hundred rows, for which the planner chose to sort the
# window's output twice more (a merge join, then a sorted aggregate: a third more time on 368,640 readings), or to
# compare every reading with every holding in a nested loop (12 s instead of 0.6 s for an hour of 512 GPUs). The
# per-GPU reads behind LATERAL stay nested loops: nothing else can run them.
_PG_METERING_SETTINGS = {"enable_mergejoin": "off", "enable_sort": "off", "enable_nestloop": "off"}

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


def meter(connection: Connection, h0: int, end: int, *, from_tsdb: bool = False) -> int:
    """Step 4: create :data:`METERING_TABLE` (gpu_id, hour, allocation_id, samples, utilization_sum,
    energy_joules, readings, profiled, and ``<activity>_sum``, ``<activity>_n`` per :data:`ACTIVITIES`) for the
    hours [h0, end), from the sums kept for them and the readings new to those sums: per GPU from its cursor, from
    the start of an hour whose holdings changed, from h0 where nothing was kept (energy increments from readings up
    to :data:`ENERGY_LOOKBACK_SECONDS` before), and fill the work tables of what the rollup keeps
    (``tmp_ledger_units``, ``tmp_ledger_new_cursors``, ``tmp_ledger_metered_holdings``:
    :func:`finops.ledger.metering_state.keep`). Hardware activity is read only when an hour of [h0, end) is in
    ``profiled_hours``. Needs steps 1–2's ``tmp_ledger_holdings``. Returns how many readings were read.

    ``from_tsdb``: from the segments of [h0, end) in ``tsdb_gpu_metering`` instead (metered from a TSDB before the
    rebuild: :mod:`finops.ingest.tsdb_metering`); nothing is kept, and 0 is returned."""
    if from_tsdb:
        connection.execute(_TSDB_METERING, {"h0": h0, "end": end})
        return 0
    bounds = {"h0": h0, "end": end}
    connection.execute(_CURSORS, bounds)
    connection.execute(_CHANGED, bounds)
    lowest, not_from_start = connection.execute(_BOUNDS, bounds).one()
    lo_min = end if lowest is None else int(lowest)
    cold = lo_min == h0 and not not_from_start
    profiled = connection.scalar(_PROFILED, bounds) is not None
    with transaction_settings(connection, _PG_METERING_SETTINGS):
        connection.execute(
            _METERING[connection.dialect.name, cold, profiled],
            {
                "lo_min": lo_min,
                "end": end,
                "lookback": lo_min - ENERGY_LOOKBACK_SECONDS,
                "gap": ENERGY_LOOKBACK_SECONDS,
            },
        )
    connection.execute(_UNITS, bounds)
    connection.execute(_FROM_UNITS)
    connection.execute(_NEW_CURSORS)
    connection.execute(_HOLDINGS_METERED)
    return int(connection.scalar(text("SELECT COALESCE(SUM(readings), 0) FROM tmp_ledger_delta")) or 0)
