"""The one place that knows how SQLite and PostgreSQL differ for inserts that skip existing keys."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session


def insert_ignoring_conflicts(session: Session, table: Table, rows: list[dict[str, Any]]) -> None:
    """Insert ``rows`` into ``table``, skipping any that collide with an existing unique key.

    Idempotent: inserting the same rows twice stores them once. Values go through the columns' types.
    """
    if not rows:
        return
    dialect = session.get_bind().dialect.name
    insert = sqlite.insert if dialect == "sqlite" else postgresql.insert
    session.execute(insert(table).on_conflict_do_nothing(), rows)


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
    session: Session, table: Table, columns: Sequence[str], rows: Sequence[tuple[Any, ...]], before: str = ""
) -> None:
    """The hot-path variant of :func:`insert_ignoring_conflicts` for plain tuples already in their stored
    form (epoch seconds for instants; no per-value type processing), in the caller's transaction.

    ``before``: one SQL statement without parameters to run first (also when there are no rows); on PostgreSQL
    it travels with the ``SAVEPOINT`` below, saving a round trip.

    PostgreSQL: binary ``COPY`` straight into ``table`` inside a savepoint, the common case where no key exists
    yet. If one does (a replayed batch: unique violation) or two transactions inserting the same keys deadlock,
    the savepoint is rolled back and the rows go through a session-local staging table (binary ``COPY``) and one
    ``INSERT … SELECT … ON CONFLICT DO NOTHING``. Any other database error rolls back to the savepoint, so the
    transaction stays usable, and is raised (psycopg's exception). On success the savepoint stays open until the
    transaction ends (a later savepoint of the same name shadows it). SQLite: the driver's ``executemany`` of
    ``INSERT … ON CONFLICT DO NOTHING`` (SQLite ≥ 3.24).
    """
    connection = session.connection()
    if not rows:
        if before:
            connection.exec_driver_sql(before)
        return
    names = ", ".join(f'"{name}"' for name in columns)
    if connection.dialect.name == "postgresql":
        kinds = _copy_types(table, columns)
        with connection.connection.driver_connection.cursor() as cursor:  # type: ignore[union-attr]
            cursor.execute(f"{before}; SAVEPOINT {_SAVEPOINT}" if before else f"SAVEPOINT {_SAVEPOINT}")
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
    if before:
        connection.exec_driver_sql(before)
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
