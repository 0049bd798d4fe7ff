"""The one place that knows SQLite and PostgreSQL spell ``INSERT … ON CONFLICT DO NOTHING`` differently."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session


def insert_ignoring_conflicts(session: Session, table: Table, rows: list[dict[str, Any]]) -> None:
    """Insert ``rows`` into ``table``, skipping any that collide with an existing unique key.

    Idempotent: inserting the same rows twice stores them once. Batched by SQLAlchemy's insertmanyvalues.
    """
    if not rows:
        return
    dialect = session.get_bind().dialect.name
    insert = sqlite.insert if dialect == "sqlite" else postgresql.insert
    session.execute(insert(table).on_conflict_do_nothing(), rows)
