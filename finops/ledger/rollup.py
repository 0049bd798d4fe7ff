"""The hourly cost ledger: one row per GPU × UTC hour × holder, rebuilt for hours marked dirty.

A rebuild of hours [h0, h1) runs in the database, in a few set-based statements over session-local temporary
tables, and applies :mod:`finops.ledger.costmodel` in Python only where a GPU-hour has to be split:

1. the in-service GPU-hours with their rates (from the Python price catalog, passed in as a small table; a GPU-hour
   whose model has no price gets NULL and is written *unpriced*: seconds, metering and energy as usual, allocated,
   used and idle cost NULL);
2. their holdings: every allocation clipped to every GPU-hour it overlaps;
3. the GPU-hours to split: a partial in-service hour, a holding that covers only part of the hour, several
   holdings, a MIG share; a MIG share or overlapping holdings (time-slicing) make a GPU-hour *shared*;
4. the metering, one pass over the readings: utilisation and energy increments (a window function over the
   chunk's readings sorted by GPU and time) summed per GPU-hour and holding (per GPU-hour as a whole where it is
   shared), written by ``CREATE TEMPORARY TABLE … AS`` so that PostgreSQL's parallel workers can share the scan
   and the sort (the SELECT of an ``INSERT`` runs in one process);
5. the common GPU-hour — in service all its span (the hour, or up to the rollup's ``until`` in the hour that cuts)
   and held all of it by one whole-GPU allocation, or by none — costed
   by one ``INSERT … SELECT`` with the cost model's formulas: exact ``NUMERIC`` with half-even rounding on
   PostgreSQL, integer micro-units on SQLite (whose float-to-text conversion is not the shortest round-trip
   one, so the two products with a float reading call :func:`finops.ledger.costmodel.used_cost` and
   :func:`finops.ledger.costmodel.energy_cost` as registered SQL functions);
6. the GPU-hours to split, by :func:`finops.ledger.costmodel.gpu_hour_costs` in Python.

Steps 5 and 6 write the chunk's rows to a work table; the ledger's rows of the chunk are then replaced by them
in one statement. A rollup of several chunks computes them on other connections, one per CPU up to 4, while its
own session writes the chunk before (PostgreSQL: binary ``COPY`` from the helper's work table into the ledger;
SQLite in a file: the work table's rows, read by the helper, inserted): the ledger is still written in the rollup's
one transaction. Both costing paths write identical rows:
``sql_costing=False`` sends every GPU-hour through Python, which the tests compare with. Rebuilding an hour
deletes and rewrites its rows, so recomputing changes nothing.

This module cuts the hours into chunks and runs the steps on them; what they wrote, and what a rollup did, is
told by :mod:`finops.ledger.rollup_result`. The SQL of steps 1 to 5, with its
per-database variants, is in :mod:`finops.ledger.sql`; step 6 in :mod:`finops.ledger.split`; what else differs
between the databases (locks, settings, statistics, ``COPY``) in :mod:`finops.db.dialect`.
"""

from __future__ import annotations

import logging
import os
import queue
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from decimal import Decimal
from itertools import islice

from sqlalchemy import Connection, delete, func, select, text
from sqlalchemy.orm import Session

from finops.db.dialect import (
    Copied,
    analyze,
    copy_in,
    copy_out,
    insert_rows,
    serialise_transactions,
    set_local,
    supports_helper_connections,
    write_mark,
)
from finops.db.hours import mark_ledger_built
from finops.db.ledger_tables import DirtyHour, LedgerEntry
from finops.db.models import UNALLOCATED_TEAM, Gpu
from finops.jobs.teams import team_by_name
from finops.ledger import metering, sql
from finops.ledger.metering_state import Arrivals, Shipped, keep, settle_arrivals, ship, take_arrivals
from finops.ledger.rollup_result import ChunkBuilt, RollupResult, unpriced_fix
from finops.ledger.split import split_rows
from finops.ledger.sql import LEDGER_COLUMNS
from finops.ledger.team_hours import refresh_team_hours
from finops.pricing.catalog import PriceNotFound, Pricing, PricingModel
from finops.pricing.rules import pricing_models_by_node
from finops.timeutil import HOUR, floor_hour, from_epoch, to_epoch

