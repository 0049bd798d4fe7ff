"""Column types for instants and money, identical in meaning on SQLite and PostgreSQL.

- :class:`EpochSeconds`: an instant as whole seconds since the Unix epoch (``BIGINT``): unambiguous UTC,
  cheap to index and to bucket (``ts - ts % 3600`` is the hour) on both backends.
- :class:`Money`: ``NUMERIC(20, 6)`` on PostgreSQL. SQLite has no exact decimal type (its NUMERIC
  stores non-integers as floating point), so there the same column holds integer micro-units, which
  ``SUM`` adds exactly. Python always sees ``decimal.Decimal``.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import BigInteger, Numeric
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

from finops.timeutil import from_epoch, to_epoch

MONEY_SCALE = 6


class EpochSeconds(TypeDecorator[datetime]):
    """An aware UTC ``datetime`` stored as ``BIGINT`` epoch seconds. Binds also accept an ``int``."""

    impl = BigInteger
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> int | None:
        if value is None or isinstance(value, int):
            return value
        return to_epoch(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        return None if value is None else from_epoch(int(value))


class Money(TypeDecorator[Decimal]):
    """An exact amount with 6 decimals: ``NUMERIC(20, 6)``, or integer micro-units on SQLite.

    Raises ValueError when bound a value with more than 6 decimals (quantize first).
    """

    impl = Numeric(20, MONEY_SCALE)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(BigInteger())
        return dialect.type_descriptor(Numeric(20, MONEY_SCALE, asdecimal=True))

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        amount = Decimal(value)
        if amount.as_tuple().exponent < -MONEY_SCALE:  # type: ignore[operator]
            raise ValueError(f"amount {amount} has more than {MONEY_SCALE} decimals")
        return int(amount.scaleb(MONEY_SCALE)) if dialect.name == "sqlite" else amount

    def process_result_value(self, value: Any, dialect: Dialect) -> Decimal | None:
        if value is None:
            return None
        if dialect.name == "sqlite":
            return Decimal(int(value)).scaleb(-MONEY_SCALE)
        return Decimal(value)
