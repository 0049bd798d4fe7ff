"""Idle runs of readings, found a UTC day at a time from the idle readings alone where they tell all.

A run (:mod:`finops.analysis.idle`) is a run of consecutive readings of one GPU with utilisation ≤ a threshold and
no gap longer than the max gap between them; it covers [its first reading, the reading after its last one, or the
last one + the max gap when that comes later or never). It is found a UTC day at a time (a day partition of
``gpu_samples``), on helper connections where it can, by set-based SQL that reads the day's idle readings once and
the other readings only where they may matter; the days' runs are then joined.

**Candidates.** The day's idle readings (utilisation ≤ the threshold) alone, sorted by GPU and time, fall into
*candidates*: idle readings at most the max gap apart. Every run lies within one candidate (a gap longer than the max
gap ends a run whatever lies in it), and a candidate is one run unless other readings lie between its idle ones:
busy readings split it. So each candidate that could last the window (or reaches an end of the day) counts the
readings of its GPU in [its first, its last reading] by the ``(gpu_id, ts)`` key, one index range each: as many as
its idle readings, and it is a run as it is. Its end is the GPU's next reading after its last one with a
utilisation, looked up by key: the run covers until it, at most the max gap on.

**Mixed candidates.** A candidate with other readings among its idle ones (busy readings, or readings without a
utilisation, which count as none) has its runs found from every reading in [its first, its last + the max gap],
read by key: one window over them gives the runs one window over the whole day would, since no reading outside that
range lies within the max gap of its idle readings. Only those candidates' readings are read twice.

**The ends of a day.** A run whose next reading lies in a later day may go on there: a run of that day starting at
that reading, within the max gap, is the same run, and the two are joined (their counts added, the larger memory
kept). A run that reaches the end of the period ends as a scan of the whole history would end it: at the first
reading past the period, if within the max gap. Runs that cannot last the window and touch neither end of the day
are left out by the statements themselves.

Each run counts its readings, those with a thermal clocks-event reason, those with a power one, those with either
and their mean SM clock (:data:`collector.contract.clocks_events.THERMAL_MASK`, ``POWER_MASK``), from
``clocks_event_reasons`` and ``sm_clock_hertz`` where the table has them.
"""

from __future__ import annotations

import json
import queue
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, TextClause, text

from collector.contract.clocks_events import POWER_MASK, THERMAL_MASK
from finops.analysis.idle_pieces import IdleRun, RunPiece, joined_runs
from finops.db.dialect import (
    NO_PARALLEL_WORKERS,
    SHORT_SPAN_HOURS,
    json_rows,
    set_local,
    supports_helper_connections,
    transaction_settings,
    write_mark,
)
from finops.ingest.partitions import DAY, floor_day
from finops.timeutil import HOUR

GPU_KEY = 4_294_967_296
"""A reading's key is ``gpu_id`` × 2^32 + its epoch second (ids below 2^31, instants before 2106): one 64-bit
integer that sorts by GPU, then time (the ledger's metering orders readings the same way)."""

# Per run: its first and last reading's keys, its readings, the most memory, and its readings with a thermal, a
# power, either clocks-event reason, and the sum and count of the SM clocks of those with either.
RUN_SUMS = f"""MIN(k) AS first_k, MAX(k) AS last_k, COUNT(*) AS readings, MAX(COALESCE(mem, 0)) AS max_mem,
           SUM(CASE WHEN (COALESCE(clk, 0) & {THERMAL_MASK}) <> 0 THEN 1 ELSE 0 END) AS thermal,
           SUM(CASE WHEN (COALESCE(clk, 0) & {POWER_MASK}) <> 0 THEN 1 ELSE 0 END) AS power,
           SUM(CASE WHEN (COALESCE(clk, 0) & {THERMAL_MASK | POWER_MASK}) <> 0 THEN 1 ELSE 0 END) AS throttled,
           SUM(CASE WHEN (COALESCE(clk, 0) & {THERMAL_MASK | POWER_MASK}) <> 0 THEN sm END) AS sm_sum,
           COUNT(CASE WHEN (COALESCE(clk, 0) & {THERMAL_MASK | POWER_MASK}) <> 0 THEN sm END) AS sm_n"""
# Runs worth keeping: those that can last the window, and those that may go on in the day before or after.
_WORTH = """MAX(k) - MIN(k) + :max_gap >= :window OR MIN(k) % 4294967296 <= :c0 + :max_gap
           OR MAX(k) % 4294967296 + :max_gap >= :c1"""
