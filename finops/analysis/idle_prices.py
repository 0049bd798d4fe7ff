"""What idle episodes cost, when they are stored and when a price change alone re-prices them.

An episode costs the capacity cost of [start, end) at the rate in effect at its start for the GPU's model under its
node's pricing model (:func:`finops.pricing.rules.pricing_models_by_node`), None (unpriced, never 0) when the model
has no price then (:class:`EpisodePrices`, used when episodes are stored: :func:`finops.analysis.idle.detect_idle`).
A price change alone (a catalog import, a pricing rule) changes nothing else of an episode, so the rollup that
rebuilds the hours it marked re-prices their stored episodes (:func:`claim_repriced_hours`, :func:`reprice_episodes`)
instead of reading their readings again: one read of the episodes and one batched update. They keep their rows, and
outlive the raw readings as the ledger does."""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from sqlalchemy import delete, func, or_, select, text, update
from sqlalchemy.orm import Session

from finops.db.dialect import insert_ignoring_conflicts, serialise_transactions
from finops.db.ledger_tables import DirtyHour, LedgerEntry, RepricedHour
from finops.db.models import Gpu, IdleEpisode
from finops.ingest.partitions import floor_day
from finops.ledger.costmodel import capacity_cost
from finops.ledger.rollup import ROLLUP_LOCK_KEY
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


def claim_repriced_hours(session: Session, until: int) -> frozenset[int]:
    """The hours before the ledger's newest one that only a price change marked dirty since they were last rebuilt
    (:func:`finops.db.hours.mark_hours_repriced`), taken out of :class:`~finops.db.ledger_tables.RepricedHour` (every
    marked hour before ``until``) for the rollup that follows in this transaction: their stored idle episodes are to
    be re-priced, not judged again (:func:`finops.analysis.idle.rejudge_idle`). Call it right before the rollup, after
    whatever else marks hours in the transaction. The ledger's newest hour and those after it are left to be judged:
    the rollup rebuilds them for the readings that arrive there whatever marks them.

    Taken under the rollup's lock (:data:`finops.ledger.rollup.ROLLUP_LOCK_KEY`), and on PostgreSQL with the dirty
    marks' table locked for writing first (the order every writer of both tables takes them in). A mark of new data
    made meanwhile by another transaction waits for this one to end (its trigger deletes a row deleted here) and
    then marks the hour dirty again, for the next rollup to judge."""
    serialise_transactions(session, ROLLUP_LOCK_KEY, DirtyHour)
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text(f"LOCK TABLE {DirtyHour.__tablename__} IN ROW EXCLUSIVE MODE"))
    claimed = session.scalars(
        delete(RepricedHour).where(RepricedHour.hour < from_epoch(until)).returning(RepricedHour.hour)
    ).all()
    newest = session.scalar(select(func.max(LedgerEntry.hour)))
    if newest is None:
        return frozenset()
    return frozenset(to_epoch(hour) for hour in claimed if hour < newest)


def release_repriced_hours(session: Session, hours: Iterable[int]) -> None:
    """Put back the re-priced marks of ``hours`` (epoch starts), claimed by :func:`claim_repriced_hours` in this
    transaction but not rebuilt by its rollup (a rollup that rebuilds at most so many hours a transaction: they stay
    marked dirty for the next one), so that the transaction that rebuilds them re-prices their episodes too. A mark of
    new data waiting for this transaction then removes them, as it would have before the claim."""
    table: Any = RepricedHour.__table__
    insert_ignoring_conflicts(session, table, [{"hour": from_epoch(hour)} for hour in sorted(set(hours))])


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
