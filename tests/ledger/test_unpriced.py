"""GPU-hours of a model without a price stay in the ledger, unpriced: seconds, team, job and use kept, money NULL;
the priced GPU's money still conserves; the rollup says so once per model and leaves no hour dirty; a catalog
import that prices the model gives those hours their money (tests/support/unpriced.py: one priced and one unpriced
GPU)."""

from __future__ import annotations

import logging
from datetime import timedelta
from decimal import Decimal

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from finops.db.ledger_tables import DirtyHour, LedgerEntry, LedgerTeamHour
from finops.db.models import UNALLOCATED_TEAM, UNMAPPED_TEAM, Gpu, Team
from finops.ledger import rollup as ledger
from finops.ledger.rollup import rollup
from finops.ledger.team_hours import ledger_team_sums
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.pricing.store import import_catalog, pricing_in_force
from finops.timeutil import floor_hour, to_epoch
from tests.support import scenario, unpriced


def _rows(session: Session, model: str) -> list[LedgerEntry]:
    query = select(LedgerEntry).join(Gpu, Gpu.id == LedgerEntry.gpu_id).where(Gpu.model == model)
    return list(session.scalars(query.order_by(LedgerEntry.id)))


def _team_hours_equal_the_ledger(session: Session) -> None:
    sums = ledger_team_sums()
    from_ledger = session.execute(
        select(LedgerEntry.hour, LedgerEntry.team_id, *sums.values())
        .group_by(LedgerEntry.hour, LedgerEntry.team_id)
        .order_by(LedgerEntry.hour, LedgerEntry.team_id)
    ).all()
    kept = session.execute(
        select(LedgerTeamHour.hour, LedgerTeamHour.team_id, *(getattr(LedgerTeamHour, name) for name in sums)).order_by(
            LedgerTeamHour.hour, LedgerTeamHour.team_id
        )
    ).all()
    assert kept == from_ledger


def test_unpriced_gpu_hours_stay_in_the_ledger_and_priced_money_conserves(
    sessions: sessionmaker[Session], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ledger, "CHUNK_HOURS", 1)  # two chunks: still one warning per model and rollup
    t0 = scenario.start_hour()
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    rate = pricing.catalog.rate(scenario.MODEL, PricingModel.ON_DEMAND, t0)
    until = to_epoch(t0 + timedelta(hours=2))
    with sessions.begin() as session, caplog.at_level(logging.WARNING, logger="finops.ledger.rollup"):
        unpriced.load(session, t0)
        built = rollup(session, pricing, until, connections=1)
    assert built.hours == 2
    assert built.priced_gpu_seconds == 7200
    assert built.unpriced_gpu_seconds == {unpriced.UNPRICED_MODEL: 7200}
    warnings = [r.getMessage() for r in caplog.records if r.name == "finops.ledger.rollup"]
    assert len(warnings) == 1
    assert unpriced.UNPRICED_MODEL in warnings[0] and "2.00 GPU-hours" in warnings[0]
    assert "gpu-finops prices import" in warnings[0] and "set the node's model" in warnings[0]
    assert all(r.levelno == logging.WARNING for r in caplog.records if r.name == "finops.ledger.rollup")

    with sessions() as session:
        teams = {team.id: team.name for team in session.scalars(select(Team))}
        priced_rows = _rows(session, scenario.MODEL)
        assert sum((r.allocated_cost or Decimal("NaN") for r in priced_rows), Decimal(0)) == 2 * rate
        assert sum(r.seconds for r in priced_rows) == 7200
        kept = _rows(session, unpriced.UNPRICED_MODEL)
        assert sum(r.seconds for r in kept) == 7200
        assert all(r.allocated_cost is None and r.used_cost is None and r.idle_cost is None for r in kept)
        held = [r for r in kept if r.job_pk is not None]
        assert {teams[r.team_id] for r in held} == {UNMAPPED_TEAM}
        assert sum(r.seconds for r in held) == 5400
        assert sum(r.used_gpu_seconds for r in held) == pytest.approx(2700)  # 50 % of 1.5 h
        assert sum(r.sample_count for r in held) == 90
        assert sum(r.energy_joules for r in kept) == pytest.approx(119 * 36_000)
        assert all(r.energy_cost is not None for r in kept)  # priced by the tariff, not the GPU's rate
        assert {teams[r.team_id] for r in kept if r.job_pk is None} == {UNALLOCATED_TEAM}
        _team_hours_equal_the_ledger(session)
        team_unpriced = dict(
            session.execute(
                select(Team.name, func.sum(LedgerTeamHour.unpriced_gpu_seconds))
                .join(Team, Team.id == LedgerTeamHour.team_id)
                .group_by(Team.name)
            ).all()
        )
        assert team_unpriced == {"alpha": 0, UNMAPPED_TEAM: 5400, UNALLOCATED_TEAM: 1800}
        dirty = {to_epoch(h) for h in session.scalars(select(DirtyHour.hour)) if to_epoch(h) < until}
    assert dirty <= {floor_hour(until - 1)}  # only the newest hour keeps its mark (for ingest), as for priced hours

    with sessions.begin() as session:
        caplog.clear()
        again = rollup(session, pricing, until + 3600, connections=1)
        assert again.hours == 2  # the newest hour and the one after; the unpriced hour T is not rebuilt again
        assert again.unpriced_gpu_seconds == {unpriced.UNPRICED_MODEL: 7200}
        dirty = {to_epoch(h) for h in session.scalars(select(DirtyHour.hour))}
    assert to_epoch(t0) not in dirty and to_epoch(t0) + 3600 not in dirty


def test_importing_a_price_for_the_model_prices_its_hours(sessions: sessionmaker[Session]) -> None:
    t0 = scenario.start_hour()
    configured = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    until = to_epoch(t0 + timedelta(hours=2))
    with sessions.begin() as session:
        unpriced.load(session, t0)
        rollup(session, configured, until)
    with sessions.begin() as session:
        assert import_catalog(
            session, unpriced.catalog_with_model(), "with-acme.yaml", configured.catalog, actor="system:test"
        )
    with sessions.begin() as session:
        built = rollup(session, pricing_in_force(session, configured), until)
        assert built.hours >= 2
        assert built.unpriced_gpu_seconds == {}
    with sessions() as session:
        kept = _rows(session, unpriced.UNPRICED_MODEL)
        assert sum(r.seconds for r in kept) == 7200
        assert all(r.allocated_cost is not None for r in kept)
        assert sum((r.allocated_cost or Decimal(0) for r in kept), Decimal(0)) == 2 * Decimal(unpriced.ADDED_RATE)
        assert session.scalar(select(func.sum(LedgerTeamHour.unpriced_gpu_seconds))) == 0
        _team_hours_equal_the_ledger(session)