# The GPU's next reading with a utilisation after a run's last one (an ordered index probe: LIMIT 1).
_NEXT_TS = """(SELECT n.ts FROM {table} n WHERE n.gpu_id = runs.first_k / 4294967296
                  AND n.ts > runs.last_k % 4294967296 AND n.utilization_ratio IS NOT NULL ORDER BY n.ts LIMIT 1)"""

# The candidates of a day (module docstring): its idle readings in key order, a candidate starting where the
# previous idle reading is another GPU's or more than the max gap before; per candidate its sums, the readings of
# its GPU in [first, last] by key (present), and for a candidate that is a run (present = readings) its next reading.
_CANDIDATES_SQL = f"""
WITH numbered AS (
    SELECT k, mem, clk, sm,
           SUM(CASE WHEN pk IS NULL OR k - pk > :max_gap THEN 1 ELSE 0 END)
               OVER (ORDER BY k ROWS UNBOUNDED PRECEDING) AS run
    FROM (
        SELECT k, mem, clk, sm, LAG(k) OVER (ORDER BY k) AS pk
        FROM (SELECT r.gpu_id * 4294967296 + r.ts AS k, r.memory_used_bytes AS mem, {{clocks}}
              FROM {{source}} r
              WHERE {{per_gpu}}r.ts >= :c0 AND r.ts < :c1 AND r.utilization_ratio <= :threshold) idle
    ) lagged
), runs AS (
    SELECT {RUN_SUMS} FROM numbered GROUP BY run HAVING {_WORTH}
), counted AS (
    SELECT runs.*, (SELECT COUNT(*) FROM {{table}} n WHERE n.gpu_id = runs.first_k / 4294967296
                      AND n.ts >= runs.first_k % 4294967296 AND n.ts <= runs.last_k % 4294967296) AS present
    FROM runs
)
SELECT first_k, last_k, readings, max_mem, thermal, power, throttled, sm_sum, sm_n, present,
       CASE WHEN present = readings THEN {_NEXT_TS.replace("runs.", "counted.")} END AS next_ts
FROM counted
"""  # noqa: S608 - the f-string only inlines this module's constant fragments

# The runs of mixed candidates (module docstring): every reading with a utilisation in their ranges (a JSON list of
# {{gpu_id, lo, hi}}), a window in key order (a run starts at an idle reading whose predecessor is missing, busy or
# more than the max gap before it), and per run its sums. next_k: the key of the reading after the run's last one
# when it is the same GPU's, else NULL and next_ts the GPU's next reading looked up by key.
_MIXED_SQL = f"""
WITH neighbours AS (
    SELECT k, i, mem, clk, sm, LAG(k) OVER w AS pk, LAG(i) OVER w AS pi, LEAD(k) OVER w AS nk
    FROM (SELECT r.gpu_id * 4294967296 + r.ts AS k, CASE WHEN r.utilization_ratio <= :threshold THEN 1 ELSE 0 END AS i,
                 r.memory_used_bytes AS mem, {{clocks}}
          FROM {{near}}
          WHERE r.utilization_ratio IS NOT NULL) near
    WINDOW w AS (ORDER BY k ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING)
), numbered AS (
    SELECT k, i, mem, clk, sm, COALESCE(nk, k) AS nk,
           SUM(CASE WHEN i = 1 AND (pk IS NULL OR pi = 0 OR k - pk > :max_gap) THEN 1 ELSE 0 END)
               OVER (ORDER BY k ROWS UNBOUNDED PRECEDING) AS run
    FROM neighbours
), runs AS (
    SELECT {RUN_SUMS}, MAX(nk) AS next_k FROM numbered WHERE i = 1 GROUP BY run HAVING {_WORTH}
)
SELECT first_k, last_k, readings, max_mem, thermal, power, throttled, sm_sum, sm_n,
       CASE WHEN next_k > last_k AND next_k - last_k < 4294967296 - :span THEN next_k END AS next_k,
       CASE WHEN next_k = last_k OR next_k - last_k >= 4294967296 - :span THEN {_NEXT_TS} END AS next_ts
FROM runs
"""  # noqa: S608 - the f-string only inlines this module's constant fragments
CLOCK_COLUMNS = "r.clocks_event_reasons AS clk, r.sm_clock_hertz AS sm"
NO_CLOCK_COLUMNS = "CAST(NULL AS BIGINT) AS clk, CAST(NULL AS DOUBLE PRECISION) AS sm"
_PER_GPU = {"sqlite": "r.gpu_id IN (SELECT g.id FROM {gpus}) AND ", "postgresql": ""}
# PostgreSQL reads the idle readings of a chunk by a scan of its day's partition, or, for a chunk that is a small part
# of its day so far (KEYED_SHARE), per GPU by the (gpu_id, ts) key behind LATERAL and OFFSET 0 (not flattened into
# that scan): a partition holds every reading of its day so far, so the scan of a scheduled re-judging (an hour or two
# and the margins) late in the day would read the whole day up to now, 8 × more at 11:00 than at 01:00 for the same
# hour judged (SQLite always reads per GPU: _PER_GPU). Such a chunk's mixed candidates are read per range the same
# way, where the planner otherwise joins the ranges (a JSON list it estimates at 100 rows) to a scan of the partition.
KEYED_SHARE = 0.5
"""A chunk spanning less than this share of its day so far is read by key (:meth:`_Statements.of_chunk`): on
PostgreSQL a reading read by key costs 1.1 to 1.5 times one read by the scan of its partition (10,000 GPUs, the day's
first hour and a half re-judged: 2.0 s by key, 1.8 s by the scan; 512 GPUs: 0.06 and 0.04 s)."""
_COLUMNS = "x.gpu_id, x.ts, x.utilization_ratio, x.memory_used_bytes{clock_columns}"
_BY_GPU = f"""{{gpus}} CROSS JOIN LATERAL (SELECT {_COLUMNS}
    FROM {{table}} x WHERE x.gpu_id = g.id AND x.ts >= :c0 AND x.ts < :c1 AND x.utilization_ratio <= :threshold
    OFFSET 0)"""  # noqa: S608 - constant fragments only