log = logging.getLogger(__name__)

CHUNK_HOURS = 24
TRANSACTION_HOURS = 2 * CHUNK_HOURS
"""Hours a scheduled rollup rebuilds in one transaction (:func:`finops.service.scheduler.run_rollup`): a month of
backlog is committed two days at a time, so that a rollup stopped or killed keeps what it finished, and no writer
waits for the whole month."""
ROLLUP_CONNECTIONS = min(os.cpu_count() or 1, 4)
"""Connections that compute chunks of a rollup at once (:func:`rollup`): one per CPU of the host
running the rollup, at most 4, which keeps them well within the engine's pool (5 + 10 connections, shared with
the API)."""
ROLLUP_LOCK_KEY = 0x6770_7566_5F6C_6467  # pg_advisory_xact_lock key serialising rollups ("gpuf_ldg")

Meter = Callable[[Session, Sequence[int], int], None]
"""What meters hours from a TSDB before a rollup rebuilds them: called with the session, the hours to rebuild
(epoch starts) and the rollup's ``until``; writes their segments to ``tsdb_gpu_metering``."""


def rollup(
    session: Session,
    pricing: Pricing,
    until: int,
    *,
    sql_costing: bool = True,
    connections: int = ROLLUP_CONNECTIONS,
    rebuilt: list[int] | None = None,
    meter: Meter | None = None,
    most_hours: int | None = None,
    cursors_before: dict[int, int] | None = None,
    before: int | None = None,
) -> RollupResult:
    """Bring the ledger up to ``until`` (epoch seconds): rebuild every dirty hour before it, and every hour
    from the newest hour in the ledger (or, for an empty ledger, the first GPU's entry into service) to it.

    The newest hour is always rebuilt because it was built only up to the previous ``until``, so hours
    without samples or job changes (a silent collector, an idle cluster) still accrue capacity cost.
    A GPU whose model has no price in the catalog keeps its GPU-hours in the ledger, unpriced (NULL money), logged
    once per model and rollup (a WARNING with its GPU-hours and the fix); its hours are not left dirty: a catalog
    import that prices them marks them (:func:`finops.pricing.store.import_catalog`). A chunk's
    dirty marks are removed before its data is read (:func:`_unmark`), so that data committed while it is rebuilt
    is rebuilt by the next rollup. The newest hour built (the one ``until - 1`` falls in, usually the current one)
    keeps its mark, so that an ingest marking it (every POST of the current hour does) does not wait for this
    rollup's transaction, which would have removed the mark, to end; the next rollup reads the mark and rebuilds
    the hour (which it would anyway when it is the ledger's newest), and the first rollup past it removes it.
    ``sql_costing`` as in :func:`rebuild`. The ledger's watermark records ``until``
    (:func:`finops.db.hours.mark_ledger_built`), so that a report can tell a job import newer than it. Returns the
    hours rebuilt and the GPU-seconds written, priced and
    unpriced (:class:`RollupResult`); ``rebuilt``, when given, is extended by the start (epoch seconds) of
    every hour rebuilt (what the idle episodes are re-judged over: :func:`finops.analysis.idle.rejudge_idle`).
    ``meter``, when given, is called with the hours to rebuild and ``until``
    before any is rebuilt, to write their segments to ``tsdb_gpu_metering`` in this session
    (:func:`finops.ingest.tsdb_metering.TsdbMeter.meter_hours`), and the hours are metered from those segments
    instead of ``gpu_samples``.

    ``cursors_before``, when given, is filled with each GPU's metering cursor as the rollup found it (after late
    readings moved it back: :attr:`finops.ledger.metering_state.Arrivals.cursors`), from which
    :func:`finops.ledger.metering_state.metered_windows` tells the readings it metered as new.

    ``most_hours``: rebuild at most that many of the hours, the oldest first; the result's ``pending_hours`` says how
    many are left, still marked dirty (or after the ledger's newest hour) for the next call, and the ledger's
    watermark moves only once none is. ``before`` (epoch seconds), when given, leaves the hours from it on pending
    too: a transaction that rolls up again after moving jobs rebuilds their hours and goes no further.

    The hours are rebuilt in chunks of at most :data:`CHUNK_HOURS` consecutive hours (a day partition of readings
    each). Several chunks are computed at once on up to ``connections`` extra connections
    (:func:`_chunks_built_elsewhere`) when this transaction has written nothing (the lock it takes aside:
    :func:`finops.db.dialect.write_mark`), on PostgreSQL and on an SQLite database in a file
    (:func:`finops.db.dialect.supports_helper_connections`); everything is still written in this session's
    transaction. Half a day of hours or more is then cut into at least ``connections`` chunks, so that a single
    dirty day is shared by the helpers too. Otherwise chunk after chunk by :func:`rebuild`.

    Rollups are serialised: two at once (the scheduler and ``gpu-finops rollup``, or two schedulers) would each
    delete the hours' rows before the other's were committed and write them twice. On PostgreSQL by a
    transaction-scoped advisory lock (:data:`ROLLUP_LOCK_KEY`); on SQLite by taking the database's write lock
    first (a write that changes nothing), as a transaction that read before writing cannot wait for the lock
    and fails "database is locked" (:func:`finops.db.dialect.serialise_transactions`). The second waits, then
    finds the hours done.
    """
    helpers = connections > 1 and supports_helper_connections(session.connection())
    unwritten = helpers and write_mark(session) is None  # before the write that takes SQLite's lock (no row)
    serialise_transactions(session, ROLLUP_LOCK_KEY, DirtyHour)
    locked = write_mark(session) if unwritten else None
    arrivals = take_arrivals(session, until)
    if cursors_before is not None:
        cursors_before.update(arrivals.cursors)
    dirty = {to_epoch(h) for h in session.scalars(select(DirtyHour.hour).where(DirtyHour.hour < from_epoch(until)))}
    last_built = session.scalar(select(func.max(LedgerEntry.hour)))
    newest = last_built or session.scalar(select(func.min(Gpu.in_service_from)))
    since = floor_hour(to_epoch(newest)) if newest is not None else floor_hour(until - 1)
    tail = min(since, floor_hour(until - 1))  # every hour from it to until is rebuilt (unless some are pending)
    hours = sorted(dirty | set(range(tail, until, HOUR)))
    pending = 0
    if before is not None:
        pending = sum(1 for hour in hours if hour >= before)
        hours = [hour for hour in hours if hour < before]
    if most_hours is not None and len(hours) > most_hours:
        hours, pending = hours[:most_hours], pending + len(hours) - most_hours
    if rebuilt is not None:
        rebuilt.extend(hours)
    if meter is not None:
        meter(session, hours, until)
    from_tsdb = meter is not None
    longest = CHUNK_HOURS
    if helpers and len(hours) >= CHUNK_HOURS // 2:
        longest = min(CHUNK_HOURS, -(-len(hours) // connections))  # a chunk for each helper at least
    chunks = list(_contiguous_chunks(hours, longest))
    log.debug("rebuilding %d ledger hours in %d chunks", len(hours), len(chunks))
    built: Iterator[ChunkBuilt]
    # Helpers read what is committed: not what this transaction wrote (late readings' moves, ``meter``'s segments).
    if helpers and len(chunks) > 1 and unwritten and write_mark(session) == locked:
        arrivals.capture(session.connection())
        built = _chunks_built_elsewhere(session, chunks, pricing, until, sql_costing, connections, from_tsdb)
    else:
        built = _chunks_built_here(session, chunks, pricing, until, sql_costing, from_tsdb, arrivals)
    total = ChunkBuilt()
    for chunk in built:
        total.add(chunk)
    unpriced = {model: seconds for (model, priced), seconds in sorted(total.gpu_seconds.items()) if not priced}
    for model, seconds in unpriced.items():
        log.warning(
            "GPU model %r has no price (%s): %.2f GPU-hours kept in the ledger unpriced; %s",
            model, total.reasons.get(model, "no price"), seconds / 3600, unpriced_fix(model),
        )  # fmt: skip
    priced = sum(seconds for (_, is_priced), seconds in total.gpu_seconds.items() if is_priced)
    settle_arrivals(session, arrivals, until if pending else tail)
    if not pending:
        after = floor_hour(until - 1) + HOUR
        if last_built is not None and to_epoch(last_built) >= after:
            _forget_after(session, after, to_epoch(last_built) + HOUR)
        mark_ledger_built(session, from_epoch(until))
    return RollupResult(len(hours), priced, unpriced, total.readings, arrivals.late_gpus, pending)


def _forget_after(session: Session, start: int, end: int) -> None:
    """Delete the ledger rows and team-hours of hours [start, end) (epoch seconds): written by a rollup that went
    further than this one's ``until`` (a clock stepped back, or ``gpu-finops rollup --until`` an earlier instant),
    whose ledger ends at its ``until`` as a cold rebuild's would. Their kept sums were forgotten and the hours marked
    dirty when the rollup began (:func:`finops.ledger.metering_state.take_arrivals`), so that the first rollup past
    them builds them again."""
    session.execute(
        delete(LedgerEntry).where(LedgerEntry.hour >= from_epoch(start), LedgerEntry.hour < from_epoch(end))
    )
    refresh_team_hours(session, start, end)


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


def rebuild(
    session: Session,
    h0: int,
    h1: int,
    pricing: Pricing,
    until: int,
    *,
    sql_costing: bool = True,
    from_tsdb: bool = False,
    arrivals: Arrivals | None = None,
) -> ChunkBuilt:
    """Rewrite the ledger rows of hours [h0, h1) (epoch seconds, hour-aligned), clipped at ``until``, and what the
    metering keeps of them (:func:`finops.ledger.metering_state.keep`).

    A GPU whose model has no price in the catalog gets unpriced rows (NULL allocated, used and idle cost).
    Returns the GPU-seconds written by model, priced and unpriced (:class:`ChunkBuilt`).
    ``sql_costing`` False costs every GPU-hour with the Python cost model instead of only those to split (the
    rows are the same; it is the reference the SQL costing is tested against). The team-hours of [h0, h1) are
    rewritten after the rows (:func:`finops.ledger.team_hours.refresh_team_hours`). ``from_tsdb``: metered from
    ``tsdb_gpu_metering`` instead of the readings (:func:`finops.ledger.metering.meter`), and nothing is kept.
    ``arrivals``: the rollup's (:func:`finops.ledger.metering_state.take_arrivals`), whose snapshot is taken before
    the first metering.
    """
    unallocated = team_by_name(session, UNALLOCATED_TEAM).id
    built = _compute(session, h0, h1, pricing, until, unallocated, sql_costing, from_tsdb, arrivals)
    _store(session, h0, h1, None, None, from_tsdb)
    return built


def _store(session: Session, h0: int, h1: int, copied: Copied | None, shipped: Shipped | None, from_tsdb: bool) -> None:
    """Replace the ledger rows of hours [h0, h1) by the chunk's computed rows, rewrite its team-hours, and unless
    ``from_tsdb`` replace what the metering keeps of them.

    ``copied`` None: the rows are in this connection's ``tmp_ledger_rows``; else they are that table's binary
    ``COPY`` output from another connection (PostgreSQL's binary COPY format), written by ``COPY … FROM STDIN``, and
    ``shipped`` what that connection's metering keeps (:func:`finops.ledger.metering_state.ship`).
    """
    session.execute(delete(LedgerEntry).where(LedgerEntry.hour >= from_epoch(h0), LedgerEntry.hour < from_epoch(h1)))
    names = ", ".join(LEDGER_COLUMNS)
    if copied is None:
        session.execute(text(f"INSERT INTO ledger ({names}) SELECT {names} FROM tmp_ledger_rows"))  # noqa: S608
    else:
        copy_in(session.connection(), "ledger", LEDGER_COLUMNS, copied)
    refresh_team_hours(session, h0, h1)
    if not from_tsdb:
        keep(session, h0, h1, shipped)


def _chunks_built_here(
    session: Session,
    chunks: Sequence[tuple[int, int]],
    pricing: Pricing,
    until: int,
    sql_costing: bool,
    from_tsdb: bool,
    arrivals: Arrivals,
) -> Iterator[ChunkBuilt]:
    """What each chunk [h0, h1) wrote, rebuilt by :func:`rebuild` in the session's own connection."""
    for h0, h1 in chunks:
        _unmark(session, h0, h1, until)
        yield rebuild(session, h0, h1, pricing, until, sql_costing=sql_costing, from_tsdb=from_tsdb, arrivals=arrivals)


def _unmark(session: Session, h0: int, h1: int, until: int) -> None:
    """Remove the dirty marks of hours [h0, h1), before their data is read, but not that of the newest hour
    built up to ``until`` (:func:`rollup` says why). Data committed after that marks its hours again (on
    PostgreSQL its insert of a mark waits for this transaction, which deleted the mark, to end), so it is rebuilt
    next time; removing the marks after the rebuild would remove those too."""
    stop = min(h1, floor_hour(until - 1))
    session.execute(delete(DirtyHour).where(DirtyHour.hour >= from_epoch(h0), DirtyHour.hour < from_epoch(stop)))


def _chunks_built_elsewhere(
    session: Session,
    chunks: Sequence[tuple[int, int]],
    pricing: Pricing,
    until: int,
    sql_costing: bool,
    connections: int,
    from_tsdb: bool,
) -> Iterator[ChunkBuilt]:
    """What each chunk [h0, h1) wrote, in order, once :func:`_store` has written its rows in ``session``.

    The rows are computed (:func:`_compute`) on up to ``connections`` other connections of the session's
    engine, a chunk each at a time and a few chunks ahead, so that PostgreSQL computes several chunks on
    several cores while this session writes the one before (``benchmarks/ledger.py`` has figures; SQLite's
    driver lets other threads run while a statement runs, and in WAL mode its readers do not wait for the rollup's
    write lock). Each helper
    connection reads in a transaction of its own, which it rolls back; the rollup's inputs (readings, jobs,
    allocations, GPUs, prices) are what is committed, which is what ``session`` sees too as long as it has not
    written them (:func:`finops.db.dialect.write_mark`). A helper's error is raised here, and the rollup's
    transaction with it is rolled back by its owner.
    """
    bind = session.get_bind()
    engine = bind.engine if isinstance(bind, Connection) else bind
    unallocated_team = team_by_name(session, UNALLOCATED_TEAM).id
    idle: queue.SimpleQueue[Connection] = queue.SimpleQueue()

    def compute(h0: int, h1: int) -> tuple[ChunkBuilt, Copied, Shipped | None]:
        connection = idle.get()
        try:
            with Session(bind=connection) as helper:
                built = _compute(helper, h0, h1, pricing, until, unallocated_team, sql_costing, from_tsdb, None)
            shipped = None if from_tsdb else ship(connection)
            return built, copy_out(connection, sql.WORK_ROWS.name, LEDGER_COLUMNS), shipped
        finally:
            idle.put(connection)

    with ExitStack() as stack:
        for _ in range(min(connections, len(chunks))):
            connection = stack.enter_context(engine.connect())
            stack.callback(connection.begin().rollback)  # helpers write only temporary tables: nothing to keep
            set_local(connection, sql.HELPER_SETTINGS)
            idle.put(connection)
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=connections, thread_name_prefix="ledger-chunk"))
        stack.callback(pool.shutdown, cancel_futures=True)
        pending: deque[tuple[int, int, Future[tuple[ChunkBuilt, Copied, Shipped | None]]]] = deque()
        queued = iter(chunks)
        for h0, h1 in islice(queued, connections + 1):
            _unmark(session, h0, h1, until)
            pending.append((h0, h1, pool.submit(compute, h0, h1)))
        while pending:
            h0, h1, future = pending.popleft()
            built, copied, shipped = future.result()
            for n0, n1 in islice(queued, 1):
                _unmark(session, n0, n1, until)
                pending.append((n0, n1, pool.submit(compute, n0, n1)))
            _store(session, h0, h1, copied, shipped, from_tsdb)
            yield built


