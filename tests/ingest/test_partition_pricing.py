"""An MI300X in CPX mode read by the amdsmi source is billed as eight partitions of one MI300X, not as eight MI300Xs:
the ledger's allocated cost per partition-hour is the MI300X rate / 8, through the source (against its stand-in,
tests/support/fake_amdsmi.py), ingest and rollup, on both databases."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from collector.contract.wire import IngestBatch, batch_dict, columnar
from collector.sources.amdsmi import AmdSmiSource
from finops.db.ledger_tables import LedgerEntry
from finops.db.models import Gpu
from finops.ingest.readings import Ingestor
from finops.ledger.rollup import rollup
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import HOUR, from_epoch, to_epoch
from tests.support.fake_amdsmi import FakeAmdSmi, mi300x_cpx

T0 = to_epoch(datetime(2026, 10, 5, 10, tzinfo=UTC))
STEP = 60


def test_a_cpx_partition_hour_costs_an_eighth_of_an_mi300x_hour(sessions: sessionmaker[Session]) -> None:
    partitions = mi300x_cpx()
    now = T0
    source = AmdSmiSource(FakeAmdSmi(partitions), clock=lambda: from_epoch(now))
    ingestor = Ingestor()
    while now <= T0 + HOUR:
        batch = IngestBatch.model_validate({"node": "amd-01", **columnar(batch_dict(source.collect()))})
        with sessions.begin() as session:
            ingestor.store(session, batch)
        now += STEP
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    with sessions.begin() as session:
        rollup(session, pricing, T0 + HOUR)
    with sessions() as session:
        rows = session.execute(
            select(Gpu.uuid, Gpu.model, LedgerEntry.seconds, LedgerEntry.allocated_cost)
            .join(LedgerEntry, LedgerEntry.gpu_id == Gpu.id)
            .where(LedgerEntry.hour == from_epoch(T0))
        ).all()
    by_uuid = {row.uuid: row for row in rows}
    rate = pricing.catalog.rate("AMD Instinct MI300X", PricingModel.ON_DEMAND, from_epoch(T0))  # the whole GPU
    assert rate > 0
    costs = [by_uuid[p.uuid].allocated_cost for p in partitions]
    assert [by_uuid[p.uuid].seconds for p in partitions] == [HOUR] * 8
    assert all(cost is not None and abs(cost - rate / 8) < Decimal("0.000001") for cost in costs), (rate, costs)
    assert all("(CPX partition 1/8)" in by_uuid[p.uuid].model for p in partitions)
