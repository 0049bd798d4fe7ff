"""The FOCUS export's columns and how they are written: the FOCUS 1.2 columns and the provider ``x_`` columns with
their kinds, and the CSV and Parquet writers of :mod:`finops.export.focus`'s rows.

CSV writes decimal text (never exponent notation) and ISO 8601 times ending in ``Z``; Parquet (pyarrow) writes
``decimal128`` money and UTC timestamps (FOCUS 1.2, ``specification/columns/*.md`` and "Data types" of the
FinOps-Open-Cost-and-Usage-Spec/FOCUS_Spec repository at tag ``v1.2``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from finops.csv_cells import csv_line

FOCUS_VERSION = "1.2"
Kind = Literal["string", "datetime", "decimal6", "decimal12", "int", "float"]
"""How a column is typed: text (JSON included), UTC instant, decimal to 10⁻⁶ (money, kWh), decimal to 10⁻¹²
(:data:`FINE`: prices, quantities, ListCost), integer, float."""

STANDARD_COLUMNS: tuple[tuple[str, Kind], ...] = (
    ("BilledCost", "decimal6"),
    ("BillingAccountId", "string"),
    ("BillingAccountName", "string"),
    ("BillingCurrency", "string"),
    ("BillingPeriodEnd", "datetime"),
    ("BillingPeriodStart", "datetime"),
    ("ChargeCategory", "string"),
    ("ChargeClass", "string"),
    ("ChargeDescription", "string"),
    ("ChargeFrequency", "string"),
    ("ChargePeriodEnd", "datetime"),
    ("ChargePeriodStart", "datetime"),
    ("CommitmentDiscountStatus", "string"),
    ("ConsumedQuantity", "decimal12"),
    ("ConsumedUnit", "string"),
    ("ContractedCost", "decimal6"),
    ("ContractedUnitPrice", "decimal12"),
    ("EffectiveCost", "decimal6"),
    ("InvoiceId", "string"),
    ("InvoiceIssuerName", "string"),
    ("ListCost", "decimal12"),
    ("ListUnitPrice", "decimal12"),
    ("PricingCategory", "string"),
    ("PricingCurrency", "string"),
    ("PricingCurrencyContractedUnitPrice", "decimal12"),
    ("PricingCurrencyEffectiveCost", "decimal6"),
    ("PricingCurrencyListUnitPrice", "decimal12"),
    ("PricingQuantity", "decimal12"),
    ("PricingUnit", "string"),
    ("ProviderName", "string"),
    ("PublisherName", "string"),
    ("RegionId", "string"),
    ("RegionName", "string"),
    ("ResourceId", "string"),
    ("ResourceName", "string"),
    ("ResourceType", "string"),
    ("ServiceCategory", "string"),
    ("ServiceName", "string"),
    ("ServiceSubcategory", "string"),
    ("SkuId", "string"),
    ("SkuMeter", "string"),
    ("SkuPriceDetails", "string"),
    ("SkuPriceId", "string"),
    ("SubAccountId", "string"),
    ("SubAccountName", "string"),
    ("Tags", "string"),
)
"""The FOCUS 1.2 columns written, alphabetical (FOCUS allows any order of its own columns)."""

CUSTOM_COLUMNS: tuple[tuple[str, Kind], ...] = (
    ("x_Team", "string"),
    ("x_JobId", "string"),
    ("x_User", "string"),
    ("x_Account", "string"),
    ("x_Project", "string"),
    ("x_Cluster", "string"),
    ("x_Node", "string"),
    ("x_GpuIndex", "int"),
    ("x_GpuModel", "string"),
    ("x_PricingModel", "string"),
    ("x_GpuSeconds", "int"),
    ("x_SampleCount", "int"),
    ("x_Utilization", "float"),
    ("x_UsedCost", "decimal6"),
    ("x_IdleCost", "decimal6"),
    ("x_EnergyKwh", "decimal6"),
    ("x_EnergyCost", "decimal6"),
    ("x_ProfiledGpuSeconds", "int"),
    ("x_SmActiveRatio", "float"),
    ("x_TensorActiveRatio", "float"),
    ("x_DramActiveRatio", "float"),
    ("x_SmActiveCost", "decimal6"),
)
"""Provider columns, after the FOCUS ones as FOCUS asks (ColumnHandling: ``x_`` prefix, not intermixed)."""

COLUMNS: tuple[tuple[str, Kind], ...] = STANDARD_COLUMNS + CUSTOM_COLUMNS
COLUMN_NAMES: tuple[str, ...] = tuple(name for name, _ in COLUMNS)


@lru_cache(maxsize=4096)
def iso(at: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SSZ`` of an aware UTC instant (cached: an export repeats each hour once per GPU)."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _decimal_text(value: Decimal) -> str:
    return f"{value:f}"


def _float_text(value: float) -> str:
    """The shortest round-trip digits of ``value`` in positional notation (no exponent)."""
    return f"{Decimal(repr(value)):f}"


_CSV_TEXT: dict[Kind, Callable[[Any], str]] = {
    "string": str,
    "datetime": iso,
    "decimal6": _decimal_text,
    "decimal12": _decimal_text,
    "int": str,
    "float": _float_text,
}


def write_csv(rows: Iterable[Mapping[str, Any]], path: Path) -> int:
    """Write ``rows`` (:func:`finops.export.focus.focus_rows`) to ``path`` as CSV with a header line; returns the
    row count.

    Nulls are empty fields, decimals plain decimal text (never exponent notation), times
    ``YYYY-MM-DDTHH:MM:SSZ``. UTF-8, RFC 4180 quoting, ``\\n`` line ends; a text column's cell that a spreadsheet
    would run as a formula is escaped (:mod:`finops.csv_cells`), the other columns' are numbers and times, unchanged.
    """
    text = [(name, _CSV_TEXT[kind]) for name, kind in COLUMNS]
    count = 0
    with path.open("w", encoding="utf-8", newline="") as handle:
        handle.write(csv_line(COLUMN_NAMES))
        for row in rows:
            handle.write(csv_line(None if (value := row[name]) is None else format_(value) for name, format_ in text))
            count += 1
    return count


def parquet_schema() -> Any:
    """The pyarrow schema of the Parquet export: decimal128(20, 6) money and kWh, decimal128(28, 12) prices,
    quantities and ListCost, timestamp[s, UTC] times, int64, float64 and UTF-8 strings."""
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "datetime": pa.timestamp("s", tz="UTC"),
        "decimal6": pa.decimal128(20, 6),
        "decimal12": pa.decimal128(28, 12),
        "int": pa.int64(),
        "float": pa.float64(),
    }
    metadata = {"FocusVersion": FOCUS_VERSION, "DataGenerator": "gpu-finops"}
    return pa.schema([pa.field(name, types[kind]) for name, kind in COLUMNS], metadata=metadata)


def write_parquet(rows: Iterable[Mapping[str, Any]], path: Path, chunk_rows: int = 50_000) -> int:
    """Write ``rows`` (:func:`finops.export.focus.focus_rows`) to ``path`` as Parquet, ``chunk_rows`` rows per row
    group; returns the row count. Needs pyarrow (the ``service`` extra has it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = parquet_schema()
    count = 0
    with pq.ParquetWriter(path, schema) as writer:
        columns: dict[str, list[Any]] = {name: [] for name in COLUMN_NAMES}
        pending = 0
        for row in rows:
            for name in COLUMN_NAMES:
                columns[name].append(row[name])
            pending += 1
            if pending == chunk_rows:
                writer.write_batch(pa.record_batch(list(columns.values()), schema=schema))
                count += pending
                columns = {name: [] for name in COLUMN_NAMES}
                pending = 0
        if pending or not count:
            writer.write_batch(pa.record_batch(list(columns.values()), schema=schema))
            count += pending
    return count
