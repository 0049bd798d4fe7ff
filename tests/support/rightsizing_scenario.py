"""A cluster slice with right-sizing findings worked out by hand, on both databases.

Node ``rs-01`` has eight H100 GPUs and nodes ``rs-03`` and ``rs-04`` two each, read every minute over [T, T+2h), T
hour-aligned three hours back; node ``rs-02`` has no collector. Jobs (Slurm, account ``acct-a`` → team ``alpha``,
``acct-b`` → ``beta``), each over [T, T+2h), on ``rs-01`` unless said:

- 701, alice, alpha, ``gres/gpu:h100=4`` on GPUs 0-3: GPU 0 at 80 % with 40 GiB in use, GPUs 1-2 at 0 %, GPU 3
  at 3 % — one GPU busy of four; a request of 1 saves GPUs 1-3: 3 × 2 GPU-hours.
- 702, bob, beta, ``gres/gpu:h100=1`` on GPU 4: 10 % with 6 GiB in use (and 70 GiB on that GPU ten minutes before
  and after the job, which is not the job's) — low utilisation; 6 GiB × 1.2 = 7.2 GiB fits ``1g.10gb`` (1/7 of the
  GPU) and an L40S (48 GiB), the cheapest NVIDIA model.
- 703, carol, alpha, ``gres/gpu:h100=1`` on GPU 5 at 90 %: nothing to say.
- 704, dave, beta, ``gres/gpu=2`` (untyped) on GPUs 6-7 at 12 %, no memory reading: listed, memory unknown.
- 705, erin, alpha, ``gres/gpu:h100=1`` on ``rs-02``: no reading at all, not judged.
- 706, frank, alpha, ``gres/gpu:h100=4`` on ``rs-03`` and ``rs-04`` (two GPUs each): GPU 0 of each at 60 %, GPU 1 at
  0 % — two busy GPUs on two nodes; a request of 2 (``--gpus``, the job's total) saves 2 × 2 GPU-hours.

Busy-looking jobs (:func:`load_busy_looking`, on their own: node ``rs-05`` and ``rs-06``, eight H100s each, read
every minute over [T, T+2h), with SM activity (``DCGM_FI_PROF_SM_ACTIVE``) or, ``profiled=False``, without):

- 707, gina, alpha, ``gres/gpu:h100=8`` on ``rs-05``: every GPU at 100 % utilisation; SM activity 0.66 on GPU 0 and
  0.02 on GPUs 1-7 (ranks spinning in collective kernels that wait on rank 0), mean 0.1. By SM activity one GPU is
  busy: a request of 1 saves GPUs 1-7, 7 × 2 GPU-hours. Without SM activity all eight are busy: nothing to say.
- 708, hugo, beta, ``gres/gpu:h100=8`` on ``rs-06``: every GPU at 100 % utilisation and SM activity 0.1, 20 GiB in
  use: by SM activity each GPU is busy but the job's mean is low (≤ 15 %): 20 GiB × 1.2 = 24 GiB fits an L40S.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from collector.contract import metric_names as m
from collector.contract.sample import Sample
from collector.contract.wire import IngestBatch, gpu_info_dict, reading_dict
from tests.support.scenario import MODEL, start_hour

NODE, BARE_NODE, PAIR = "rs-01", "rs-02", ("rs-03", "rs-04")
GIB = 2**30
# node → GPU index → (utilisation ratio, memory in use in GiB or None for no memory reading)
READINGS: dict[str, dict[int, tuple[float, float | None]]] = {
    NODE: {
        0: (0.80, 40.0),
        1: (0.0, 0.0),
        2: (0.0, 0.0),
        3: (0.03, 0.5),
        4: (0.10, 6.0),
        5: (0.90, 70.0),
        6: (0.12, None),
        7: (0.12, None),
    },
    **{node: {0: (0.60, 50.0), 1: (0.0, 0.0)} for node in PAIR},
}
OTHER_MEMORY_GIB = 70.0
"""Memory in use on GPU 4 ten minutes before job 702 starts and ten minutes after it ends."""
OUTSIDE = (-10, 130)
"""Minutes from T of GPU 4's readings outside job 702."""


BUSY_LOOKING: dict[str, dict[int, tuple[float, float]]] = {
    "rs-05": {0: (0.66, 40.0), **{index: (0.02, 40.0) for index in range(1, 8)}},
    "rs-06": {index: (0.10, 20.0) for index in range(8)},
}
"""Node → GPU index → (SM activity, memory in use in GiB) of :func:`load_busy_looking`; utilisation 100 %."""


def uuid(node: str, index: int) -> str:
    return f"GPU-rsrsrsrs-0000-0000-{node[-2:]:0>4}-{index:012d}"


def samples(t0: datetime, node: str) -> list[Sample]:
    """``node``'s readings: one a minute per GPU over [T, T+2h), and on :data:`NODE` GPU 4's at :data:`OUTSIDE`."""
    readings = []
    for minute in [*range(120), *OUTSIDE]:
        for index, (utilization, memory) in READINGS[node].items():
            outside = minute in OUTSIDE
            if outside and (node, index) != (NODE, 4):
                continue
            values = {m.GPU_UTILIZATION: utilization, m.GPU_MEMORY_TOTAL: 80.0 * GIB}
            if outside:
                values[m.GPU_MEMORY_USED] = OTHER_MEMORY_GIB * GIB
            elif memory is not None:
                values[m.GPU_MEMORY_USED] = memory * GIB
            labels = {"gpu": str(index), "uuid": uuid(node, index), "model": MODEL}
            readings.append(Sample("gpu", labels, values, t0 + timedelta(minutes=minute)))
    return readings


