"""FOCUS 1.2 export of the hourly ledger: one FOCUS cost-and-usage row per ledger row (GPU × UTC hour × holder).

FOCUS (FinOps Open Cost and Usage Specification, version 1.2, https://focus.finops.org, columns as defined in
``specification/columns/*.md`` of the FinOps-Open-Cost-and-Usage-Spec/FOCUS_Spec repository at tag ``v1.2``)
is the cost format finance tools read. docs/cost-model.md ("FOCUS export") has the column mapping; in short:

- every row is a ``Usage`` charge of one GPU over one hour: ChargePeriodStart = the ledger hour,
  ChargePeriodEnd = hour + 1 h, BillingPeriodStart/End = the calendar month (UTC) holding it;
- BilledCost = EffectiveCost = ContractedCost = the ledger's ``allocated_cost`` (exact, 6 decimals), so
  Σ BilledCost of an export equals Σ allocated cost of the ledger over the same hours, unallocated capacity
  (team ``__unallocated__``) included;
- ContractedUnitPrice = the rate of the row's pricing model (recorded per ledger row) in the price catalog,
  ListUnitPrice = the catalog's on-demand rate;
  PricingQuantity = ContractedCost ÷ ContractedUnitPrice (GPU-hours; FOCUS requires unit price ×
  quantity = cost) and ListCost = ContractedCost × ListUnitPrice ÷ ContractedUnitPrice, i.e. the on-demand
  price of the same GPU-hours. These three are rounded half-even to :data:`FINE` (10⁻¹² GPU-hours or
  currency); ConsumedQuantity = held seconds ÷ 3600 to the same quantum;
- team, job, user and account go to SubAccountId/Name (the team), Tags (JSON) and ``x_`` columns;
- hardware activity, in provider columns named by FOCUS's column naming convention (Pascal case, ``x_`` prefix,
  ``specification/attributes/column_naming_convention.md``): x_ProfiledGpuSeconds (held seconds metered with a
  profiling field), x_SmActiveRatio, x_TensorActiveRatio, x_DramActiveRatio (the ledger row's means, 0..1) and
  x_SmActiveCost (allocated × SM activity, exact); null where the row measured none (never 0).

Rows are read with ``yield_per`` and written as they come, so a month of a large cluster never sits in
memory; the columns and the CSV and Parquet writers are :mod:`finops.export.focus_format`'s.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Context, Decimal, localcontext
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from finops.db.ledger_tables import LedgerEntry
from finops.db.models import Gpu, Job, Node, Team
from finops.errors import FinopsError
from finops.export.focus_format import iso, write_csv, write_parquet
from finops.ledger.costmodel import JOULES_PER_KWH, QUANTUM, SECONDS_PER_HOUR
from finops.pricing.catalog import PriceNotFound, Pricing, PricingModel
from finops.timeutil import month_start, next_month_start

log = logging.getLogger(__name__)

FINE = Decimal("0.000000000001")
"""Quantum of unit prices, quantities and ListCost: 10⁻¹² (money columns keep the ledger's 10⁻⁶)."""
KWH_QUANTUM = Decimal("0.000001")
GPU_HOURS = "GPU-Hours"
SERVICE_CATEGORY = "AI and Machine Learning"
SERVICE_SUBCATEGORY = "Machine Learning"
RESOURCE_TYPE = "GPU"
SKU_METER = "GPU time"
CHUNK_ROWS = 10_000

_ARITHMETIC = Context(prec=50, rounding=ROUND_HALF_EVEN)
_HOUR = timedelta(hours=1)

PRICING_CATEGORY = {
    PricingModel.ON_DEMAND: "Standard",
    PricingModel.RESERVED: "Standard",
    PricingModel.SPOT: "Dynamic",
    PricingModel.ON_PREM: "Other",
}
"""FOCUS PricingCategory of each pricing model. A reserved rate is an agreed contract rate (Standard), not a
FOCUS commitment discount (which needs purchase and amortisation rows); spot prices change at the provider's
will (Dynamic); owning the GPU is none of those (Other)."""

FocusRow = dict[str, Any]


class FocusExportError(FinopsError, ValueError):
    """The export cannot be written as asked: bad period or output file, or a price the ledger needs."""


@dataclass(frozen=True, slots=True)
class FocusAccount:
    """Who provides and bills the GPUs, as FOCUS names them.

    ``provider`` fills ProviderName, PublisherName and InvoiceIssuerName; ``billing_account`` fills
    BillingAccountId and BillingAccountName; ``region`` (None: null) fills RegionId and RegionName.
    """

    provider: str = "GPU cluster"
    billing_account: str = "gpu-cluster"
    service_name: str = "GPU Compute"
    region: str | None = None


@dataclass(frozen=True, slots=True)
class FocusExport:
    """What :func:`export_focus` wrote: the file, its row count and Σ BilledCost (exact) in ``currency``."""

    path: Path
    rows: int
    billed_cost: Decimal
    currency: str | None


def output_format(path: Path) -> Literal["csv", "parquet"]:
    """``csv`` or ``parquet`` from ``path``'s extension; FocusExportError naming the file for any other."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return "csv"
    if suffix == ".parquet":
        return "parquet"
    raise FocusExportError(f"output file {path}: unknown extension {suffix or '(none)'!r}; use .csv or .parquet")


def check_period(start: datetime, end: datetime) -> None:
    """Raise FocusExportError unless ``start`` < ``end`` are aware UTC instants on whole hours (names the field)."""
    for name, value in (("start", start), ("end", end)):
        if value.tzinfo is None:
            raise FocusExportError(f"{name} {value.isoformat()} has no time zone; give a UTC time")
        utc = value.astimezone(UTC)
        if utc.minute or utc.second or utc.microsecond:
            raise FocusExportError(f"{name} {value.isoformat()} is not on a whole UTC hour")
    if end <= start:
        raise FocusExportError(f"end {end.isoformat()} is not after start {start.isoformat()}")


def _fine(value: Decimal) -> Decimal:
    with localcontext(_ARITHMETIC):
        return value.quantize(FINE)


class _Prices:
    """Catalog look-ups of one export, cached per GPU name, pricing model and hour (a month has 720 hours)."""

    def __init__(self, pricing: Pricing) -> None:
        self.catalog = pricing.catalog
        self._keys: dict[str, str] = {}
        self._at: dict[tuple[str, PricingModel, datetime], tuple[Decimal, Decimal, str]] = {}

    def key(self, gpu_name: str) -> str:
        """The catalog model key of ``gpu_name`` (the FOCUS SkuId)."""
        key = self._keys.get(gpu_name)
        if key is None:
            try:
                key = self._keys[gpu_name] = self.catalog.model_for(gpu_name)
            except PriceNotFound as exc:
                raise FocusExportError(f"ledger GPU model {gpu_name!r}: {exc}") from exc
        return key

    def at(self, gpu_name: str, model: PricingModel, hour: datetime) -> tuple[Decimal, Decimal, str]:
        """(rate of ``model``, on-demand rate, SkuPriceId) for ``gpu_name`` at ``hour``; rates exact."""
        cached = self._at.get((gpu_name, model, hour))
        if cached is not None:
            return cached
        key = self.key(gpu_name)
        try:
            contracted = self.catalog.rate(gpu_name, model, hour)
        except PriceNotFound as exc:
            raise FocusExportError(f"ContractedUnitPrice at {iso(hour)}: {exc}") from exc
        try:
            on_demand = self.catalog.rate(gpu_name, PricingModel.ON_DEMAND, hour)
        except PriceNotFound as exc:
            raise FocusExportError(
                f"ListUnitPrice at {iso(hour)} is the on-demand rate: {exc}; add an on-demand row to the catalog"
            ) from exc
        row = self.catalog.models[key].row_at(model, hour)
        assert row is not None  # catalog.rate found it
        self._at[gpu_name, model, hour] = result = (contracted, on_demand, f"{key}/{model}/{row.effective_from}")
        return result


def _query(start: datetime, end: datetime) -> Any:
    return (
        select(
            LedgerEntry.hour,
            LedgerEntry.seconds,
            LedgerEntry.used_gpu_seconds,
            LedgerEntry.sample_count,
            LedgerEntry.energy_joules,
            LedgerEntry.allocated_cost,
            LedgerEntry.used_cost,
            LedgerEntry.idle_cost,
            LedgerEntry.energy_cost,
            LedgerEntry.currency,
            LedgerEntry.pricing_model,
            LedgerEntry.job_pk,
            LedgerEntry.profiled_seconds,
            LedgerEntry.sm_active_ratio,
            LedgerEntry.tensor_active_ratio,
            LedgerEntry.dram_active_ratio,
            LedgerEntry.sm_active_cost,
            Gpu.uuid,
            Gpu.model,
            Gpu.gpu_index,
            Node.hostname,
            Team.name.label("team"),
            Job.job_id,
            Job.user,
            Job.account,
            Job.project,
            Job.cluster,
        )
        .join(Gpu, Gpu.id == LedgerEntry.gpu_id)
        .join(Node, Node.id == Gpu.node_id)
        .join(Team, Team.id == LedgerEntry.team_id)
        .outerjoin(Job, Job.id == LedgerEntry.job_pk)
        .where(LedgerEntry.hour >= start, LedgerEntry.hour < end)
        .order_by(LedgerEntry.hour, LedgerEntry.gpu_id, LedgerEntry.id)
        .execution_options(yield_per=CHUNK_ROWS)
    )


def focus_rows(
    session: Session, start: datetime, end: datetime, pricing: Pricing, account: FocusAccount | None = None
) -> Iterator[FocusRow]:
    """FOCUS 1.2 rows of the ledger hours in [start, end), streamed in (hour, GPU) order, ``CHUNK_ROWS`` at a time.

    Each row is a dict keyed by :data:`COLUMN_NAMES` (in that order): money and kWh as
    :class:`~decimal.Decimal` (6 decimals), prices, quantities and ListCost as Decimal to :data:`FINE`,
    times as aware UTC datetimes, JSON columns (Tags, SkuPriceDetails) as text, nulls as None.

    ``pricing`` is what the ledger was built with: the catalog in force (the newest imported one, see
    :func:`finops.pricing.store.pricing_in_force`) and the default pricing model, which prices rows that do
    not record their own. Raises FocusExportError for a period not on whole hours, a GPU model without a
    price of its pricing model or an on-demand price at an hour, or a ledger row whose cost is not its rate
    × seconds ÷ 3600 (the ledger was built with another catalog: run ``gpu-finops rollup`` first).
    """
    check_period(start, end)
    account = account or FocusAccount()
    prices = _Prices(pricing)
    for r in session.execute(_query(start, end)):
        model = PricingModel(r.pricing_model) if r.pricing_model else pricing.model
        contracted, on_demand, sku_price_id = prices.at(r.model, model, r.hour)
        key = prices.key(r.model)
        allocated: Decimal = r.allocated_cost
        with localcontext(_ARITHMETIC):
            # Whole-GPU-equivalent seconds of a shared GPU-hour are rounded to whole seconds: allow one.
            if abs(allocated - contracted * r.seconds / SECONDS_PER_HOUR) > contracted / SECONDS_PER_HOUR + 2 * QUANTUM:
                raise FocusExportError(
                    f"ledger row of GPU {r.uuid or r.hostname} at {iso(r.hour)}: allocated cost {allocated} is not "
                    f"the {model} rate {contracted} × {r.seconds} s ÷ 3600 of the price catalog in force; "
                    "the ledger was priced with another catalog (run gpu-finops rollup first)"
                )
            unit_price = _fine(contracted)
            list_price = _fine(on_demand)
            consumed = _fine(Decimal(r.seconds) / SECONDS_PER_HOUR)
            if unit_price:
                quantity = _fine(allocated / unit_price)
                list_cost = _fine(allocated * list_price / unit_price)
            else:
                quantity = consumed
                list_cost = _fine(list_price * quantity)
            energy_kwh = (Decimal(repr(r.energy_joules)) / JOULES_PER_KWH).quantize(KWH_QUANTUM)
        held = r.job_pk is not None
        tags: dict[str, str] = {"team": r.team}
        if held:
            tags.update(job=r.job_id, user=r.user, account=r.account)
            if r.project:
                tags["project"] = r.project
        holder = f"job {r.job_id} of team {r.team}" if held else "capacity held by no job"
        description = f"{key} GPU time at {unit_price.normalize():f} {r.currency}/GPU-hour ({model}), {holder}"
        yield {
            "BilledCost": allocated,
            "BillingAccountId": account.billing_account,
            "BillingAccountName": account.billing_account,
            "BillingCurrency": r.currency,
            "BillingPeriodEnd": next_month_start(r.hour),
            "BillingPeriodStart": month_start(r.hour),
            "ChargeCategory": "Usage",
            "ChargeClass": None,
            "ChargeDescription": description,
            "ChargeFrequency": "Usage-Based",
            "ChargePeriodEnd": r.hour + _HOUR,
            "ChargePeriodStart": r.hour,
            "CommitmentDiscountStatus": None,
            "ConsumedQuantity": consumed,
            "ConsumedUnit": GPU_HOURS,
            "ContractedCost": allocated,
            "ContractedUnitPrice": unit_price,
            "EffectiveCost": allocated,
            "InvoiceId": None,
            "InvoiceIssuerName": account.provider,
            "ListCost": list_cost,
            "ListUnitPrice": list_price,
            "PricingCategory": PRICING_CATEGORY[model],
            "PricingCurrency": r.currency,
            "PricingCurrencyContractedUnitPrice": unit_price,
            "PricingCurrencyEffectiveCost": allocated,
            "PricingCurrencyListUnitPrice": list_price,
            "PricingQuantity": quantity,
            "PricingUnit": GPU_HOURS,
            "ProviderName": account.provider,
            "PublisherName": account.provider,
            "RegionId": account.region,
            "RegionName": account.region,
            "ResourceId": r.uuid or f"{r.hostname}/gpu{r.gpu_index}",
            "ResourceName": f"{r.hostname} GPU {r.gpu_index}",
            "ResourceType": RESOURCE_TYPE,
            "ServiceCategory": SERVICE_CATEGORY,
            "ServiceName": account.service_name,
            "ServiceSubcategory": SERVICE_SUBCATEGORY,
            "SkuId": key,
            "SkuMeter": SKU_METER,
            "SkuPriceDetails": json.dumps({"GpuCount": 1, "x_PricingModel": str(model)}),
            "SkuPriceId": sku_price_id,
            "SubAccountId": r.team,
            "SubAccountName": r.team,
            "Tags": json.dumps(tags, ensure_ascii=False),
            "x_Team": r.team,
            "x_JobId": r.job_id,
            "x_User": r.user,
            "x_Account": r.account,
            "x_Project": r.project,
            "x_Cluster": r.cluster,
            "x_Node": r.hostname,
            "x_GpuIndex": r.gpu_index,
            "x_GpuModel": r.model,
            "x_PricingModel": str(model),
            "x_GpuSeconds": r.seconds,
            "x_SampleCount": r.sample_count,
            "x_Utilization": r.used_gpu_seconds / r.seconds if held and r.sample_count and r.seconds else None,
            "x_UsedCost": r.used_cost,
            "x_IdleCost": r.idle_cost,
            "x_EnergyKwh": energy_kwh,
            "x_EnergyCost": r.energy_cost,
            "x_ProfiledGpuSeconds": r.profiled_seconds,
            "x_SmActiveRatio": r.sm_active_ratio,
            "x_TensorActiveRatio": r.tensor_active_ratio,
            "x_DramActiveRatio": r.dram_active_ratio,
            "x_SmActiveCost": r.sm_active_cost,
        }


def export_focus(
    session: Session,
    start: datetime,
    end: datetime,
    pricing: Pricing,
    output: Path,
    account: FocusAccount | None = None,
) -> FocusExport:
    """Write the FOCUS 1.2 export of ledger hours [start, end) to ``output`` (``.csv`` or ``.parquet``).

    The file is written beside ``output`` and renamed into place when complete, so a failed export leaves
    no partial file. Returns the row count and Σ BilledCost. Raises FocusExportError for an unknown
    extension (before any query), a bad period, a file that cannot be written (naming it), or a price
    problem (see :func:`focus_rows`).
    """
    kind = output_format(output)
    check_period(start, end)
    billed = Decimal(0)
    currencies: set[str] = set()

    def counted() -> Iterator[FocusRow]:
        nonlocal billed
        for row in focus_rows(session, start, end, pricing, account):
            billed += row["BilledCost"]
            currencies.add(row["BillingCurrency"])
            yield row

    partial = output.with_name(f".{output.name}.partial")
    try:
        rows = write_csv(counted(), partial) if kind == "csv" else write_parquet(counted(), partial)
        os.replace(partial, output)
    except OSError as exc:
        raise FocusExportError(f"output file {output}: {exc.strerror or exc}") from exc
    finally:
        partial.unlink(missing_ok=True)
    if len(currencies) > 1:
        log.warning("FOCUS export %s mixes billing currencies %s", output, sorted(currencies))
    return FocusExport(output, rows, billed, min(currencies) if currencies else None)
