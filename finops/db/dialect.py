"""The one place that knows how SQLite and PostgreSQL differ: inserts that skip existing keys, bulk loads and
binary ``COPY`` between connections, transaction-local settings and planner statistics, serialising
transactions, running several statements at once.

Callers do not ask which database they are on: most functions here do what the database needs, or nothing where
it has no such thing (PostgreSQL settings and statistics on SQLite); the few that exist on PostgreSQL only say
so, and :func:`supports_helper_connections` tells when they can be used. The one exception is SQL text that
differs by database within the ledger rebuild's statements, which :mod:`finops.ledger.sql` keeps beside them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from sqlalchemy import Connection, Table, TableClause, delete, false, insert, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session


def insert_ignoring_conflicts(session: Session, table: Table, rows: list[dict[str, Any]]) -> None:
    """Insert ``rows`` into ``table``, skipping any that collide with an existing unique key.

    Idempotent: inserting the same rows twice stores them once. Values go through the columns' types.
    """
    if not rows:
        return
    session.execute(_insert_ignoring(session, table), rows)


def insert_unless_exists(session: Session, table: Table, row: dict[str, Any]) -> bool:
    """Insert ``row`` into ``table`` unless a row with its unique key exists; True when this call inserted it.

    On PostgreSQL a concurrent transaction inserting the same key makes this one wait for it to end, then insert
    (it rolled back) or not (it committed): of two callers, exactly one gets True."""
    # The row it returns, not the rowcount: through a Session on PostgreSQL that was 1 whether a row went in or not.
    statement = _insert_ignoring(session, table).returning(*table.primary_key.columns)
    return session.execute(statement, row).first() is not None


def insert_new_keys(session: Session, table: Table, rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Insert ``rows`` into ``table``, skipping any that collide with an existing unique key, and return the primary
    keys of those this call inserted (``INSERT … ON CONFLICT DO NOTHING RETURNING``, batched)."""
    if not rows:
        return []
    statement = _insert_ignoring(session, table).returning(*table.primary_key.columns)
    return [tuple(row) for row in session.execute(statement, rows)]


def _insert_ignoring(session: Session, table: Table) -> Any:
    """``INSERT … ON CONFLICT DO NOTHING`` into ``table`` in the session's database's dialect."""
    insert = sqlite.insert if session.get_bind().dialect.name == "sqlite" else postgresql.insert
    return insert(table).on_conflict_do_nothing()


# PostgreSQL binary COPY type of each column type (as SQLAlchemy compiles it for PostgreSQL).
_COPY_TYPES = {
    "SMALLINT": "int2", "INTEGER": "int4", "BIGINT": "int8", "FLOAT": "float8", "DOUBLE PRECISION": "float8",
    "REAL": "float4", "BOOLEAN": "bool", "TEXT": "text",
}  # fmt: skip
_SAVEPOINT = "finops_bulk_insert"


_copy_type_cache: dict[tuple[Table, tuple[str, ...]], list[str]] = {}


def _copy_types(table: Table, columns: Sequence[str]) -> list[str]:
    key = (table, tuple(columns))
    if key in _copy_type_cache:
        return _copy_type_cache[key]
    kinds = []
    for name in columns:
        compiled = table.c[name].type.compile(dialect=postgresql.dialect()).upper()
        kind = "varchar" if compiled.startswith("VARCHAR") else _COPY_TYPES.get(compiled)
        if kind is None:
            raise ValueError(f"no binary COPY type for {table.name}.{name} ({compiled})")
        kinds.append(kind)
    _copy_type_cache[key] = kinds
    return kinds


