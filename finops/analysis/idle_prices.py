"""What idle episodes cost: the capacity cost of [start, end) at the rate in effect at the start for the GPU's model
under its node's pricing model (:func:`finops.pricing.rules.pricing_models_by_node`), None (unpriced, never 0) when
the model has no price then. Used when episodes are stored (:func:`finops.analysis.idle.detect_idle`) and when
a price change re-prices stored ones without judging them again (:func:`reprice_episodes`)."""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from finops.db.models import Gpu, IdleEpisode
from finops.ingest.partitions import floor_day
from finops.ledger.costmodel import capacity_cost
from finops.pricing.catalog import PriceNotFound, Pricing, PricingModel
from finops.pricing.rules import pricing_models_by_node
from finops.timeutil import HOUR, from_epoch, to_epoch


class EpisodePrices:
    """The costs of idle episodes of ``gpu_ids`` (all GPUs when None) under ``pricing``'s catalog and the pricing
    rules stored now. Rates change at UTC midnights (a catalog row's ``effective_from``), so each model and pricing
    model's rate is looked up once per day."""

    def __init__(self, session: Session, pricing: Pricing, gpu_ids: Iterable[int] | None = None) -> None:
        self.catalog = pricing.catalog
        node_models = pricing_models_by_node(session, pricing.model)
        query = select(Gpu.id, Gpu.model, Gpu.node_id)
        if gpu_ids is not None:
            query = query.where(Gpu.id.in_(sorted(set(gpu_ids))))
        self._gpus: dict[int, tuple[str, PricingModel, int]] = {
            gpu_id: (model, node_models.get(node_id, pricing.model), node_id)
            for gpu_id, model, node_id in session.execute(query)
        }
        self._rates: dict[tuple[str, PricingModel, int], Decimal | None] = {}

    @property
    def currency(self) -> str:
        """The catalog's currency (ISO 4217), every cost's."""
        return self.catalog.currency

    def node(self, gpu_id: int) -> int:
        """The id of the node GPU ``gpu_id`` is on."""
        return self._gpus[gpu_id][2]

    def cost(self, gpu_id: int, start: int, end: int) -> Decimal | None:
        """The cost of GPU ``gpu_id`` over [start, end) (epoch seconds): the rate at ``start`` × the duration
        (:func:`finops.ledger.costmodel.capacity_cost`), None when its model has no price then."""
        model, pricing_model, _ = self._gpus[gpu_id]
        key = (model, pricing_model, floor_day(start))
        if key not in self._rates:
            try:
                self._rates[key] = self.catalog.rate(model, pricing_model, from_epoch(start))
            except PriceNotFound:
                self._rates[key] = None  # unpriced, never 0: a catalog import that prices it re-prices it
        rate = self._rates[key]
        return None if rate is None else capacity_cost(rate, end - start)


def reprice_episodes(session: Session, pricing: Pricing, hours: Iterable[int]) -> int:
    """Give the stored idle episodes that start in the UTC hours ``hours`` (epoch starts) the cost and currency of
    ``pricing`` and the pricing rules stored now, their extent and reason untouched (what a price change alters
    of them); returns how many changed. One read of the episodes and one batched update of those that changed."""
    spans: list[list[int]] = []
    for hour in sorted(set(hours)):
        if spans and spans[-1][1] == hour:
            spans[-1][1] = hour + HOUR
        else:
            spans.append([hour, hour + HOUR])
    if not spans:
        return 0
    found = session.execute(
        select(IdleEpisode.id, IdleEpisode.gpu_id, IdleEpisode.start, IdleEpisode.end, IdleEpisode.cost,
               IdleEpisode.currency)
        .where(or_(*(IdleEpisode.start.between(from_epoch(lo), from_epoch(hi - 1)) for lo, hi in spans)))
    ).all()  # fmt: skip
    if not found:
        return 0
    prices = EpisodePrices(session, pricing, {row.gpu_id for row in found})
    changed = []
    for episode_id, gpu_id, start, end, cost, currency in found:
        new = prices.cost(gpu_id, to_epoch(start), to_epoch(end))
        if (new, prices.currency) != (cost, currency):
            changed.append({"id": episode_id, "cost": new, "currency": prices.currency})
    if changed:
        session.execute(update(IdleEpisode), changed)  # by primary key, batched
    return len(changed)