def batch(t0: datetime, node: str) -> IngestBatch:
    """``node``'s readings as one ingest batch."""
    readings = samples(t0, node)
    gpus = {s.labels["uuid"]: gpu_info_dict(s) for s in readings}
    return IngestBatch.model_validate(
        {"node": node, "gpus": list(gpus.values()), "samples": [reading_dict(s) for s in readings]}
    )


def sacct_line(t0: datetime, job: int, account: str, user: str, tres: str, node: str = NODE) -> str:
    """One job over [T, T+2h) in ``sacct --parsable2 --noheader`` format."""
    start = t0.strftime("%Y-%m-%dT%H:%M:%S")
    end = (t0 + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S")
    submit = (t0 - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S")
    return (
        f"{job}|{job}|orion|gpu|{account}|{user}|{submit}|{start}|{end}|02:00:00|COMPLETED|"
        f"billing=8,cpu=8,{tres},mem=64G,node=1|{node}|train"
    )


def sacct_lines(t0: datetime) -> list[str]:
    """The jobs in ``sacct --parsable2 --noheader`` format; GPUs are placed in index order on the node."""
    return [
        sacct_line(t0, 701, "acct-a", "alice", "gres/gpu:h100=4,gres/gpu=4"),
        sacct_line(t0, 702, "acct-b", "bob", "gres/gpu:h100=1,gres/gpu=1"),
        sacct_line(t0, 703, "acct-a", "carol", "gres/gpu:h100=1,gres/gpu=1"),
        sacct_line(t0, 704, "acct-b", "dave", "gres/gpu=2"),
        sacct_line(t0, 705, "acct-a", "erin", "gres/gpu:h100=1,gres/gpu=1", BARE_NODE),
        sacct_line(t0, 706, "acct-a", "frank", "gres/gpu:h100=4,gres/gpu=4", ",".join(PAIR)).replace(
            "node=1", "node=2"
        ),
    ]


def load(session, pricing) -> datetime:  # type: ignore[no-untyped-def]
    """The slice in the migrated database, its ledger built through T+2h; returns T."""
    from finops.ingest.readings import Ingestor
    from finops.jobs.slurm_import import import_sacct
    from finops.jobs.teams import map_account
    from finops.ledger.rollup import rollup
    from finops.timeutil import to_epoch

    t0 = start_hour()
    for account, team in (("acct-a", "alpha"), ("acct-b", "beta")):
        map_account(session, account, team, actor="system:test")
    for node in READINGS:
        Ingestor().store(session, batch(t0, node))
    result = import_sacct(session, sacct_lines(t0), source="rightsizing-scenario")
    assert (result.jobs, result.errors) == (6, []), result
    rollup(session, pricing, to_epoch(t0 + timedelta(hours=2)))
    return t0


def busy_looking_batch(t0: datetime, node: str, *, profiled: bool) -> IngestBatch:
    """``node``'s readings of :data:`BUSY_LOOKING`, one a minute per GPU over [T, T+2h), with SM activity when
    ``profiled``."""
    readings = []
    for minute in range(120):
        for index, (sm_active, memory) in BUSY_LOOKING[node].items():
            values = {m.GPU_UTILIZATION: 1.0, m.GPU_MEMORY_TOTAL: 80.0 * GIB, m.GPU_MEMORY_USED: memory * GIB}
            if profiled:
                values[m.GPU_SM_ACTIVE] = sm_active
            labels = {"gpu": str(index), "uuid": uuid(node, index), "model": MODEL}
            readings.append(Sample("gpu", labels, values, t0 + timedelta(minutes=minute)))
    gpus = {s.labels["uuid"]: gpu_info_dict(s) for s in readings}
    return IngestBatch.model_validate(
        {"node": node, "gpus": list(gpus.values()), "samples": [reading_dict(s) for s in readings]}
    )


def load_busy_looking(session, pricing, *, profiled: bool = True) -> datetime:  # type: ignore[no-untyped-def]
    """Jobs 707 and 708 (module docstring) alone in the migrated database, their ledger built through T+2h; returns
    T."""
    from finops.ingest.readings import Ingestor
    from finops.jobs.slurm_import import import_sacct
    from finops.jobs.teams import map_account
    from finops.ledger.rollup import rollup
    from finops.timeutil import to_epoch

    t0 = start_hour()
    for account, team in (("acct-a", "alpha"), ("acct-b", "beta")):
        map_account(session, account, team, actor="system:test")
    for node in BUSY_LOOKING:
        Ingestor().store(session, busy_looking_batch(t0, node, profiled=profiled))
    lines = [
        sacct_line(t0, 707, "acct-a", "gina", "gres/gpu:h100=8,gres/gpu=8", "rs-05"),
        sacct_line(t0, 708, "acct-b", "hugo", "gres/gpu:h100=8,gres/gpu=8", "rs-06"),
    ]
    result = import_sacct(session, lines, source="rightsizing-scenario")
    assert (result.jobs, result.errors) == (2, []), result
    rollup(session, pricing, to_epoch(t0 + timedelta(hours=2)))
    return t0