def _rates(
    session: Session, pricing: Pricing, node_models: dict[int, PricingModel], h0: int, end: int
) -> tuple[dict[tuple[str, PricingModel, int], Decimal | None], dict[str, str]]:
    """Rate per (GPU model, pricing model, hour) for the GPU-hours in service in [h0, end) (None where the catalog
    has none), and why each GPU model without a price has none (the first PriceNotFound message)."""
    first_hour: dict[tuple[str, PricingModel], int] = {}
    for model, node_id, entered in session.execute(
        select(Gpu.model, Gpu.node_id, func.min(Gpu.in_service_from))
        .where(Gpu.in_service_from < from_epoch(end))
        .group_by(Gpu.model, Gpu.node_id)
    ):
        key = (model, node_models.get(node_id, pricing.model))
        hour = floor_hour(max(h0, to_epoch(entered)))
        first_hour[key] = min(first_hour.get(key, hour), hour)
    rates: dict[tuple[str, PricingModel, int], Decimal | None] = {}
    reasons: dict[str, str] = {}
    for (model, pricing_model), first in sorted(first_hour.items()):
        for hour in range(first, end, HOUR):
            try:
                rates[model, pricing_model, hour] = pricing.catalog.rate(model, pricing_model, from_epoch(hour))
            except PriceNotFound as exc:
                rates[model, pricing_model, hour] = None
                reasons.setdefault(model, f"{pricing_model}: {exc}")
    return rates, reasons


