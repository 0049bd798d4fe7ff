"""Idle runs of readings (:mod:`finops.analysis.idle`): a run of consecutive readings of one GPU with utilisation
≤ a threshold and no gap longer than the max gap between them, which covers [its first reading, the reading after
its last one, or the last one + the max gap when that comes later or never). Found by set-based SQL that sorts only
the idle readings and the few others next to them, a UTC day at a time, the days' runs then joined.

**Which readings are read.** The run a reading belongs to depends only on the readings before and after it within
the max gap: a reading more than the max gap after the previous one starts a run whatever that one was. So the
statement takes the idle readings (utilisation ≤ the threshold) of the day, their *buckets* (per GPU, time cut
into :func:`bucket_seconds`-long pieces, at least the max gap), and only those other readings that fall in a
bucket with an idle reading or in the bucket after one: that takes in every busy reading within the max gap after
an idle one, which is every reading that can break a run or end one. Sorting those (the day's idle readings and a
few busy ones) instead of all of the day's readings gives the runs one window over all of them gives: a busy reading
left out lies more than the max gap after every idle reading before it, so the run before it ends by the gap, as it
would at the busy reading. Readings without a utilisation are no readings here, as before.

**The ends of a day.** A run whose last reading is the last one the day's statement read of that GPU may go on in a
later day or end at a reading there: the GPU's next reading after it is looked up by key (one index probe per GPU
and day at most). A run of the next day starting at that reading, within the max gap, is the same run: the two are
joined (their counts added, the larger memory kept). A run that reaches the end of the period ends as a scan of
the whole history would end it: at the first reading past the period, if within the max gap.

Each run counts its readings, those with a thermal clocks-event reason, those with a power one, those with either
and their mean SM clock (:data:`collector.contract.clocks_events.THERMAL_MASK`, ``POWER_MASK``), from
``clocks_event_reasons`` and ``sm_clock_hertz`` where the table has them.
"""

from __future__ import annotations

import queue
import re
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, TextClause, text

from collector.contract.clocks_events import POWER_MASK, THERMAL_MASK
from finops.db.dialect import set_local, transaction_settings
from finops.ingest.partitions import DAY, floor_day

GPU_KEY = 4_294_967_296
"""A reading's key is ``gpu_id`` × 2^32 + its epoch second (ids below 2^31, instants before 2106): one 64-bit
integer that sorts by GPU, then time (the ledger's metering orders readings the same way)."""

_THERMAL, _POWER = f"(COALESCE(clk, 0) & {THERMAL_MASK}) <> 0", f"(COALESCE(clk, 0) & {POWER_MASK}) <> 0"
_THROTTLED = f"(COALESCE(clk, 0) & {THERMAL_MASK | POWER_MASK}) <> 0"

