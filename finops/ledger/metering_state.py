"""What the ledger's metering keeps between rollups (:mod:`finops.ledger.metering`), and the late readings that make
a rollup meter a GPU again.

Kept: per GPU-hour and holding the integer sums of its readings metered so far (``gpu_hour_metering``), per GPU the
cursor after its last reading metered (``metering_cursors``), and the holdings those readings were assigned by
(``metered_holdings``). A rebuild of hours [h0, h1) replaces what is kept of them (:func:`keep`).

Late readings: ingest records, per transaction, each GPU's earliest reading stored (``reading_arrivals``,
:func:`arrival_statement`). A reading before its GPU's cursor arrived after the rollup that moved the cursor past
it, so it is in no sum: the rollup's :func:`take_arrivals` moves that GPU's cursor back to the start of the
reading's hour, forgets the sums of that hour and every later one, and marks those hours dirty, so that the same
rollup meters them again from the readings. Readings at or after the cursor are simply new: the rollup meters them
from the cursor on. :func:`settle_arrivals` removes, after the rollup, the records it dealt with: on PostgreSQL
those of transactions committed before its metering began (``pg_current_snapshot``; each record carries its
transaction's id) whose readings lie in the hours it rebuilt up to its ``until`` or after, so that readings
committed while it ran are judged by the next.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import orjson
from sqlalchemy import Connection, text
from sqlalchemy.orm import Session

from finops.db.dialect import Copied, copy_in, copy_out, emptying, run_statements
from finops.db.hours import mark_hours_dirty
from finops.ledger.sql import ACTIVITIES
from finops.timeutil import HOUR

KEPT_COLUMNS = (
    "gpu_id", "hour", "allocation_id", "samples", "utilization_units", "energy_units", "readings", "profiled",
    *(column for a in ACTIVITIES for column in (f"{a}_units", f"{a}_n")),
)  # fmt: skip
"""The columns of ``gpu_hour_metering`` and of the chunk's ``tmp_ledger_units``, in one order."""
HOLDING_COLUMNS = ("gpu_id", "hour", "allocation_id", "start", "stop", "shared")
CURSOR_COLUMNS = ("gpu_id", "through")


def arrival_statement(dialect: str, earliest: dict[int, int]) -> str | None:
    """The ``INSERT`` that records an ingest transaction's readings for the rollup: ``earliest`` maps each GPU id to
    the instant (epoch seconds) of its earliest reading stored; None when it is empty. The values are integers, so
    the JSON text needs no escaping; on PostgreSQL the row carries the transaction's id."""
    if not earliest:
        return None
    document = orjson.dumps({str(gpu): int(ts) for gpu, ts in earliest.items()}).decode()
    if dialect == "postgresql":
        return (
            "INSERT INTO reading_arrivals (earliest, xact) "  # noqa: S608 - integers only
            f"VALUES ('{document}', CAST(CAST(pg_current_xact_id() AS text) AS BIGINT))"
        )
    return f"INSERT INTO reading_arrivals (earliest) VALUES ('{document}')"  # noqa: S608 - integers only


def _earliest(documents: Iterable[str]) -> dict[int, int]:
    """Per GPU id, the earliest instant of the arrival records ``documents`` (their JSON text)."""
    earliest: dict[int, int] = {}
    for document in documents:
        for gpu, ts in orjson.loads(document).items():
            gpu_id = int(gpu)
            if ts < earliest.get(gpu_id, ts + 1):
                earliest[gpu_id] = int(ts)
    return earliest


def unsettled_arrivals(session: Session) -> dict[int, int]:
    """Per GPU id, the earliest reading of the arrival records no rollup has settled yet, as the session sees them
    now (epoch seconds): on PostgreSQL also those of transactions committed while a rollup ran, which the next one
    deals with."""
    return _earliest(session.scalars(text("SELECT earliest FROM reading_arrivals")))


