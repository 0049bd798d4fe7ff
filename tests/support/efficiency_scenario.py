"""A cluster slice with one job per efficiency case, through the real pipeline (ingest, sacct import, rollup).

H100 GPUs read every 5 minutes over four hours [T, T+4h), T hour-aligned (UTC), the slice ending where the scenario's
does (:func:`tests.support.scenario.slice_end`: an hour before the current hour, but for a month's first hours); every
job holds its GPUs all along; accounts ``acct-a`` → team ``alpha``, ``acct-b`` → ``beta``, ``acct-c`` → ``gamma``.
Activity values are constant unless said. Utilisation u, SM activity s, tensor t, DRAM d, FP32 f, occupancy o:

- 801 (alpha, ``ef-01`` GPU 0): u 0.95, s 0.2, d 0.75, t 0.0: busy but inefficient, **memory-bound**.
- 802 (alpha, ``ef-02`` GPUs 0-1): u 0.9, s 0.25, d 0.125, t 0.25; the node receives 2 GB/s over InfiniBand:
  **communication-bound**; the costliest (two GPUs).
- 803 (beta, ``ef-03`` GPU 0): u 0.875, s 0.125 in hours 0 and 2, 0.375 in hours 1 and 3 (mean 0.25, hourly CV
  0.125 ÷ 0.25 = 0.5), d 0.125, t 0.25; the node reads Lustre at 500 MB/s: **input-bound**.
- 804 (beta, ``ef-04`` GPU 0): u 0.9, s 0.375, f 0.5, t 0.0, d 0.125: **no tensor cores**.
- 805 (gamma, ``ef-05`` GPU 0): u 0.9, s 0.375, o 0.125, t 0.25, f 0.125, d 0.125: **low occupancy**.
- 806 (gamma, ``ef-05`` GPU 1): u 0.9, s 0.25, t 0.25, d 0.25, no FP32 nor occupancy field: **unexplained**.
- 807 (alpha, ``ef-06`` GPU 0): u 0.95, s 0.875: band effective.
- 808 (beta, ``ef-06`` GPU 1): u 0.95, no activity field: band not measured, never busy but inefficient.
- 809 (gamma, ``ef-06`` GPU 2): u 0.9, s 0.625: band moderate.
- 810 (gamma, ``ef-06`` GPU 3): u 0.25, s 0.125: band ineffective, but not busy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from collector.contract import metric_names as m
from collector.contract.sample import Sample
from collector.contract.wire import IngestBatch, gpu_info_dict, reading_dict
from tests.support import scenario
from tests.support.scenario import MODEL

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from finops.pricing.catalog import Pricing

HOURS = 4
STEP_MINUTES = 5
TEAMS = {"acct-a": "alpha", "acct-b": "beta", "acct-c": "gamma"}


@dataclass(frozen=True)
class Case:
    """One job: its account, node, GPU indices, utilisation, activity (metric name → value) and, when given, its SM
    activity per hour."""

    job: int
    account: str
    node: str
    gpus: tuple[int, ...]
    utilization: float
    activity: dict[str, float] = field(default_factory=dict)
    hourly_sm: tuple[float, ...] = ()


CASES = (
    Case(801, "acct-a", "ef-01", (0,), 0.95, {m.GPU_SM_ACTIVE: 0.2, m.GPU_DRAM_ACTIVE: 0.75, m.GPU_TENSOR_ACTIVE: 0.0}),
    Case(802, "acct-a", "ef-02", (0, 1), 0.9,
         {m.GPU_SM_ACTIVE: 0.25, m.GPU_DRAM_ACTIVE: 0.125, m.GPU_TENSOR_ACTIVE: 0.25}),
    Case(803, "acct-b", "ef-03", (0,), 0.875, {m.GPU_DRAM_ACTIVE: 0.125, m.GPU_TENSOR_ACTIVE: 0.25},
         hourly_sm=(0.125, 0.375, 0.125, 0.375)),
    Case(804, "acct-b", "ef-04", (0,), 0.9,
         {m.GPU_SM_ACTIVE: 0.375, m.GPU_FP32_ACTIVE: 0.5, m.GPU_TENSOR_ACTIVE: 0.0, m.GPU_DRAM_ACTIVE: 0.125}),
    Case(805, "acct-c", "ef-05", (0,), 0.9,
         {m.GPU_SM_ACTIVE: 0.375, m.GPU_SM_OCCUPANCY: 0.125, m.GPU_TENSOR_ACTIVE: 0.25, m.GPU_FP32_ACTIVE: 0.125,
          m.GPU_DRAM_ACTIVE: 0.125}),
    Case(806, "acct-c", "ef-05", (1,), 0.9,
         {m.GPU_SM_ACTIVE: 0.25, m.GPU_TENSOR_ACTIVE: 0.25, m.GPU_DRAM_ACTIVE: 0.25}),
    Case(807, "acct-a", "ef-06", (0,), 0.95, {m.GPU_SM_ACTIVE: 0.875}),
    Case(808, "acct-b", "ef-06", (1,), 0.95),
    Case(809, "acct-c", "ef-06", (2,), 0.9, {m.GPU_SM_ACTIVE: 0.625}),
    Case(810, "acct-c", "ef-06", (3,), 0.25, {m.GPU_SM_ACTIVE: 0.125}),
)  # fmt: skip
NODE_IO = {
    "ef-02": {"infiniband_received_bytes_per_second": 2e9},
    "ef-03": {"lustre_read_bytes_per_second": 5e8},
}
"""Per node, its constant ``node_io`` rates (bytes per second)."""


def start_hour() -> datetime:
    """T (UTC): four hours before the end of the scenario's slice (:func:`tests.support.scenario.slice_end`), so the
    four hours are all closed and end where the scenario's tests freeze their clock."""
    return scenario.slice_end(scenario.start_hour()) - timedelta(hours=HOURS)