def bulk_insert_ignoring_conflicts(
    session: Session,
    table: Table,
    columns: Sequence[str],
    rows: Sequence[tuple[Any, ...]],
    before: Sequence[str] = (),
) -> None:
    """The hot-path variant of :func:`insert_ignoring_conflicts` for plain tuples already in their stored
    form (epoch seconds for instants; no per-value type processing), in the caller's transaction.

    ``before``: SQL statements without parameters to run first, in order (also when there are no rows); on
    PostgreSQL they travel with the ``SAVEPOINT`` below in one round trip; SQLite runs them one by one.

    PostgreSQL: binary ``COPY`` straight into ``table`` inside a savepoint, the common case where no key exists
    yet. If one does (a replayed batch: unique violation) or two transactions inserting the same keys deadlock,
    the savepoint is rolled back and the rows go through a session-local staging table (binary ``COPY``) and one
    ``INSERT … SELECT … ON CONFLICT DO NOTHING``. Any other database error rolls back to the savepoint, so the
    transaction stays usable, and is raised (psycopg's exception). On success the savepoint stays open until the
    transaction ends (a later savepoint of the same name shadows it). SQLite: the driver's ``executemany`` of
    ``INSERT … ON CONFLICT DO NOTHING`` (SQLite ≥ 3.24).
    """
    connection = session.connection()
    if not rows or connection.dialect.name != "postgresql":
        for statement in before:
            connection.exec_driver_sql(statement)
        if not rows:
            return
    names = ", ".join(f'"{name}"' for name in columns)
    if connection.dialect.name == "postgresql":
        kinds = _copy_types(table, columns)
        with connection.connection.driver_connection.cursor() as cursor:  # type: ignore[union-attr]
            cursor.execute("; ".join([*before, f"SAVEPOINT {_SAVEPOINT}"]))
            try:
                try:
                    with cursor.copy(f'COPY "{table.name}" ({names}) FROM STDIN (FORMAT BINARY)') as copy:
                        copy.set_types(kinds)
                        for row in rows:
                            copy.write_row(row)
                except (psycopg.errors.UniqueViolation, psycopg.errors.DeadlockDetected):
                    cursor.execute(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}")
                    _stage_and_upsert(cursor, table, names, kinds, rows)
            except psycopg.Error:
                cursor.execute(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}; RELEASE SAVEPOINT {_SAVEPOINT}")
                raise
        # The savepoint is left to the transaction's end (released by COMMIT): one round trip less per batch.
        return
    marks = ", ".join("?" for _ in columns)
    statement = f'INSERT INTO "{table.name}" ({names}) VALUES ({marks}) ON CONFLICT DO NOTHING'  # noqa: S608
    connection.exec_driver_sql(statement, list(rows))


def _stage_and_upsert(
    cursor: psycopg.Cursor[Any], table: Table, names: str, kinds: list[str], rows: Sequence[tuple[Any, ...]]
) -> None:
    stage = f"stage_{table.name}"
    cursor.execute(f'CREATE TEMPORARY TABLE IF NOT EXISTS "{stage}" (LIKE "{table.name}") ON COMMIT DELETE ROWS')
    cursor.execute(f'TRUNCATE "{stage}"')
    with cursor.copy(f'COPY "{stage}" ({names}) FROM STDIN (FORMAT BINARY)') as copy:
        copy.set_types(kinds)
        for row in rows:
            copy.write_row(row)
    cursor.execute(
        f'INSERT INTO "{table.name}" ({names}) SELECT {names} FROM "{stage}" ON CONFLICT DO NOTHING'  # noqa: S608
    )


def json_rows(dialect: str, parameter: str, alias: str, columns: Mapping[str, str]) -> str:
    """A FROM-clause item ``alias`` with a row per object of the JSON array bound to ``:parameter`` (a string, e.g.
    ``json.dumps([{"gpu_id": 1, "lo": 0, "hi": 60}])``), with ``columns`` (name → SQL type of PostgreSQL:
    ``integer``, ``bigint``, ``double precision``): a batch of values as a table, in one parameter, without a
    temporary table (which a read-only transaction cannot make). PostgreSQL ``json_to_recordset``, SQLite
    ``json_each``."""
    if dialect == "postgresql":
        typed = ", ".join(f"{name} {kind}" for name, kind in columns.items())
        return f"json_to_recordset(CAST(:{parameter} AS json)) AS {alias}({typed})"
    fields = ", ".join(f"json_extract(value, '$.{name}') AS {name}" for name in columns)
    return f"(SELECT {fields} FROM json_each(:{parameter})) {alias}"  # noqa: S608 - the caller's names, not data