_NEAR_BY_KEY = f"""{{ranges}} CROSS JOIN LATERAL (SELECT {_COLUMNS}
    FROM {{table}} x WHERE x.gpu_id = g.gpu_id AND x.ts >= g.lo AND x.ts <= g.hi OFFSET 0) r"""  # noqa: S608 - constant fragments only
_NEAR_JOINED = "{ranges} JOIN {table} r ON r.gpu_id = g.gpu_id AND r.ts >= g.lo AND r.ts <= g.hi"
_RANGES = {"gpu_id": "integer", "lo": "bigint", "hi": "bigint"}


def readings_in_ranges(
    dialect: str, table: str, clocks: bool, columns: Mapping[str, str] = _RANGES, *, keyed: bool = True
) -> str:
    """A FROM-clause item: each range ``g`` of the JSON list bound to ``:ranges`` (``columns``, name → PostgreSQL type,
    at least ``gpu_id``, ``lo`` and ``hi`` epoch seconds) with its GPU's readings ``r`` in ``table`` in [lo, hi], both
    included (``r.gpu_id``, ``ts``, ``utilization_ratio``, ``memory_used_bytes`` and, with ``clocks``,
    ``clocks_event_reasons`` and ``sm_clock_hertz``). ``keyed``: on PostgreSQL each range read by the ``(gpu_id, ts)``
    key, behind LATERAL and OFFSET 0 (not flattened into a scan of the day partitions); else, and on SQLite (which
    reads them by key anyway), a join the planner chooses how to run."""
    names = {
        "ranges": json_rows(dialect, "ranges", "g", columns),
        "table": table,
        "clock_columns": ", x.clocks_event_reasons, x.sm_clock_hertz" if clocks else "",
    }
    return (_NEAR_BY_KEY if keyed and dialect == "postgresql" else _NEAR_JOINED).format(**names)


# Sorting a day's idle readings in memory (~50 MB for a day of 1,024 GPUs all idle), and no JIT compilation, which
# costs more than it saves on a statement planned afresh for every day.
_PG_SETTINGS = {"work_mem": "256MB", "jit": "off"}
_HELPER_SETTINGS = {"work_mem": "'256MB'", "jit": "off", **NO_PARALLEL_WORKERS}


