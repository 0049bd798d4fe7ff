"""What an AMD package reports once (MI300X CPX: partition 0; MI250X: one die) split over its devices at ingest:
the rule on a batch, and the ledger's energy per package equal to the counter's increase, through the amdsmi
source (against its stand-in, tests/support/fake_amdsmi.py), ingest and rollup, on both databases."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from collector.contract.wire import IngestBatch, batch_dict, columnar
from collector.sources.amdsmi import AmdSmiSource
from finops.db.ledger_tables import LedgerEntry
from finops.db.models import Gpu
from finops.ingest.package_split import split_packages
from finops.ingest.readings import Ingestor
from finops.ledger.rollup import rollup
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import HOUR, from_epoch, to_epoch
from tests.support.fake_amdsmi import RESOLUTION_UJ, FakeAmdSmi, FakeDevice, mi250x, mi300x_cpx

T0 = to_epoch(datetime(2026, 10, 5, 10, tzinfo=UTC))
STEP = 60
TICKS_PER_STEP = {"mi300x": 786_432_000, "mi250x": 393_216_000}  # by hand: 200 W and 100 W at 15.259 uJ a tick


class _Cluster:
    """An amdsmi node with one MI300X in CPX mode (8 partitions) and one MI250X (2 GCDs), read every minute."""

    def __init__(self) -> None:
        self.mi300x = mi300x_cpx()
        self.mi250x = mi250x(gcds=2)
        self.now = T0
        self.source = AmdSmiSource(FakeAmdSmi(self.mi300x + self.mi250x), clock=lambda: from_epoch(self.now))

    def batch(self) -> IngestBatch:
        return IngestBatch.model_validate({"node": "amd-01", **columnar(batch_dict(self.source.collect()))})

    def advance(self, reset_mi250x: bool = False) -> None:
        self.now += STEP
        primary_300: FakeDevice = self.mi300x[0]
        primary_250: FakeDevice = self.mi250x[0]
        assert primary_300.energy_accumulator is not None and primary_250.energy_accumulator is not None
        primary_300.energy_accumulator += TICKS_PER_STEP["mi300x"]
        primary_250.energy_accumulator = (
            TICKS_PER_STEP["mi250x"] if reset_mi250x else primary_250.energy_accumulator + TICKS_PER_STEP["mi250x"]
        )


def test_a_package_total_is_shared_equally_and_a_mean_copied() -> None:
    batch = _Cluster().batch()
    split = split_packages(batch)
    columns = {series.uuid: series for series in split.series}
    partitions = [columns[device.uuid] for device in _Cluster().mi300x]
    assert [p.power_watts for p in partitions] == [[182 / 8]] * 8
    assert [p.utilization_ratio for p in partitions] == [[0.5]] * 8
    energy = [p.energy_joules[0] for p in partitions if p.energy_joules]
    assert len(energy) == 8 and sum(energy) == pytest.approx(9_830_400_000 * RESOLUTION_UJ / 1e6)
    gcds = [columns[device.uuid] for device in mi250x(gcds=2)]
    assert [g.power_watts for g in gcds] == [[91 / 2]] * 2
    assert [g.utilization_ratio for g in gcds] == [[0.0]] * 2  # each die's own activity, untouched


def test_a_package_that_did_not_report_stays_null() -> None:
    cluster = _Cluster()
    cluster.mi300x[0].socket_power = "N/A"
    split = split_packages(cluster.batch())
    columns = {series.uuid: series for series in split.series}
    assert [columns[d.uuid].power_watts or [None] for d in cluster.mi300x] == [[None]] * 8  # null, never 0
    assert all(columns[d.uuid].energy_joules for d in cluster.mi300x)  # what it did report is still split


def test_the_ledger_energy_of_each_package_is_its_counter_increase(sessions: sessionmaker[Session]) -> None:
    cluster = _Cluster()
    cluster.now = T0 - STEP
    ingestor = Ingestor()
    increases = {"mi300x": 0.0, "mi250x": 0.0}
    with sessions.begin() as session:
        ingestor.store(session, cluster.batch())
    while cluster.now < T0 + HOUR - STEP:
        reset = cluster.now == T0 + 30 * STEP  # the MI250X's driver reloaded mid-hour: its counter restarts
        cluster.advance(reset_mi250x=reset)
        increases["mi300x"] += TICKS_PER_STEP["mi300x"] * RESOLUTION_UJ / 1e6
        increases["mi250x"] += TICKS_PER_STEP["mi250x"] * RESOLUTION_UJ / 1e6
        with sessions.begin() as session:
            ingestor.store(session, cluster.batch())
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    with sessions.begin() as session:
        rollup(session, pricing, T0 + HOUR)
    with sessions() as session:
        rows = session.execute(
            select(Gpu.uuid, func.sum(LedgerEntry.energy_joules))
            .join(LedgerEntry, LedgerEntry.gpu_id == Gpu.id)
            .where(LedgerEntry.hour == from_epoch(T0))
            .group_by(Gpu.uuid)
        ).all()
    energy = dict(rows)
    package = defaultdict(float)
    for kind, devices in (("mi300x", cluster.mi300x), ("mi250x", cluster.mi250x)):
        shares = [energy[device.uuid] for device in devices]
        assert shares == pytest.approx([shares[0]] * len(devices))  # equal shares, none left at 0
        package[kind] = sum(shares)
    assert package["mi300x"] == pytest.approx(increases["mi300x"])
    assert package["mi250x"] == pytest.approx(increases["mi250x"])  # the reset's restart counted once