def larger_of_two(connection: Connection) -> str:
    """The SQL function that gives the larger of two values: ``GREATEST`` on PostgreSQL, the two-argument ``max`` on
    SQLite (which has no ``GREATEST``; its one-argument ``max`` is the aggregate)."""
    return "MAX" if connection.dialect.name == "sqlite" else "GREATEST"


def serialise_transactions(session: Session, key: int, mapped: type[Any]) -> None:
    """Make the transactions that call this with the same ``key`` run one after the other: the second waits here
    until the first has ended.

    PostgreSQL: the transaction-scoped advisory lock ``key`` (``pg_advisory_xact_lock``). SQLite: the database's
    write lock, taken by a write that changes nothing (a ``DELETE`` matching no row from the table of the mapped
    class ``mapped``), because a transaction that has read before it writes cannot wait for the lock and fails
    "database is locked".
    """
    dialect = session.connection().dialect.name
    if dialect == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
    elif dialect == "sqlite":
        session.execute(delete(mapped).where(false()))


def supports_helper_connections(connection: Connection) -> bool:
    """Whether a transaction's read-only work can be computed on other connections of its engine and the rows
    handed back (:func:`copy_out`, :func:`copy_in`): PostgreSQL, and an SQLite database in a file (in WAL mode, as
    :func:`finops.db.engine.make_engine` opens it, its readers go on while this transaction holds the write lock,
    and its driver lets other threads run while a statement runs). Not an in-memory SQLite database, which other
    connections do not share."""
    if connection.dialect.name == "sqlite":
        return connection.engine.url.database not in (None, "", ":memory:") and "mode=memory" not in str(
            connection.engine.url
        )
    return connection.dialect.name == "postgresql"


def write_mark(bind: Session | Connection) -> int | None:
    """What the transaction of ``bind`` (a session, or a connection) has written so far, to compare with a later mark:
    equal marks, nothing written between them; None before it first writes (then another connection sees the same
    data as it does). PostgreSQL: its transaction id (``txid_current_if_assigned``, assigned at the first write).
    SQLite: the rows its connection has inserted, updated or deleted (``total_changes``) once its driver has begun a
    transaction (at the first write, not at a read), else None."""
    connection = bind.connection() if isinstance(bind, Session) else bind
    if connection.dialect.name == "sqlite":
        driver = connection.connection.driver_connection
        return int(driver.total_changes) if driver.in_transaction else None  # type: ignore[union-attr]
    mark = connection.scalar(text("SELECT txid_current_if_assigned()"))
    return None if mark is None else int(mark)


def run_statements(connection: Connection, statements: Sequence[str]) -> None:
    """Run ``statements`` (SQL without parameters) in order: in one round trip on PostgreSQL, one at a time on
    SQLite (whose driver runs one statement per call)."""
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql("; ".join(statements))
        return
    for statement in statements:
        connection.exec_driver_sql(statement)


def emptying(connection: Connection, tables: Sequence[str]) -> list[str]:
    """Statements that delete every row of ``tables``: one ``TRUNCATE`` on PostgreSQL, a ``DELETE`` per table on
    SQLite (which has no ``TRUNCATE``)."""
    if connection.dialect.name == "postgresql":
        return [f"TRUNCATE {', '.join(tables)}"]
    return [f"DELETE FROM {name}" for name in tables]  # noqa: S608 - table names, not values


SHORT_SPAN_HOURS = 3
"""A rollup chunk or an idle re-judging of fewer hours than this (the 5-minute cycle's one or two) runs its
PostgreSQL statements without parallel workers (:data:`NO_PARALLEL_WORKERS`): the cycle runs beside ingest, and
workers on every core would hold up the POSTs that arrive meanwhile to shorten a statement of a second."""
NO_PARALLEL_WORKERS = {"max_parallel_workers_per_gather": "0"}
"""PostgreSQL run-time parameters of a statement that takes no parallel workers."""


