"""A small cluster slice with hand-computed costs, shared by the ledger and end-to-end tests.

Two H100 GPUs on node ``gpu-a-01``, readings every minute over two hours [T, T+2h), T hour-aligned (UTC) and the
whole slice up to its end T+2h in one calendar month (:func:`start_hour`):
GPU 0 reads 100 % in the first hour and 0 % in the second; GPU 1 reads 50 % throughout; both draw
600 W (36 kJ a minute). Job 501 (account ``acct-a`` → team ``alpha``) holds GPU 0 over [T, T+90 min);
job 502 (account ``acct-b``, unmapped) holds GPU 1 from T+30 min and is still running.

By hand, with r the on-demand rate per GPU-hour:
- alpha: GPU 0 hour 1 = r (used r), hour 2 half = r/2 (idle r/2): allocated 1.5 r, used r, idle 0.5 r.
- __unmapped__: GPU 1 from T+30 min = 1.5 GPU-hours at 50 %: allocated 1.5 r, used 0.75 r, idle 0.75 r.
- __unallocated__: GPU 0's last 30 min + GPU 1's first 30 min = r.
Capacity: 2 GPUs × 2 h × r = 4 r. Energy per GPU: 119 increments of 36 kJ (the first reading has no
predecessor) = 4.284 MJ = 1.19 kWh.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from collector.contract import metric_names as m
from collector.contract.sample import Sample
from collector.contract.wire import IngestBatch, gpu_info_dict, reading_dict
from finops import timeutil

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from finops.db.models import Gpu

MODEL = "NVIDIA H100 80GB HBM3"
NODE = "gpu-a-01"
UUIDS = ("GPU-aaaaaaaa-0000-0000-0000-000000000000", "GPU-aaaaaaaa-0000-0000-0000-000000000001")


SPAN = timedelta(hours=2)
"""How long the slice lasts."""


def start_hour(now: datetime | None = None) -> datetime:
    """T (UTC) for the current instant, or ``now``: three whole hours before its hour, so the running job's hours
    exist but are recent; in the first three hours of a month, three hours before the month starts instead, so that
    the slice and its end (:func:`slice_end`) lie in one calendar month and a test reading "this month" at the
    slice's end sees all of it."""
    hour = (now or timeutil.utc_now()).astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    first = timeutil.month_start(hour)
    t0 = hour - timedelta(hours=3)
    return t0 if t0 >= first else first - timedelta(hours=3)


def slice_end(t0: datetime) -> datetime:
    """T+2h: the end of the slice starting at ``t0``, the instant at which tests freeze the clock of the code that
    reads "now" (always in T's month, see :func:`start_hour`)."""
    return t0 + SPAN


def samples(t0: datetime) -> list[Sample]:
    """The 240 readings of the slice, in time order."""
    readings = []
    for minute in range(120):
        for index, uuid in enumerate(UUIDS):
            utilization = (1.0 if minute < 60 else 0.0) if index == 0 else 0.5
            values = {
                m.GPU_UTILIZATION: utilization,
                m.GPU_POWER: 600.0,
                m.GPU_ENERGY: 36_000.0 * minute,
                m.GPU_MEMORY_USED: 1024.0**3 if utilization else 0.0,
                m.GPU_MEMORY_TOTAL: 80.0 * 1024**3,
            }
            labels = {"gpu": str(index), "uuid": uuid, "model": MODEL}
            readings.append(Sample("gpu", labels, values, t0 + timedelta(minutes=minute)))
    return readings


def sacct_lines(t0: datetime) -> list[str]:
    """The slice's job log in ``sacct --parsable2 --noheader`` format (times in UTC), plus a job step."""

    def stamp(offset_minutes: int) -> str:
        return (t0 + timedelta(minutes=offset_minutes)).strftime("%Y-%m-%dT%H:%M:%S")

    return [
        f"501|501|orion|gpu|acct-a|alice|{stamp(-5)}|{stamp(0)}|{stamp(90)}|01:30:00|COMPLETED|"
        f"billing=8,cpu=8,gres/gpu:h100=1,gres/gpu=1,mem=64G,node=1|{NODE}|train",
        f"501.batch|501.batch|orion||acct-a||{stamp(0)}|{stamp(0)}|{stamp(90)}|01:30:00|COMPLETED|"
        f"cpu=8,gres/gpu:h100=1,gres/gpu=1,mem=64G,node=1|{NODE}|batch",
        f"502|502|orion|gpu|acct-b|bob|{stamp(25)}|{stamp(30)}|Unknown|02:30:00|RUNNING|"
        f"billing=8,cpu=8,gres/gpu=1,mem=64G,node=1|{NODE}|serve",
    ]


def batch(t0: datetime) -> IngestBatch:
    """All 240 readings of the slice as one validated ingest batch from ``NODE``."""
    readings = samples(t0)
    return IngestBatch.model_validate(
        {"node": NODE, "gpus": [gpu_info_dict(s) for s in readings[:2]], "samples": [reading_dict(s) for s in readings]}
    )


def seed_dashboard_database(url: str) -> datetime:
    """The scenario in the migrated database at ``url``: readings, jobs, ledger, idle episodes, and a 1,000 USD
    budget for team alpha this month and in the slice's month (the same month but in a month's first three hours,
    see :func:`start_hour`), for tests reading budgets at the real clock and at :func:`slice_end` alike; returns T."""
    from decimal import Decimal

    from finops.analysis.budgets import set_budget
    from finops.analysis.idle import IdlePolicy, detect_idle
    from finops.db.engine import make_engine, session_factory
    from finops.ingest.readings import Ingestor
    from finops.jobs.slurm_import import import_sacct
    from finops.jobs.teams import map_account
    from finops.ledger.rollup import rollup
    from finops.pricing.catalog import Pricing, PricingModel, load_catalog
    from finops.timeutil import month_start, to_epoch, utc_now

    t0 = start_hour()
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    with session_factory(make_engine(url)).begin() as session:
        map_account(session, "acct-a", "alpha", actor="system:test")
        Ingestor().store(session, batch(t0))
        import_sacct(session, sacct_lines(t0), source="scenario")
        rollup(session, pricing, to_epoch(t0 + timedelta(hours=2)))
        detect_idle(session, t0, t0 + timedelta(hours=2), IdlePolicy(), pricing)
        for month in sorted({month_start(utc_now()), month_start(t0)}):
            set_budget(session, "alpha", Decimal("1000"), month, "USD", actor="system:test")
    return t0


def one_gpu_node(session: Session) -> Gpu:
    """Node ``n1`` with one GPU of :data:`MODEL` (index 0, in service since 2026-01-01), flushed: for tests that
    write ledger rows directly."""
    from finops.db.models import Gpu, Node

    node = Node(hostname="n1")
    session.add(node)
    session.flush()
    gpu = Gpu(node_id=node.id, gpu_index=0, model=MODEL, in_service_from=datetime(2026, 1, 1, tzinfo=UTC))
    session.add(gpu)
    session.flush()
    return gpu