@dataclass(frozen=True, slots=True)
class _Statements:
    """The two statements of :func:`idle_runs` over ``table`` (``gpu_samples``, or a table of the same columns:
    ``gpu_id``, ``ts`` epoch seconds, ``utilization_ratio``, ``memory_used_bytes`` and, with ``clocks``,
    ``clocks_event_reasons`` and ``sm_clock_hertz``, keyed by ``(gpu_id, ts)``) for ``dialect``: for a whole UTC day
    (``candidates``, ``mixed``) and for part of one (``keyed_candidates``, ``keyed_mixed``: by key on
    PostgreSQL, :data:`_BY_GPU`)."""

    candidates: TextClause
    mixed: TextClause
    keyed_candidates: TextClause
    keyed_mixed: TextClause

    @classmethod
    def of(cls, table: str, clocks: bool, dialect: str, only: bool = False) -> _Statements:
        """The statements over ``table``; with ``only``, of the GPUs whose ids the JSON list bound to ``:only``
        holds (``[{"id": 7}, …]``), read by key whatever the chunk, else of every GPU."""
        gpus = json_rows(dialect, "only", "g", {"id": "integer"}) if only else "gpus g"
        names = {
            "gpus": gpus,
            "table": table,
            "clock_columns": ", x.clocks_event_reasons, x.sm_clock_hertz" if clocks else "",
        }
        per_gpu = _PER_GPU[dialect].replace("{gpus}", gpus)  # PostgreSQL reads only's GPUs by key (below)
        common = {"clocks": CLOCK_COLUMNS if clocks else NO_CLOCK_COLUMNS, "per_gpu": per_gpu, "table": table}
        joined = readings_in_ranges(dialect, table, clocks, keyed=False)
        by_key = dialect == "postgresql"
        keyed = (
            (_CANDIDATES_SQL, {"source": _BY_GPU.format(**names) if by_key else table}),
            (_MIXED_SQL, {"near": readings_in_ranges(dialect, table, clocks)}),
        )
        # A few GPUs' readings are read by key over whole days too, not by a scan of every GPU's.
        whole_days = keyed if only else ((_CANDIDATES_SQL, {"source": table}), (_MIXED_SQL, {"near": joined}))
        variants = (*whole_days, *keyed)
        statements = []
        for sql, parts in variants:
            for name, part in (parts | common).items():
                sql = sql.replace("{" + name + "}", part)
            statements.append(text(sql))
        return cls(*statements)

    def of_chunk(self, chunk: tuple[int, int]) -> tuple[TextClause, TextClause]:
        """The candidates and mixed statements for ``chunk`` [c0, c1) (within one UTC day): read by key when it spans
        less than :data:`KEYED_SHARE` of its day up to c1 (the readings its day's partition holds when c1 is now, as
        for a scheduled re-judging; more when c1 is past, then read by key too seldom, never too often), else by a
        scan of the day's partition."""
        c0, c1 = chunk
        if c1 - c0 < KEYED_SHARE * (c1 - (c0 - c0 % DAY)):
            return self.keyed_candidates, self.keyed_mixed
        return self.candidates, self.mixed


@dataclass(frozen=True, slots=True)
class _Settings:
    """What a run is: utilisation ratio ≤ ``threshold``, readings at most ``max_gap`` seconds apart, kept when it
    lasts ``window`` seconds."""

    threshold: float
    max_gap: int
    window: int
    only: str | None = None  # the GPUs read (a JSON list for :only), None: every GPU


def day_chunks(start: int, end: int) -> Iterator[tuple[int, int]]:
    """[start, end) (epoch seconds) cut at UTC midnights: the day partitions of ``gpu_samples``."""
    lo = start
    while lo < end:
        hi = min(end, floor_day(lo) + DAY)
        yield lo, hi
        lo = hi


def idle_runs(
    connection: Connection,
    chunks: Iterable[tuple[int, int]],
    threshold: float,
    max_gap: int,
    window: int,
    *,
    table: str = "gpu_samples",
    clocks: bool = True,
    helpers: int = 0,
    only: Sequence[int] | None = None,
) -> list[IdleRun]:
    """The idle runs (utilisation ratio ≤ ``threshold``, readings at most ``max_gap`` seconds apart) of the
    readings in ``table`` over consecutive ``chunks`` [c0, c1) (epoch seconds: the period, cut as one likes, e.g.
    by :func:`day_chunks`) that last at least ``window`` seconds, as one window over the whole period would find
    them (module docstring); sorted by GPU and start. A run at the period's start starts there.

    ``helpers`` > 1: the chunks are read on that many other connections of the engine at once when
    :func:`may_read_elsewhere` allows (``gpu_samples`` on PostgreSQL, or on SQLite in a file before this transaction
    writes), each in a transaction that sees what this one sees (on PostgreSQL its exported snapshot). ``only``:
    the readings of those GPU ids alone (the others' runs are not read)."""
    pieces = run_pieces(
        connection, chunks, threshold, max_gap, window, table=table, clocks=clocks, helpers=helpers, only=only
    )
    return joined_runs(pieces, max_gap, window)