def _compute(
    session: Session,
    h0: int,
    h1: int,
    pricing: Pricing,
    until: int,
    unallocated_team: int,
    sql_costing: bool,
    from_tsdb: bool,
    arrivals: Arrivals | None,
) -> ChunkBuilt:
    """Fill the work table ``tmp_ledger_rows`` of the session's connection with the ledger rows of hours [h0, h1)
    clipped at ``until``, as :func:`rebuild` describes, and the metering's work tables of what it keeps; the ledger
    itself is not touched. Returns what they are (GPU-seconds by model, priced and unpriced, readings metered).
    ``arrivals``: their snapshot is taken here before the metering when not yet (the rollup's own connection)."""
    connection = session.connection()
    end = min(h1, until)
    sql.prepare_work_tables(connection)
    with sql.statement_settings(connection, -(-(end - h0) // HOUR)):
        node_models = pricing_models_by_node(session, pricing.model)
        rates, reasons = _rates(session, pricing, node_models, h0, end)
        sql.load_prices(connection, rates, node_models, end)
        sql.fill_gpu_hours(connection, h0, end, pricing.model)
        sql.fill_holdings(connection, h0, end)
        sql.fill_split(connection, end, everything=not sql_costing)
        analyze(connection, "tmp_ledger_gpu_hours", "tmp_ledger_holdings", "tmp_ledger_split")
        if arrivals is not None:
            arrivals.capture(connection)
        readings = metering.meter(connection, h0, end, from_tsdb=from_tsdb)
        analyze(connection, sql.METERING_TABLE)
        sql.cost_common(connection, pricing.catalog, unallocated_team)
        rows = split_rows(connection, rates, unallocated_team, pricing.catalog, h0, h1)
        if log.isEnabledFor(logging.DEBUG):
            gpu_hours, split = sql.work_counts(connection)
            log.debug("ledger hours [%d, %d): %d GPU-hours costed in SQL, %d split by the cost model",
                      h0, h1, gpu_hours - split, split)  # fmt: skip
        insert_rows(connection, sql.WORK_ROWS, rows)
        gpu_seconds = sql.gpu_seconds_by_model(connection)
    unpriced = {model for model, priced in gpu_seconds if not priced}
    return ChunkBuilt(Counter(gpu_seconds), {m: r for m, r in reasons.items() if m in unpriced}, readings)
