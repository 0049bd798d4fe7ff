"""Fetching a row by its natural key, creating it when it does not exist yet."""

from __future__ import annotations

from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from finops.db.models import Base

RowT = TypeVar("RowT", bound=Base)


def get_or_create(session: Session, model: type[RowT], **key: Any) -> RowT:
    """The ``model`` row whose columns equal ``key``, inserted (and flushed, so it has its id) if missing."""
    row = session.scalars(select(model).filter_by(**key)).one_or_none()
    if row is None:
        row = model(**key)
        session.add(row)
        session.flush()
    return row