def run_pieces(
    connection: Connection,
    chunks: Iterable[tuple[int, int]],
    threshold: float,
    max_gap: int,
    window: int,
    *,
    table: str = "gpu_samples",
    clocks: bool = True,
    helpers: int = 0,
    only: Sequence[int] | None = None,
) -> list[RunPiece]:
    """The pieces of runs each of ``chunks`` holds (:class:`RunPiece`), arguments as for :func:`idle_runs`, which
    joins them (:func:`joined_runs`); pieces of other reads of the same readings over other, consecutive chunks join
    with them the same way."""
    statements = _Statements.of(table, clocks, connection.dialect.name, only is not None)
    gpus = None if only is None else json.dumps([{"id": gpu_id} for gpu_id in sorted(only)])
    settings = _Settings(threshold, max_gap, window, gpus)
    chunks = list(chunks)
    if helpers > 1 and len(chunks) > 1 and table == "gpu_samples" and may_read_elsewhere(connection):
        return _read_elsewhere(connection, statements, settings, chunks, helpers)
    short = sum(c1 - c0 for c0, c1 in chunks) < SHORT_SPAN_HOURS * HOUR  # the 5-minute cycle's
    with transaction_settings(connection, {**_PG_SETTINGS, **(NO_PARALLEL_WORKERS if short else {})}):
        return [piece for chunk in chunks for piece in _chunk_pieces(connection, statements, settings, chunk)]


def look_up_next(connection: Connection, pieces: Sequence[RunPiece], table: str = "gpu_samples") -> None:
    """Set each piece's next reading (its GPU's first one with a utilisation after the piece's last, in ``table``; None:
    none) to what is stored now, looked up by key as the statements do (:data:`_NEXT_TS`), one statement for all."""
    runs = json_rows(connection.dialect.name, "pieces", "runs", {"first_k": "bigint", "last_k": "bigint"})
    keys = [{"first_k": p.gpu_id * GPU_KEY + p.first_ts, "last_k": p.gpu_id * GPU_KEY + p.last_ts} for p in pieces]
    statement = text(f"SELECT runs.last_k, {_NEXT_TS.format(table=table)} FROM {runs}")  # noqa: S608 - constants
    found = connection.execute(statement, {"pieces": json.dumps(keys)}).all() if pieces else []
    following = {int(last_k): None if ts is None else int(ts) for last_k, ts in found}
    for piece in pieces:
        piece.next_ts = following[piece.gpu_id * GPU_KEY + piece.last_ts]


