"""Which prices of a cost report rest on an estimate: the catalog rows that priced the report's ledger hours and
cite a source marked ``estimate: true`` (:class:`finops.pricing.sources.Source`; this catalogue's own estimate, a
figure as recalled, an undated listing dated by assumption). The report names them, so money resting on a guess is
never shown as if it were a cited price."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from finops.analysis.filters import Scope, ledger_conditions
from finops.db.ledger_tables import LedgerEntry
from finops.db.models import Gpu
from finops.pricing.catalog import PriceCatalog, PricingModel


@dataclass(frozen=True, slots=True)
class EstimatedPrice:
    """A catalog ``model`` whose ``pricing_model`` rows that priced the period cite an estimate, and the URLs of
    those estimate sources (in catalog order, without repeats)."""

    model: str
    pricing_model: str
    sources: tuple[str, ...]

    @property
    def note(self) -> str:
        """One line for the report: the model, pricing model and the estimate sources to replace."""
        return (
            f"estimate: the {self.pricing_model} price of {self.model} rests on an estimate "
            f"({', '.join(self.sources)}); replace it with your own rate (gpu-finops prices import)"
        )


def estimated_prices(
    session: Session,
    catalog: PriceCatalog,
    start: datetime,
    end: datetime,
    *,
    cluster: str | None = None,
    team: str | None = None,
    partition: str | None = None,
) -> list[EstimatedPrice]:
    """The estimate-based prices behind the priced ledger hours starting in [start, end), with the same filters as
    :func:`finops.analysis.report.cost_report`, sorted by model and pricing model. A ledger row's price is the
    catalog row of its GPU's model and its ``pricing_model`` in force at its hour; a GPU name no catalog model
    covers, or a pricing model the catalog does not know, has no row and is not listed (it is unpriced).

    Only the ledger rows of GPUs whose model has a row citing an estimate are read (none when the catalog cites
    none, or no GPU is of such a model: one read of ``gpus``, no ledger query)."""
    estimated = {
        key
        for key, model in catalog.models.items()
        if any(source.estimate for row in model.prices for source in row.sources)
    }
    names = [name for name in session.scalars(select(Gpu.model).distinct()) if catalog.resolve(name) in estimated]
    if not names:
        return []
    scope = Scope(cluster=cluster, team=team, partition=partition)
    spans = session.execute(
        select(Gpu.model, LedgerEntry.pricing_model, func.min(LedgerEntry.hour), func.max(LedgerEntry.hour))
        .join(Gpu, Gpu.id == LedgerEntry.gpu_id)
        .where(
            Gpu.model.in_(names),
            LedgerEntry.allocated_cost.is_not(None),
            LedgerEntry.hour >= start,
            LedgerEntry.hour < end,
            *ledger_conditions(scope),
        )
        .group_by(Gpu.model, LedgerEntry.pricing_model)
    ).all()
    found: dict[tuple[str, str], list[str]] = {}
    for gpu_name, pricing_model, first, last in spans:
        key = catalog.resolve(gpu_name)
        if key is None or pricing_model not in set(PricingModel):
            continue
        model = catalog.models[key]
        in_force = model.row_at(PricingModel(pricing_model), first)
        rows = [
            row
            for row in model.prices
            if row.pricing_model == pricing_model and (row is in_force or first < row.starts <= last)
        ]
        urls = found.setdefault((key, pricing_model), [])
        urls.extend(s.url for row in rows for s in row.sources if s.estimate and s.url not in urls)
    return [EstimatedPrice(model, pm, tuple(urls)) for (model, pm), urls in sorted(found.items()) if urls]