@contextmanager
def transaction_settings(connection: Connection, settings: Mapping[str, str]) -> Iterator[None]:
    """PostgreSQL: apply ``settings`` (run-time parameter name → value) for the transaction's next statements,
    then put the previous values back (transaction-local, ``set_config(…, true)``: a rollback undoes them too).
    Other databases: nothing (the settings are PostgreSQL's)."""
    if connection.dialect.name != "postgresql":
        yield
        return
    names = list(settings)
    current = ", ".join(f"current_setting('{name}')" for name in names)
    previous = dict(zip(names, connection.exec_driver_sql(f"SELECT {current}").one(), strict=True))

    def apply(values: Mapping[str, str]) -> None:
        changes = ", ".join(f"set_config('{name}', %({name})s, true)" for name in values)
        connection.exec_driver_sql(f"SELECT {changes}", dict(values))

    apply(settings)
    yield  # on an error the transaction is rolled back, and its settings with it
    apply(previous)


def set_local(connection: Connection, settings: Mapping[str, str]) -> None:
    """PostgreSQL: ``SET LOCAL`` each of ``settings`` (name → value, SQL literals) until the transaction ends.
    Other databases: nothing."""
    if connection.dialect.name == "postgresql":
        for name, value in settings.items():
            connection.exec_driver_sql(f"SET LOCAL {name} = {value}")


def analyze(connection: Connection, *tables: str) -> None:
    """PostgreSQL: ``ANALYZE`` freshly filled ``tables`` so that the planner has their statistics (autovacuum
    never analyzes temporary tables; without statistics the planner misjudges joins by orders of magnitude).
    Other databases: nothing."""
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql(f"ANALYZE {', '.join(tables)}")


def insert_rows(connection: Connection, table: TableClause, rows: Sequence[Mapping[str, Any]]) -> None:
    """Add ``rows`` (column name → value, every column of ``table``) to a table with no unique key to collide
    with, such as a work table.

    PostgreSQL: a text ``COPY … FROM STDIN`` with the values as the driver adapts them (no SQLAlchemy type
    processing: they must already be what the columns store, e.g. ``Decimal`` for money). Other databases: an
    executemany of ``INSERT`` through ``table``'s column types.
    """
    if not rows:
        return
    if connection.dialect.name != "postgresql":
        connection.execute(insert(table), list(rows))
        return
    columns = list(table.c.keys())
    cursor = connection.connection.driver_connection.cursor()  # type: ignore[union-attr]
    quoted = ", ".join(f'"{name}"' for name in columns)  # "end" is a reserved word
    with cursor, cursor.copy(f"COPY {table.name} ({quoted}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row([row[name] for name in columns])


Copied = bytes | list[tuple[Any, ...]]
"""Rows moved from one connection to another (:func:`copy_out`): PostgreSQL's binary ``COPY`` format, or on SQLite
the rows as the driver reads them (the values the columns store: money in integer micro-units)."""


def copy_out(connection: Connection, table: str, columns: Sequence[str]) -> Copied:
    """``columns`` of every row of ``table``, for :func:`copy_in` on another connection of the same database:
    PostgreSQL's binary ``COPY`` output, SQLite's rows."""
    if connection.dialect.name == "sqlite":
        rows = connection.exec_driver_sql(f"SELECT {', '.join(columns)} FROM {table}")  # noqa: S608 - our names
        return [tuple(row) for row in rows]
    cursor = connection.connection.driver_connection.cursor()  # type: ignore[union-attr]
    with cursor, cursor.copy(f"COPY {table} ({', '.join(columns)}) TO STDOUT (FORMAT binary)") as copy:
        return b"".join(bytes(data) for data in copy)


def copy_in(connection: Connection, table: str, columns: Sequence[str], data: Copied) -> None:
    """Add the rows of ``data`` (:func:`copy_out`'s output for the same ``columns``) to ``table``, in the
    connection's transaction."""
    if isinstance(data, list):
        if data:
            marks = ", ".join("?" * len(columns))
            connection.exec_driver_sql(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", data)  # noqa: S608
        return
    cursor = connection.connection.driver_connection.cursor()  # type: ignore[union-attr]
    with cursor, cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN (FORMAT binary)") as copy:
        copy.write(data)