def uuid(node: str, index: int) -> str:
    return f"GPU-efefefef-0000-0000-{node[-2:]:0>4}-{index:012d}"


def samples(t0: datetime, node: str) -> list[Sample]:
    """``node``'s readings every 5 minutes over [T, T+4h), labelled with their job (the collector's job map)."""
    readings = []
    for minute in range(0, HOURS * 60, STEP_MINUTES):
        for case in CASES:
            if case.node != node:
                continue
            activity = dict(case.activity)
            if case.hourly_sm:
                activity[m.GPU_SM_ACTIVE] = case.hourly_sm[minute // 60]
            for index in case.gpus:
                values = {m.GPU_UTILIZATION: case.utilization, m.GPU_MEMORY_TOTAL: 80.0 * 2**30, **activity}
                labels = {"gpu": str(index), "uuid": uuid(node, index), "model": MODEL}
                readings.append(Sample("gpu", labels, values, t0 + timedelta(minutes=minute), str(case.job)))
    return readings


def batch(t0: datetime, node: str) -> IngestBatch:
    """``node``'s readings and ``node_io`` entries as one ingest batch."""
    readings = samples(t0, node)
    gpus = {s.labels["uuid"]: gpu_info_dict(s) for s in readings}
    start = int(t0.timestamp())
    node_io = [{"ts": start + step, **NODE_IO[node]} for step in range(0, HOURS * 3600, 60)] if node in NODE_IO else []
    return IngestBatch.model_validate(
        {"node": node, "gpus": list(gpus.values()), "samples": [reading_dict(s) for s in readings], "node_io": node_io}
    )


def sacct_lines(t0: datetime) -> list[str]:
    """The jobs in ``sacct --parsable2 --noheader`` format, each over [T, T+4h)."""
    start, end = (t0 + timedelta(minutes=offset) for offset in (0, HOURS * 60))
    submit = t0 - timedelta(minutes=5)
    stamp = "%Y-%m-%dT%H:%M:%S"
    return [
        f"{c.job}|{c.job}|orion|gpu|{c.account}|u{c.job}|{submit:{stamp}}|{start:{stamp}}|{end:{stamp}}|04:00:00|"
        f"COMPLETED|billing=8,cpu=8,gres/gpu:h100={len(c.gpus)},gres/gpu={len(c.gpus)},mem=64G,node=1|{c.node}|"
        f"train-{c.job}"
        for c in CASES
    ]


def load(session: Session, pricing: Pricing) -> datetime:
    """The slice in the migrated database, its ledger built through T+4h; returns T (UTC)."""
    from finops.ingest.readings import Ingestor
    from finops.jobs.slurm_import import import_sacct
    from finops.jobs.teams import map_account
    from finops.ledger.rollup import rollup
    from finops.timeutil import to_epoch

    t0 = start_hour()
    for account, team in TEAMS.items():
        map_account(session, account, team, actor="system:test")
    for node in sorted({case.node for case in CASES}):
        Ingestor().store(session, batch(t0, node))
    result = import_sacct(session, sacct_lines(t0), source="efficiency-scenario")
    assert (result.jobs, result.errors) == (len(CASES), []), result
    rollup(session, pricing, to_epoch(t0 + timedelta(hours=HOURS)))
    return t0
