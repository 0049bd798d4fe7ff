"""A Slurm job holding one GPU, or a MIG share of it, stored directly (no sacct import), as the ledger tests set up
the holdings they cost."""

from __future__ import annotations

from sqlalchemy.orm import Session

from finops.db.models import Allocation, Job, Team
from finops.timeutil import from_epoch

MIG_PROFILES = {3: "3g.40gb", 1: "1g.10gb"}
"""The MIG profile of an H100 share by its compute slices (of 7)."""


def hold(
    session: Session, team: Team, gpu_id: int, name: str, start: int, end: int | None, share: tuple[int, int] = (1, 1)
) -> Allocation:
    """Job ``name`` (cluster ``c``, user ``u``, account ``a``, partition ``p``, node ``n1``) of ``team`` holding
    GPU ``gpu_id`` over [start, end) (epoch seconds; ``end`` None: running), ``share`` (numerator, denominator) of
    it: a whole GPU, or a MIG share named by :data:`MIG_PROFILES`. The allocation, flushed."""
    job = Job(
        scheduler="slurm", cluster="c", job_id=name, job_id_raw=name, user="u", account="a", partition="p",
        name=name, state="RUNNING" if end is None else "COMPLETED", start=from_epoch(start),
        end=None if end is None else from_epoch(end), gpus=1, node_list="n1", team_id=team.id,
    )  # fmt: skip
    session.add(job)
    session.flush()
    allocation = Allocation(
        job_pk=job.id, gpu_id=gpu_id, start=from_epoch(start), end=None if end is None else from_epoch(end),
        share_num=share[0], share_den=share[1], mig_profile=MIG_PROFILES.get(share[0]) if share != (1, 1) else None,
    )  # fmt: skip
    session.add(allocation)
    session.flush()
    return allocation
