"""Energy from the cumulative counter when some readings carry no counter value (a failed read): the increment
runs from the previous reading that has one, inside the hour and across the rebuild's start, on both databases."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from finops.db.hours import mark_hours_dirty
from finops.db.ledger_tables import LedgerEntry
from finops.db.models import Allocation, Gpu, GpuSample, Job, Node, Team
from finops.ingest.partitions import create_partitions, is_partitioned
from finops.ledger.rollup import rollup
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import HOUR, from_epoch, to_epoch

H100 = "NVIDIA H100 80GB HBM3"
T0 = to_epoch(datetime(2026, 10, 5, 10, tzinfo=UTC))  # the hour rebuilt on its own: [T0, T0 + 1 h)
JOULES_PER_MINUTE = 1000.0


def _counter(ts: int) -> float:
    """The energy counter at ``ts``: 1,000 J a minute since long before."""
    return 5e9 + (ts - T0) / 60 * JOULES_PER_MINUTE


@pytest.mark.parametrize(
    ("missing", "joules"),
    [
        ((), 60 * JOULES_PER_MINUTE),
        # One value missing inside the hour, two in a row, and the hour's first: the increments span them.
        ((T0 + 600, T0 + 1800, T0 + 1860, T0), 60 * JOULES_PER_MINUTE),
        # The last value before the hour missing too: the hour's first increment reaches back to the one before.
        ((T0 - 60, T0), 61 * JOULES_PER_MINUTE),
        # The hour's last two values missing: its energy ends at the last reading that has one.
        ((T0 + 3480, T0 + 3540), 58 * JOULES_PER_MINUTE),
    ],
)
def test_readings_without_a_counter_value_do_not_lose_energy(
    sessions: sessionmaker[Session], missing: tuple[int, ...], joules: float
) -> None:
    with sessions.begin() as session:
        team = Team(name="alpha")
        node = Node(hostname="n1")
        session.add_all([team, node])
        session.flush()
        gpu = Gpu(uuid="GPU-1", node_id=node.id, gpu_index=0, model=H100, in_service_from=from_epoch(T0 - 2 * HOUR))
        job = Job(
            scheduler="slurm", cluster="c", job_id="1", job_id_raw="1", user="u", account="a", partition="p",
            name="j", state="RUNNING", start=from_epoch(T0 - 2 * HOUR), end=None, gpus=1, node_list="n1",
            team_id=team.id,
        )  # fmt: skip
        session.add_all([gpu, job])
        session.flush()
        session.add(Allocation(job_pk=job.id, gpu_id=gpu.id, start=from_epoch(T0 - 2 * HOUR), end=None))
        samples: list[dict[str, Any]] = [
            {
                "gpu_id": gpu.id,
                "ts": ts,
                "utilization_ratio": 0.5,
                "energy_joules": None if ts in missing else _counter(ts),
            }
            for ts in range(T0 - 2 * HOUR, T0 + HOUR, 60)
        ]
        if is_partitioned(session.connection()):
            create_partitions(session.connection(), {sample["ts"] for sample in samples})
        session.execute(GpuSample.__table__.insert(), samples)  # type: ignore[attr-defined]
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    with sessions.begin() as session:
        rollup(session, pricing, T0 + HOUR)
    with sessions.begin() as session:
        mark_hours_dirty(session, [T0])  # the hour alone, its energy's start read from the lookback
        rollup(session, pricing, T0 + HOUR)
    with sessions() as session:
        (row,) = session.execute(
            select(LedgerEntry.energy_joules, LedgerEntry.sample_count).where(LedgerEntry.hour == from_epoch(T0))
        ).all()
    assert row.energy_joules == pytest.approx(joules)
    assert row.sample_count == 60, "readings without a counter value still count for utilisation"
