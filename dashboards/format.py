"""Display helpers shared by the pages: money with its currency, and tables that come with a CSV download."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import pandas as pd
import streamlit as st

from finops.ledger.costmodel import CENT

PERCENT = st.column_config.NumberColumn(format="%.1f %%")
"""Column configuration for a column of percentages (``12.5`` shown as ``12.5 %``)."""


def money(amount: Decimal, currency: str) -> str:
    """``1,234.57 USD`` (rounded half-even to cents)."""
    return f"{amount.quantize(CENT):,} {currency}".strip()


def cents(amount: Decimal) -> Decimal:
    """``amount`` rounded half-even to cents, for money columns (whose header names the currency)."""
    return amount.quantize(CENT)


def money_column(currency: str, label: str | None = None) -> Any:
    """Column configuration showing a money column as ``1234.57 USD``."""
    return st.column_config.NumberColumn(label, format=f"%.2f {currency}".strip())


def table(
    frame: pd.DataFrame,
    file_name: str,
    *,
    currency: str | None = None,
    column_config: Mapping[str, Any] | None = None,
    key: str | None = None,
) -> None:
    """``frame`` as an interactive table, and a "Download CSV" button under it that downloads the same rows as
    ``file_name`` (UTF-8, header line, money as plain decimals with the currency in the column name).

    With ``currency``, every column whose name ends in ``(<currency>)`` is shown as money in that currency."""
    config: dict[str, Any] = {}
    if currency:
        config = {str(c): money_column(currency) for c in frame.columns if str(c).endswith(f"({currency})")}
    config.update(column_config or {})
    st.dataframe(frame, hide_index=True, width="stretch", column_config=config)
    st.download_button(
        "Download CSV",
        lambda: frame.to_csv(index=False),  # made when clicked, not on every run
        file_name=file_name,
        mime="text/csv",
        key=key or f"download-{file_name}",
        on_click="ignore",
    )


def duration(seconds: int) -> str:
    """``30 seconds``, ``1 minute``, ``15 minutes``, ``1 hour``, ``6 hours``, ``1 day``."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"
