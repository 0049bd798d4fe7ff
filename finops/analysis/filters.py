"""Cluster, team and partition filters over ledger rows, jobs and nodes (the dashboard's filters).

A filter left as ``None`` selects everything. What each one selects:

- ``team``: ledger rows billed to the team (by name); ``__unallocated__`` selects the capacity no job held.
- ``partition``: rows of jobs in that Slurm partition (a pod's node pool), and capacity no job held on nodes in
  that partition (a node's partition is that of the newest job placed on it, :attr:`finops.db.models.Node.partition`).
- ``cluster``: rows of jobs of that cluster (Slurm cluster, or the cluster a pod import named), and capacity no
  job held on the nodes where a job of that cluster has held a GPU (nodes carry no cluster of their own).

The conditions are subqueries on the ledger's own columns, so they apply to any query over ``ledger`` whatever
it joins, and leave the query unchanged when no filter is set.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import ColumnElement, Select, and_, or_, select

from finops.db.ledger_tables import LedgerEntry
from finops.db.models import Allocation, Gpu, Job, Node, Team


@dataclass(frozen=True, slots=True)
class Scope:
    """The filters of one view: each a name, or None for all."""

    cluster: str | None = None
    team: str | None = None
    partition: str | None = None

    @property
    def is_everything(self) -> bool:
        """True when no filter is set."""
        return self.cluster is None and self.team is None and self.partition is None


def nodes_in(cluster: str | None = None, partition: str | None = None) -> Select[int]:
    """``SELECT nodes.id`` of the nodes in ``cluster`` (a job of it has held one of the node's GPUs) and in
    ``partition`` (:attr:`Node.partition`); every node when both are None."""
    query = select(Node.id)
    if partition is not None:
        query = query.where(Node.partition == partition)
    if cluster is not None:
        held = (
            select(Gpu.node_id)
            .join(Allocation, Allocation.gpu_id == Gpu.id)
            .join(Job, Job.id == Allocation.job_pk)
            .where(Job.cluster == cluster)
        )
        query = query.where(Node.id.in_(held))
    return query


def jobs_in(scope: Scope) -> Select[int]:
    """``SELECT jobs.id`` of the jobs the scope selects (cluster, team, partition of the job)."""
    query = select(Job.id)
    if scope.cluster is not None:
        query = query.where(Job.cluster == scope.cluster)
    if scope.partition is not None:
        query = query.where(Job.partition == scope.partition)
    if scope.team is not None:
        query = query.where(Job.team_id.in_(select(Team.id).where(Team.name == scope.team)))
    return query


def ledger_conditions(scope: Scope) -> list[ColumnElement[bool]]:
    """WHERE conditions on :class:`LedgerEntry` selecting the scope's rows (empty list: everything)."""
    conditions: list[ColumnElement[bool]] = []
    if scope.team is not None:
        conditions.append(LedgerEntry.team_id.in_(select(Team.id).where(Team.name == scope.team)))
    if scope.cluster is not None or scope.partition is not None:
        job_scope = Scope(cluster=scope.cluster, partition=scope.partition)
        unheld_gpus = select(Gpu.id).where(Gpu.node_id.in_(nodes_in(scope.cluster, scope.partition)))
        conditions.append(
            or_(
                LedgerEntry.job_pk.in_(jobs_in(job_scope)),
                and_(LedgerEntry.job_pk.is_(None), LedgerEntry.gpu_id.in_(unheld_gpus)),
            )
        )
    return conditions
