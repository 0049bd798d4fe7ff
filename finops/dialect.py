"""The one place that knows how SQLite and PostgreSQL differ for inserts that skip existing keys."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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


def bulk_insert_ignoring_conflicts(
    session: Session, table: Table, columns: Sequence[str], rows: Sequence[tuple[Any, ...]]
) -> None:
    """The hot-path variant of :func:`insert_ignoring_conflicts` for plain tuples already in their stored
    form (epoch seconds for instants; no per-value type processing).

    PostgreSQL: ``COPY`` into a session-local staging table, then one ``INSERT … SELECT … ON CONFLICT DO
    NOTHING``. SQLite: the driver's ``executemany`` of ``INSERT … ON CONFLICT DO NOTHING`` (SQLite ≥ 3.24).
    """
    if not rows:
        return
    connection = session.connection()
    names = ", ".join(f'"{name}"' for name in columns)
    if connection.dialect.name == "postgresql":
        stage = f"stage_{table.name}"
        with connection.connection.driver_connection.cursor() as cursor:  # type: ignore[union-attr]
            cursor.execute(
                f'CREATE TEMPORARY TABLE IF NOT EXISTS "{stage}" (LIKE "{table.name}") ON COMMIT DELETE ROWS'
            )
            cursor.execute(f'TRUNCATE "{stage}"')
            with cursor.copy(f'COPY "{stage}" ({names}) FROM STDIN') as copy:
                for row in rows:
                    copy.write_row(row)
            cursor.execute(
                f'INSERT INTO "{table.name}" ({names}) SELECT {names} FROM "{stage}" ON CONFLICT DO NOTHING'  # noqa: S608
            )
        return
    marks = ", ".join("?" for _ in columns)
    statement = f'INSERT INTO "{table.name}" ({names}) VALUES ({marks}) ON CONFLICT DO NOTHING'  # noqa: S608
    connection.exec_driver_sql(statement, list(rows))
