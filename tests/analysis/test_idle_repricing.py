"""A price change alone (a pricing rule, a catalog import) re-prices the stored idle episodes at the next rollup without
judging them again: the same rows (ids), extents and reasons, the new cost, and no detection over their hours. New
readings or jobs in those hours, before or after the price change, still have them judged again. Both databases."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from finops.analysis import idle
from finops.analysis.idle import IdlePolicy
from finops.analysis.idle_prices import claim_repriced_hours
from finops.db.hours import mark_hours_dirty, mark_hours_repriced
from finops.db.ledger_tables import DirtyHour, RepricedHour
from finops.db.models import IdleEpisode
from finops.ingest.readings import Ingestor
from finops.jobs.slurm_import import import_sacct
from finops.jobs.teams import map_account
from finops.ledger.costmodel import capacity_cost
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.pricing.rules import set_pricing_rule
from finops.service.scheduler import run_rollup
from finops.timeutil import HOUR, to_epoch
from tests.support import scenario

PRICING = Pricing(load_catalog(), PricingModel.ON_DEMAND)


@pytest.fixture
def judged(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[datetime, datetime]]]:
    """The periods :func:`finops.analysis.idle.detect_idle` judges from now on."""
    periods: list[tuple[datetime, datetime]] = []
    detect = idle.detect_idle

    def recorded(session: Session, start: datetime, end: datetime, *args: Any, **kwargs: Any) -> int:
        periods.append((start, end))
        return detect(session, start, end, *args, **kwargs)

    monkeypatch.setattr(idle, "detect_idle", recorded)
    yield periods


def stored(sessions: sessionmaker[Session]) -> list[tuple[int, datetime, datetime, Decimal | None, str | None, str]]:
    with sessions() as session:
        return [
            (e.id, e.start, e.end, e.cost, e.reason, e.currency)
            for e in session.scalars(select(IdleEpisode).order_by(IdleEpisode.id))
        ]


def test_a_price_change_reprices_episodes_without_judging_them_again(
    sessions: sessionmaker[Session], judged: list[tuple[datetime, datetime]]
) -> None:
    t0 = scenario.start_hour()
    with sessions.begin() as session:
        map_account(session, "acct-a", "alpha", actor="system:test")
        Ingestor().store(session, scenario.batch(t0))
        import_sacct(session, scenario.sacct_lines(t0), source="scenario")
    run_rollup(sessions, PRICING, IdlePolicy())
    ((episode_id, start, end, cost, reason, _),) = stored(sessions)
    assert cost == capacity_cost(PRICING.catalog.rate(scenario.MODEL, PricingModel.ON_DEMAND, start), 1800)

    def rate(model: PricingModel) -> Decimal:
        return PRICING.catalog.rate(scenario.MODEL, model, start)

    judged.clear()
    with sessions.begin() as session:
        set_pricing_rule(session, "node", "", scenario.NODE, PricingModel.SPOT, actor="system:test")
    run_rollup(sessions, PRICING, IdlePolicy())
    assert stored(sessions) == [(episode_id, start, end, capacity_cost(rate(PricingModel.SPOT), 1800), reason, "USD")]
    assert judged, "the ledger's newest hour is judged as at every rollup"
    assert all(e < start or s > end for s, e in judged), "nothing judged over the episode's hours"

    judged.clear()
    with sessions.begin() as session:
        set_pricing_rule(session, "node", "", scenario.NODE, PricingModel.RESERVED, actor="system:test")
    with sessions.begin() as session:
        mark_hours_dirty(session, [to_epoch(start) - to_epoch(start) % HOUR])  # what a late reading there does
    run_rollup(sessions, PRICING, IdlePolicy())
    ((_, *again),) = stored(sessions)
    assert again == [start, end, capacity_cost(rate(PricingModel.RESERVED), 1800), reason, "USD"]
    assert any(s <= start and e >= end for s, e in judged), "judged again over the hour marked for new data"


def test_only_hours_without_other_marks_are_claimed_as_repriced(loaded) -> None:  # type: ignore[no-untyped-def]
    """Hours marked for new data before the price mark (a), after it (b: the trigger takes it out), only by the
    price (c), and the ledger's newest hour (d) and one after it (e): only c is re-priced without judging."""
    sessions, t0, _, _ = loaded
    hour = to_epoch(t0)
    a, b, c, d, e = hour - 3 * HOUR, hour - 2 * HOUR, hour - HOUR, hour + HOUR, hour + 2 * HOUR
    with sessions.begin() as session:
        session.execute(delete(DirtyHour))  # every hour rebuilt
        mark_hours_dirty(session, [a])
        mark_hours_repriced(session, [a, b, c, d, e])
    with sessions.begin() as session:
        mark_hours_dirty(session, [b])
    with sessions.begin() as session:
        assert {to_epoch(h) for h in session.scalars(select(RepricedHour.hour))} == {c, d, e}
        mark_hours_repriced(session, [c])  # a second price change keeps it
        assert {to_epoch(h) for h in session.scalars(select(RepricedHour.hour))} == {c, d, e}
    with sessions.begin() as session:
        assert claim_repriced_hours(session, e) == {c}
        assert {to_epoch(h) for h in session.scalars(select(RepricedHour.hour))} == {e}, "taken up to the rollup's end"