# The day's idle readings (materialised: read twice), the readings near them (module docstring), a window over
# both in key order (a reading's predecessor and successor; a run starts at an idle reading whose predecessor is
# missing, busy or more than the max gap before it), and per run its counts. next_k: the key of the reading after
# the run's last one, NULL when the statement read none after it (then a later GPU's key, or none, follows it);
# next_ts: then the GPU's next reading at all, by key (the ordered index probe of a LIMIT 1).
_RUNS_SQL = """
WITH idle AS MATERIALIZED (
    SELECT r.gpu_id * 4294967296 + r.ts AS k, r.gpu_id * 4294967296 + r.ts - r.ts % :bucket AS b,
           r.memory_used_bytes AS mem, {clocks}
    FROM {table} r
    WHERE {per_gpu}r.ts >= :c0 AND r.ts < :c1 AND r.utilization_ratio <= :threshold
), near AS (
    SELECT k, 1 AS i, mem, clk, sm FROM idle
    UNION ALL
    SELECT r.gpu_id * 4294967296 + r.ts, 0, NULL, NULL, NULL
    FROM {table} r
    WHERE {per_gpu}r.ts >= :c0 AND r.ts < :c1 AND r.utilization_ratio > :threshold
      AND r.gpu_id * 4294967296 + r.ts - r.ts % :bucket IN (SELECT b FROM idle UNION ALL SELECT b + :bucket FROM idle)
), neighbours AS (
    SELECT k, i, mem, clk, sm, LAG(k) OVER w AS pk, LAG(i) OVER w AS pi, LEAD(k) OVER w AS nk
    FROM near
    WINDOW w AS (ORDER BY k ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING)
), numbered AS (
    SELECT k, i, mem, clk, sm, COALESCE(nk, k) AS nk,
           SUM(CASE WHEN i = 1 AND (pk IS NULL OR pi = 0 OR k - pk > :max_gap) THEN 1 ELSE 0 END)
               OVER (ORDER BY k ROWS UNBOUNDED PRECEDING) AS run
    FROM neighbours
), runs AS (
    SELECT MIN(k) AS first_k, MAX(k) AS last_k, MAX(nk) AS next_k, COUNT(*) AS readings,
           MAX(COALESCE(mem, 0)) AS max_mem, SUM(CASE WHEN {thermal} THEN 1 ELSE 0 END) AS thermal,
           SUM(CASE WHEN {power} THEN 1 ELSE 0 END) AS power, SUM(CASE WHEN {throttled} THEN 1 ELSE 0 END) AS throttled,
           SUM(CASE WHEN {throttled} THEN sm END) AS sm_sum, COUNT(CASE WHEN {throttled} THEN sm END) AS sm_n
    FROM numbered WHERE i = 1
    GROUP BY run
    HAVING MAX(k) - MIN(k) + :max_gap >= :window OR MIN(k) % 4294967296 <= :c0 + :max_gap
        OR MAX(k) % 4294967296 + :max_gap >= :c1
)
SELECT first_k, last_k, CASE WHEN next_k > last_k AND next_k - last_k < 4294967296 - :span THEN next_k END AS next_k,
       CASE WHEN next_k = last_k OR next_k - last_k >= 4294967296 - :span THEN
           (SELECT n.ts FROM {table} n WHERE n.gpu_id = runs.first_k / 4294967296 AND n.ts > runs.last_k % 4294967296
              AND n.utilization_ratio IS NOT NULL ORDER BY n.ts LIMIT 1) END AS next_ts,
       readings, max_mem, thermal, power, throttled, sm_sum, sm_n
FROM runs
"""
_CLOCKS = "r.clocks_event_reasons AS clk, r.sm_clock_hertz AS sm"
_NO_CLOCKS = "CAST(NULL AS BIGINT) AS clk, CAST(NULL AS DOUBLE PRECISION) AS sm"
_PER_GPU = {"sqlite": "r.gpu_id IN (SELECT id FROM gpus) AND ", "postgresql": ""}
# Sorting the day's idle readings in memory (~50 MB for a day of 1,024 GPUs all idle), and no JIT compilation, which
# costs more than it saves on a statement planned afresh for every day.
_PG_SETTINGS = {"work_mem": "256MB", "jit": "off"}
_HELPER_SETTINGS = {"work_mem": "'256MB'", "jit": "off", "max_parallel_workers_per_gather": "0"}


def _statement(table: str, clocks: bool, dialect: str) -> TextClause:
    """The runs statement over ``table`` (``gpu_samples``, or a table of the same columns: ``gpu_id``, ``ts`` epoch
    seconds, ``utilization_ratio``, ``memory_used_bytes`` and, with ``clocks``, ``clocks_event_reasons`` and
    ``sm_clock_hertz``) for ``dialect``."""
    parts = {
        "table": table,
        "clocks": _CLOCKS if clocks else _NO_CLOCKS,
        "per_gpu": _PER_GPU[dialect],
        "thermal": _THERMAL,
        "power": _POWER,
        "throttled": _THROTTLED,
    }
    statement = _RUNS_SQL
    for name, part in parts.items():
        statement = statement.replace("{" + name + "}", part)
    return text(statement)