def _chunk_pieces(
    connection: Connection, statements: _Statements, settings: _Settings, chunk: tuple[int, int]
) -> list[RunPiece]:
    """The runs of one chunk [c0, c1): its candidates that are runs, and the runs of those that are mixed (module
    docstring), read on ``connection``."""
    c0, c1 = chunk
    parameters: dict[str, float | str] = {"threshold": settings.threshold, "max_gap": settings.max_gap,
                                          "window": settings.window, "c0": c0, "c1": c1, "span": c1 - c0}  # fmt: skip
    if settings.only is not None:
        parameters["only"] = settings.only
    pieces, mixed = [], []
    candidates, mixed_runs = statements.of_chunk(chunk)
    for row in connection.execute(candidates, parameters):
        first_k, last_k, readings, *_, present, next_ts = row
        if present == readings:
            pieces.append(_piece(row[:9], None, next_ts))
        else:
            hi = min(int(last_k) % GPU_KEY + settings.max_gap, c1 - 1)
            mixed.append({"gpu_id": int(first_k) // GPU_KEY, "lo": int(first_k) % GPU_KEY, "hi": hi})
    if mixed:
        for row in connection.execute(mixed_runs, {**parameters, "ranges": json.dumps(mixed)}):
            pieces.append(_piece(row[:9], row[9], row[10]))
    return pieces


_WRITTEN_READINGS = text(
    "SELECT COALESCE(SUM(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_xact_user_tables "
    "WHERE relname = 'gpus' OR relname LIKE 'gpu\\_samples%'"
)


def may_read_elsewhere(connection: Connection) -> bool:
    """Whether other connections can read the readings this transaction sees: another transaction sees only what is
    committed.

    PostgreSQL: this transaction has written no reading and no GPU (``pg_stat_xact_user_tables``, its own counts of
    rows written, by table and day partition). PostgreSQL shows there too the counts of the connection's earlier
    transactions that it has not flushed yet (it flushes when the connection is idle, at most once a second): this
    then says False and the caller reads on this connection, slower, never wrong.

    SQLite: a database in a file (:func:`finops.db.dialect.supports_helper_connections`) and a transaction that has
    written nothing at all (:func:`finops.db.dialect.write_mark` is None: its driver begins a transaction at the
    first write, not at a read), whose reads see what is committed, as another connection's do."""
    if connection.dialect.name == "sqlite":
        return supports_helper_connections(connection) and write_mark(connection) is None
    if connection.dialect.name != "postgresql":
        return False
    return int(connection.scalar(_WRITTEN_READINGS) or 0) == 0


def _read_elsewhere(
    connection: Connection,
    statements: _Statements,
    settings: _Settings,
    chunks: Sequence[tuple[int, int]],
    helpers: int,
) -> list[RunPiece]:
    """The runs of each of ``chunks`` (:func:`_chunk_pieces`), read on up to ``helpers`` other connections at once,
    each in a transaction it rolls back: on PostgreSQL a read-only one on this one's snapshot
    (``pg_export_snapshot``, imported by ``SET TRANSACTION SNAPSHOT``); on SQLite its reads see what is committed,
    as this transaction's do (:func:`may_read_elsewhere`). A helper's error is raised here."""
    postgresql = connection.dialect.name == "postgresql"
    snapshot = str(connection.scalar(text("SELECT pg_export_snapshot()"))) if postgresql else ""
    if postgresql and not re.fullmatch(r"[0-9A-F]+-[0-9A-F]+-[0-9]+", snapshot):  # inlined below: no $1 there
        raise ValueError(f"unexpected snapshot id {snapshot!r}")
    work: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()
    for chunk in chunks:
        work.put(chunk)

    def read() -> list[RunPiece]:
        found: list[RunPiece] = []
        with connection.engine.connect() as helper:
            if postgresql:
                helper = helper.execution_options(isolation_level="REPEATABLE READ")
            with helper.begin() as transaction:
                if postgresql:
                    helper.execute(text("SET TRANSACTION READ ONLY"))
                    helper.exec_driver_sql(f"SET TRANSACTION SNAPSHOT '{snapshot}'")
                    set_local(helper, _HELPER_SETTINGS)
                while True:
                    try:
                        chunk = work.get_nowait()
                    except queue.Empty:
                        break
                    found.extend(_chunk_pieces(helper, statements, settings, chunk))
                transaction.rollback()
        return found

    with ThreadPoolExecutor(max_workers=helpers, thread_name_prefix="idle-runs") as pool:
        futures = [pool.submit(read) for _ in range(min(helpers, len(chunks)))]
        return [piece for future in futures for piece in future.result()]


def _piece(sums: Sequence[Any], next_k: int | None, next_ts: int | None) -> RunPiece:
    """A run from a statement's row: its ``sums`` (first and last key, readings, most memory, thermal, power and
    throttled readings, SM clock sum and count); ``next_k``, the key of the reading after its last one when the
    statement read it, else ``next_ts``, the GPU's next reading looked up (None: none)."""
    first_k, last_k, readings, max_mem, thermal, power, throttled, sm_sum, sm_n = sums
    seen = next_k is not None
    return RunPiece(
        gpu_id=int(first_k) // GPU_KEY,
        first_ts=int(first_k) % GPU_KEY,
        last_ts=int(last_k) % GPU_KEY,
        next_ts=int(next_k) % GPU_KEY if next_k is not None else (None if next_ts is None else int(next_ts)),
        next_seen=seen,
        max_mem=float(max_mem or 0.0),
        readings=int(readings),
        thermal=int(thermal or 0),
        power=int(power or 0),
        throttled=int(throttled or 0),
        sm_sum=float(sm_sum or 0.0),
        sm_n=int(sm_n or 0),
    )