@dataclass(slots=True)
class Arrivals:
    """The arrival records a rollup read at its start (``seen``: their ids), each GPU's cursor then (after the moves
    back of :func:`take_arrivals`), how many GPUs had late readings, and on PostgreSQL the snapshot of the
    database just before the rollup's first metering (:meth:`capture`)."""

    seen: list[int]
    cursors: dict[int, int]
    late_gpus: int
    snapshot: str | None = field(default=None)

    def capture(self, connection: Connection) -> None:
        """Note the database's snapshot (``pg_current_snapshot()``) the first time: every transaction committed
        before it is seen by the metering that follows. PostgreSQL only; nothing on SQLite, where the rollup holds
        the database's write lock and nothing commits while it runs."""
        if self.snapshot is None and connection.dialect.name == "postgresql":
            self.snapshot = connection.scalar(text("SELECT CAST(pg_current_snapshot() AS text)"))


_KEPT_HOURS = text("SELECT DISTINCT hour FROM gpu_hour_metering WHERE gpu_id = :gpu AND hour >= :hour")


def take_arrivals(session: Session, until: int) -> Arrivals:
    """Read the arrival records and deal with the late readings among them, in the rollup up to ``until``'s
    transaction before it chooses the hours to rebuild: for each GPU with a reading before its cursor, the cursor
    moves back to the start of that reading's hour, the sums and holdings kept of that hour and the later ones are
    forgotten, and those hours are marked dirty (:func:`finops.db.hours.mark_hours_dirty`). A GPU whose cursor is
    past ``until`` (an earlier rollup went further: a clock stepped back) is dealt with as if it had a reading at
    ``until``: the kept sums of the hour ``until`` falls in count readings this rollup leaves out."""
    rows = session.execute(text("SELECT id, earliest FROM reading_arrivals")).all()
    earliest = _earliest(row.earliest for row in rows)
    cursors = {row.gpu_id: row.through for row in session.execute(text("SELECT gpu_id, through FROM metering_cursors"))}
    late = {gpu: ts - ts % HOUR for gpu, ts in earliest.items() if gpu in cursors and ts < cursors[gpu]}
    for gpu, through in cursors.items():
        if through > until:
            late[gpu] = min(late.get(gpu, until), until - until % HOUR)
    if late:
        moves = [{"gpu": gpu, "hour": hour} for gpu, hour in sorted(late.items())]
        hours = set(late.values())
        for move in moves:
            hours.update(session.scalars(_KEPT_HOURS, move))
        session.execute(text("DELETE FROM gpu_hour_metering WHERE gpu_id = :gpu AND hour >= :hour"), moves)
        session.execute(text("DELETE FROM metered_holdings WHERE gpu_id = :gpu AND hour >= :hour"), moves)
        session.execute(text("UPDATE metering_cursors SET through = :hour WHERE gpu_id = :gpu"), moves)
        mark_hours_dirty(session, hours)
        cursors.update(late)
    return Arrivals([row.id for row in rows], cursors, len(late))


def metered_windows(session: Session, cursors_before: Mapping[int, int], since: int) -> dict[int, tuple[int, int]]:
    """Per GPU id, the [start, end) (epoch seconds) of the readings a rollup has just metered as new to the kept
    sums: from the GPU's cursor as the rollup found it (``cursors_before``: :attr:`Arrivals.cursors`, after late
    readings moved it back) or ``since`` (the first hour the rollup rebuilt) where it had none or an older one, to its
    cursor now. GPUs whose cursor did not move past ``since`` are left out. A GPU-hour metered again because its
    holdings changed is not in its window: its readings were new to an earlier rollup."""
    windows: dict[int, tuple[int, int]] = {}
    for gpu_id, through in session.execute(
        text("SELECT gpu_id, through FROM metering_cursors WHERE through > :since"), {"since": since}
    ):
        start = max(cursors_before.get(gpu_id, since), since)
        if start < through:
            windows[gpu_id] = (start, int(through))
    return windows


