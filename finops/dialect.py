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
    """The hot-path variant of :func:`insert_ignoring_conflicts`: plain tuples straight to the driver's
    ``executemany`` (no per-value type processing), so values must already be in their stored form
    (epoch seconds for instants). ``INSERT … ON CONFLICT DO NOTHING`` is the same on SQLite ≥ 3.24 and
    PostgreSQL; only the placeholder differs (``?`` for sqlite3, ``%s`` for psycopg)."""
    if not rows:
        return
    connection = session.connection()
    placeholder = "?" if connection.dialect.paramstyle == "qmark" else "%s"
    names = ", ".join(f'"{name}"' for name in columns)
    marks = ", ".join(placeholder for _ in columns)
    statement = f'INSERT INTO "{table.name}" ({names}) VALUES ({marks}) ON CONFLICT DO NOTHING'  # noqa: S608
    connection.exec_driver_sql(statement, list(rows))