@dataclass(slots=True)
class IdleRun:
    """An idle run of one GPU: [``first_ts``, ``covered_until``) epoch seconds; the most memory in use
    (``max_mem``, bytes; 0 without a value), how many readings, and of them with a thermal, a power, either
    clocks-event reason, and the mean SM clock (Hz) of those with either (None: none has a clock)."""

    gpu_id: int
    first_ts: int
    covered_until: int
    max_mem: float
    readings: int
    thermal_readings: int
    power_readings: int
    throttled_readings: int
    throttled_sm_clock: float | None


@dataclass(slots=True)
class _Piece:
    """A run as one day's statement found it: its first and last reading, the next reading of the GPU after the
    last (``next_ts``; None: none at all) and whether the statement read that one (``next_seen``: else it may be
    the first of a run of a later day), and the sums."""

    gpu_id: int
    first_ts: int
    last_ts: int
    next_ts: int | None
    next_seen: bool
    max_mem: float
    readings: int
    thermal: int
    power: int
    throttled: int
    sm_sum: float
    sm_n: int

    def join(self, later: _Piece) -> None:
        """Take in ``later``, the run that goes on from this one in a later day."""
        self.last_ts, self.next_ts, self.next_seen = later.last_ts, later.next_ts, later.next_seen
        self.max_mem = max(self.max_mem, later.max_mem)
        self.readings += later.readings
        self.thermal += later.thermal
        self.power += later.power
        self.throttled += later.throttled
        self.sm_sum += later.sm_sum
        self.sm_n += later.sm_n

    def covered_until(self, max_gap: int) -> int:
        """Until when the run's last reading stands: the next reading, at most the max gap after it; the reading
        itself when no reading follows."""
        if self.next_ts is None:
            return self.last_ts
        return min(self.next_ts, self.last_ts + max_gap)


def bucket_seconds(max_gap: int) -> int:
    """The length of the buckets that select the busy readings near idle ones: at least the max gap (so that a
    reading within the max gap after an idle one lies in its bucket or the next), and 10 minutes at least, so
    that a day of a GPU read every minute has at most 144."""
    return max(max_gap, 600)


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
) -> list[IdleRun]:
    """The idle runs (utilisation ratio ≤ ``threshold``, readings at most ``max_gap`` seconds apart) of the
    readings in ``table`` over consecutive ``chunks`` [c0, c1) (epoch seconds: the period, cut as one likes, e.g.
    by :func:`day_chunks`) that last at least ``window`` seconds, as one window over the whole period would find
    them (module docstring); sorted by GPU and start. A run at the period's start starts there.

    ``helpers`` > 1: the chunks are read on that many other connections of the engine at once when
    :func:`may_read_elsewhere` allows (PostgreSQL, ``gpu_samples``), each in a transaction that sees what this one
    sees (its exported snapshot)."""
    statement = _statement(table, clocks, connection.dialect.name)
    bucket = bucket_seconds(max_gap)
    chunks = list(chunks)

    def parameters(c0: int, c1: int) -> dict[str, object]:
        return {"c0": c0, "c1": c1, "threshold": threshold, "max_gap": max_gap, "window": window, "bucket": bucket,
                "span": c1 - c0}  # fmt: skip

    if helpers > 1 and len(chunks) > 1 and table == "gpu_samples" and may_read_elsewhere(connection):
        rows = _read_elsewhere(connection, statement, [parameters(c0, c1) for c0, c1 in chunks], helpers)
    else:
        with transaction_settings(connection, _PG_SETTINGS):
            rows = [row for c0, c1 in chunks for row in connection.execute(statement, parameters(c0, c1))]
    pieces = {(piece.gpu_id, piece.first_ts): piece for piece in map(_piece, rows)}
    runs = []
    joined: set[tuple[int, int]] = set()
    for key in sorted(pieces):
        if key in joined:
            continue
        piece = pieces[key]
        while not piece.next_seen and piece.next_ts is not None and piece.next_ts - piece.last_ts <= max_gap:
            later = pieces.get((piece.gpu_id, piece.next_ts))
            if later is None:  # a busy reading, or one past the period
                break
            joined.add((piece.gpu_id, piece.next_ts))
            piece.join(later)
        covered = piece.covered_until(max_gap)
        if covered - piece.first_ts >= window:
            runs.append(
                IdleRun(
                    piece.gpu_id, piece.first_ts, covered, piece.max_mem, piece.readings, piece.thermal,
                    piece.power, piece.throttled, piece.sm_sum / piece.sm_n if piece.sm_n else None,
                )
            )  # fmt: skip
    return runs