def settle_arrivals(session: Session, arrivals: Arrivals, metered_from: int) -> None:
    """Remove the arrival records the rollup dealt with: those it read at its start and, on PostgreSQL, those of
    transactions committed before its metering began whose readings were all at or after their GPU's cursor at
    its start and at or after ``metered_from`` (epoch seconds: the rollup rebuilt every hour from it to its
    ``until``), so metered by it or new to the next. Records of later transactions, of readings in hours it did
    not rebuild (their GPU's cursor may have moved past them), and late ones it did not read, stay for the next."""
    connection = session.connection()
    if connection.dialect.name != "postgresql":
        session.execute(text("DELETE FROM reading_arrivals"))
        return
    done = set(arrivals.seen)
    if arrivals.snapshot is not None:
        since = session.execute(
            text(
                "SELECT id, earliest FROM reading_arrivals WHERE xact IS NOT NULL AND NOT id = ANY(:seen) "
                "AND pg_visible_in_snapshot(CAST(CAST(xact AS text) AS xid8), CAST(:snapshot AS pg_snapshot))"
            ),
            {"seen": arrivals.seen, "snapshot": arrivals.snapshot},
        )
        for row in since:
            earliest = _earliest([row.earliest]).items()
            if all(ts >= metered_from and ts >= arrivals.cursors.get(gpu, ts) for gpu, ts in earliest):
                done.add(row.id)
    if done:
        session.execute(text("DELETE FROM reading_arrivals WHERE id = ANY(:ids)"), {"ids": sorted(done)})


@dataclass(frozen=True, slots=True)
class Shipped:
    """What a helper connection's rebuild of a chunk keeps, for the rollup's own session to write
    (:func:`keep`): its sums, holdings and new cursors, each as :func:`finops.db.dialect.copy_out` gives them."""

    units: Copied
    holdings: Copied
    cursors: Copied


def ship(connection: Connection) -> Shipped:
    """What the chunk just metered on ``connection`` keeps (its ``tmp_ledger_units``,
    ``tmp_ledger_metered_holdings`` and ``tmp_ledger_new_cursors``), as :func:`finops.db.dialect.copy_out` gives
    them."""
    return Shipped(
        copy_out(connection, "tmp_ledger_units", KEPT_COLUMNS),
        copy_out(connection, "tmp_ledger_metered_holdings", HOLDING_COLUMNS),
        copy_out(connection, "tmp_ledger_new_cursors", CURSOR_COLUMNS),
    )


_SHIPPED_CURSORS = "tmp_ledger_shipped_cursors"


def keep(session: Session, h0: int, h1: int, shipped: Shipped | None) -> None:
    """Replace what is kept of hours [h0, h1) by the chunk's metering: its sums and holdings, and move its GPUs'
    cursors forward (never back). ``shipped`` None: from this connection's work tables
    (:func:`finops.ledger.metering.meter` ran here); else from another connection's (:func:`ship`)."""
    connection = session.connection()
    hours = {"h0": h0, "h1": h1}
    session.execute(text("DELETE FROM gpu_hour_metering WHERE hour >= :h0 AND hour < :h1"), hours)
    session.execute(text("DELETE FROM metered_holdings WHERE hour >= :h0 AND hour < :h1"), hours)
    cursors = "tmp_ledger_new_cursors"
    if shipped is None:
        kept, held = ", ".join(KEPT_COLUMNS), ", ".join(HOLDING_COLUMNS)
        session.execute(text(f"INSERT INTO gpu_hour_metering ({kept}) SELECT {kept} FROM tmp_ledger_units"))  # noqa: S608
        session.execute(
            text(f"INSERT INTO metered_holdings ({held}) SELECT {held} FROM tmp_ledger_metered_holdings")  # noqa: S608
        )
    else:
        copy_in(connection, "gpu_hour_metering", KEPT_COLUMNS, shipped.units)
        copy_in(connection, "metered_holdings", HOLDING_COLUMNS, shipped.holdings)
        run_statements(
            connection,
            [
                f"CREATE TEMPORARY TABLE IF NOT EXISTS {_SHIPPED_CURSORS} (gpu_id INTEGER PRIMARY KEY, through BIGINT)",
                *emptying(connection, [_SHIPPED_CURSORS]),
            ],
        )
        copy_in(connection, _SHIPPED_CURSORS, CURSOR_COLUMNS, shipped.cursors)
        cursors = _SHIPPED_CURSORS
    session.execute(
        text(
            f"INSERT INTO metering_cursors (gpu_id, through) SELECT gpu_id, through FROM {cursors} WHERE 1 = 1 "  # noqa: S608
            "ON CONFLICT (gpu_id) DO UPDATE SET through = CASE WHEN excluded.through > metering_cursors.through "
            "THEN excluded.through ELSE metering_cursors.through END"
        )
    )
