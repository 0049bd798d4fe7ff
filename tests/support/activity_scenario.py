"""A cluster slice with hardware activity and hand-computed means, shared by the report, REST, metrics and FOCUS tests.

Four H100 GPUs on node ``gpu-p-01``, one reading a minute over two hours [T, T+2h), T hour-aligned. Activity values
are binary fractions (0.125, 0.25, …), so sums and means are exact in floating point and the SM-active cost is
allocated × SM activity exactly, rounded half-even to the micro-unit.

- GPU 0: job 601 (account ``acct-v`` → team ``vision``) holds it all along; SM activity 0.75 in the first hour and
  0.25 in the second, tensor 0.5 throughout, DRAM 0.125 then 0.375: every reading profiled.
- GPU 1: job 602 (``acct-n`` → ``nlp``) holds it all along; its readings carry no activity field (not profiled).
- GPU 2: job 603 (``acct-v`` → ``vision``) holds it in the first hour; its first 30 readings carry SM 0.625 and
  tensor 0.25 (no DRAM), the other 30 none: a half-profiled hour. Unheld in the second hour, without activity.
- GPU 3: held by no job; SM activity 0.5 throughout (unallocated capacity has no activity in the ledger).

By hand (r the on-demand rate; seconds are GPU-seconds):
- job 601: held 7200, profiled 7200 (share 1); SM (0.75·3600 + 0.25·3600) ÷ 7200 = 0.5, tensor 0.5, DRAM 0.25;
  SM-active cost = round(r × 0.75) + round(r × 0.25).
- job 602: held 7200, profiled 0 (share 0); SM, tensor, DRAM and SM-active cost not measured.
- job 603: held 3600, profiled 1800 (share 0.5); SM 0.625, tensor 0.25, DRAM not measured; cost round(r × 0.625).
- team vision (601 + 603): held 10800, profiled 9000 (share 5/6); SM (2700 + 900 + 1125) ÷ 9000 = 0.525, tensor
  (3600 + 450) ÷ 9000 = 0.45, DRAM (450 + 1350) ÷ 7200 = 0.25.
- team nlp = job 602. ``__unallocated__``: 3 GPU-hours, nothing held (share None), no activity.
- model H100 (everything): held 18000, profiled 9000 (share 0.5), SM 0.525, tensor 0.45, DRAM 0.25.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING

from collector.contract import metric_names as m
from collector.contract.sample import Sample
from collector.contract.wire import IngestBatch, gpu_info_dict, reading_dict
from finops.ledger.costmodel import capacity_cost, used_cost

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from finops.pricing.catalog import Pricing

MODEL = "NVIDIA H100 80GB HBM3"
NODE = "gpu-p-01"
UUIDS = tuple(f"GPU-bbbbbbbb-0000-0000-0000-00000000000{i}" for i in range(4))

EXPECTED: dict[str, dict[str, float | None]] = {
    # group → (sm, tensor, dram, profiled share)
    "601": {"sm_active_ratio": 0.5, "tensor_active_ratio": 0.5, "dram_active_ratio": 0.25, "profiled_share": 1.0},
    "602": {"sm_active_ratio": None, "tensor_active_ratio": None, "dram_active_ratio": None, "profiled_share": 0.0},
    "603": {"sm_active_ratio": 0.625, "tensor_active_ratio": 0.25, "dram_active_ratio": None, "profiled_share": 0.5},
    "vision": {
        "sm_active_ratio": 0.525,
        "tensor_active_ratio": 0.45,
        "dram_active_ratio": 0.25,
        "profiled_share": round(5 / 6, 6),
    },
    "nlp": {"sm_active_ratio": None, "tensor_active_ratio": None, "dram_active_ratio": None, "profiled_share": 0.0},
    "__unallocated__": {
        "sm_active_ratio": None,
        "tensor_active_ratio": None,
        "dram_active_ratio": None,
        "profiled_share": None,
    },
    "H100-SXM-80GB": {
        "sm_active_ratio": 0.525,
        "tensor_active_ratio": 0.45,
        "dram_active_ratio": 0.25,
        "profiled_share": 0.5,
    },
}
"""The hand-computed activity of each group of the report by job, team and GPU model (module docstring)."""


def sm_active_costs(rate: Decimal) -> dict[str, Decimal | None]:
    """The exact (micro-unit) SM-active cost of each job at on-demand ``rate``, per ledger row as the ledger rounds
    it (allocated = rate × 3600 s ÷ 3600 to the micro-unit, × SM activity to the micro-unit); None when unmeasured."""
    hour = capacity_cost(rate, 3600)
    return {
        "601": used_cost(hour, 0.75) + used_cost(hour, 0.25),
        "602": None,
        "603": used_cost(hour, 0.625),
    }


def _activity(gpu: int, minute: int) -> dict[str, float]:
    if gpu == 0:
        first = minute < 60
        return {
            m.GPU_SM_ACTIVE: 0.75 if first else 0.25,
            m.GPU_TENSOR_ACTIVE: 0.5,
            m.GPU_DRAM_ACTIVE: 0.125 if first else 0.375,
        }
    if gpu == 2 and minute < 30:
        return {m.GPU_SM_ACTIVE: 0.625, m.GPU_TENSOR_ACTIVE: 0.25}
    if gpu == 3:
        return {m.GPU_SM_ACTIVE: 0.5}
    return {}


def _holder(gpu: int, minute: int) -> str | None:
    """The job the collector's job map sees on ``gpu`` (its processes' cgroup): the placement is observed."""
    if gpu == 2:
        return "603" if minute < 60 else None
    return {0: "601", 1: "602"}.get(gpu)


def samples(t0: datetime) -> list[Sample]:
    """The 480 readings of the slice as a collector reads them (job ids from its job map), in time order."""
    readings = []
    for minute in range(120):
        for gpu, uuid in enumerate(UUIDS):
            values = {
                m.GPU_UTILIZATION: 0.9 if gpu == 0 else 0.5,
                m.GPU_POWER: 500.0,
                m.GPU_ENERGY: 30_000.0 * minute,
                m.GPU_MEMORY_USED: 1024.0**3,
                m.GPU_MEMORY_TOTAL: 80.0 * 1024**3,
                **_activity(gpu, minute),
            }
            labels = {"gpu": str(gpu), "uuid": uuid, "model": MODEL}
            readings.append(Sample("gpu", labels, values, t0 + timedelta(minutes=minute), _holder(gpu, minute)))
    return readings


def sacct_lines(t0: datetime) -> list[str]:
    """The slice's jobs in ``sacct --parsable2 --noheader`` format (times in UTC)."""

    def stamp(offset_minutes: int) -> str:
        return (t0 + timedelta(minutes=offset_minutes)).strftime("%Y-%m-%dT%H:%M:%S")

    def job(job_id: int, account: str, user: str, end: int, gpu: int) -> str:
        return (
            f"{job_id}|{job_id}|orion|gpu|{account}|{user}|{stamp(-5)}|{stamp(0)}|{stamp(end)}|02:00:00|COMPLETED|"
            f"billing=8,cpu=8,gres/gpu:h100=1,gres/gpu=1,mem=64G,node=1|{NODE}|train-{gpu}"
        )

    return [job(601, "acct-v", "vera", 120, 0), job(602, "acct-n", "nils", 120, 1), job(603, "acct-v", "vera", 60, 2)]


def build(session: Session, t0: datetime, pricing: Pricing) -> None:
    """The slice in ``session``'s database, as the service stores it: readings, jobs, team rules, the ledger."""
    from finops.ingest.readings import Ingestor
    from finops.jobs.slurm_import import import_sacct
    from finops.jobs.teams import map_account
    from finops.ledger.rollup import rollup
    from finops.timeutil import to_epoch

    readings = samples(t0)
    batch = {
        "node": NODE,
        "gpus": [gpu_info_dict(s) for s in readings[:4]],
        "samples": [reading_dict(s) for s in readings],
    }
    map_account(session, "acct-v", "vision", actor="system:test")
    map_account(session, "acct-n", "nlp", actor="system:test")
    Ingestor().store(session, IngestBatch.model_validate(batch))
    assert import_sacct(session, sacct_lines(t0), source="activity").errors == []
    rollup(session, pricing, to_epoch(t0 + timedelta(hours=2)))