_WRITTEN_READINGS = text(
    "SELECT COALESCE(SUM(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_xact_user_tables "
    "WHERE relname = 'gpus' OR relname LIKE 'gpu\\_samples%'"
)


def may_read_elsewhere(connection: Connection) -> bool:
    """Whether other connections can read the readings this transaction sees: PostgreSQL, and this transaction has
    written no reading and no GPU (``pg_stat_xact_user_tables``, its own counts of rows written, by table and day
    partition): another transaction sees only what is committed."""
    if connection.dialect.name != "postgresql":
        return False
    return int(connection.scalar(_WRITTEN_READINGS) or 0) == 0


def _read_elsewhere(
    connection: Connection, statement: TextClause, chunks: Sequence[dict[str, object]], helpers: int
) -> list[Sequence[Any]]:
    """The rows of ``statement`` for each of ``chunks`` (its parameters), run on up to ``helpers`` other connections
    at once, each in a read-only transaction on this one's snapshot (``pg_export_snapshot``, imported by ``SET
    TRANSACTION SNAPSHOT``), which it rolls back. A helper's error is raised here."""
    snapshot = str(connection.scalar(text("SELECT pg_export_snapshot()")))
    if not re.fullmatch(r"[0-9A-F]+-[0-9A-F]+-[0-9]+", snapshot):  # inlined below: a utility statement takes no $1
        raise ValueError(f"unexpected snapshot id {snapshot!r}")
    work: queue.SimpleQueue[dict[str, object]] = queue.SimpleQueue()
    for chunk in chunks:
        work.put(chunk)

    def read() -> list[Sequence[Any]]:
        found: list[Sequence[Any]] = []
        with connection.engine.connect() as helper:
            helper = helper.execution_options(isolation_level="REPEATABLE READ")
            with helper.begin() as transaction:
                helper.execute(text("SET TRANSACTION READ ONLY"))
                helper.exec_driver_sql(f"SET TRANSACTION SNAPSHOT '{snapshot}'")
                set_local(helper, _HELPER_SETTINGS)
                while True:
                    try:
                        chunk = work.get_nowait()
                    except queue.Empty:
                        break
                    found.extend(helper.execute(statement, chunk))
                transaction.rollback()
        return found

    with ThreadPoolExecutor(max_workers=helpers, thread_name_prefix="idle-runs") as pool:
        futures = [pool.submit(read) for _ in range(min(helpers, len(chunks)))]
        return [row for future in futures for row in future.result()]


def _piece(row: Sequence[Any]) -> _Piece:
    """A row of the runs statement as a :class:`_Piece`."""
    first_k, last_k, next_k, next_ts, readings, max_mem, thermal, power, throttled, sm_sum, sm_n = row
    seen = next_k is not None
    return _Piece(
        gpu_id=int(first_k) // GPU_KEY,
        first_ts=int(first_k) % GPU_KEY,
        last_ts=int(last_k) % GPU_KEY,
        next_ts=int(next_k) % GPU_KEY if seen else (None if next_ts is None else int(next_ts)),
        next_seen=seen,
        max_mem=float(max_mem or 0.0),
        readings=int(readings),
        thermal=int(thermal or 0),
        power=int(power or 0),
        throttled=int(throttled or 0),
        sm_sum=float(sm_sum or 0.0),
        sm_n=int(sm_n or 0),
    )
