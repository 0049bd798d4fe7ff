"""Capacity from the node inventory: each listed node's GPUs, and when they are in service.

``gpu-finops nodes import`` (:func:`finops.jobs.inventory.import_nodes`) gives each node of ``scontrol show node
--oneliner`` the GPUs its ``Gres=`` names (:func:`physical_gpus`: whole GPUs, and MIG devices as the physical GPUs
they fill), creating the missing ones as placeholders (no UUID until a collector reports them), and takes their
service period (:class:`finops.db.models.GpuService`) from the node's ``State=`` at the import's time:

- **In service** (:func:`in_service`): every state but two. ``IDLE``, ``ALLOCATED``, ``MIXED``, ``COMPLETING``,
  ``RESERVED``, ``PLANNED`` are plainly so. A drained, down, failing, rebooting or not responding node
  (``DRAIN``/``DRAINED``/``DRAINING``, ``DOWN``, ``FAIL``, ``MAINT``, ``REBOOT_*``, ``*``: :func:`unavailable`)
  stays in service too, *unavailable*: the site pays for its GPUs all the same (the hardware and its power and
  space, or the cloud instance), so their hours remain capacity, billed to ``__unallocated__`` when no job holds
  them; removing them would hide what broken or drained hardware costs. The node's state, reason and since when
  are kept (:class:`finops.db.models.Node`) and shown by ``gpu-finops nodes list``, so that this capacity is
  explained, not mistaken for idle capacity nobody wanted.
- **Out of service**: ``FUTURE`` (Slurm: "defined for future use and need not exist") and a cloud node powered
  down (``CLOUD`` with ``POWERED_DOWN``: no instance runs, nothing is paid). Their GPUs' open period ends at the
  import's time; a later import that lists them in service opens a new one.
- **Gone**: a node an earlier import of the same cluster listed and this one does not (a complete listing only:
  no ``--partial``, no bad line) has its GPUs' open periods ended at the import's time, and its state cleared.

A GPU's period opens at the import's time, not before: the inventory says the node exists now, not since when
(``--at`` imports a listing as of an earlier instant). A GPU a collector reported and that has no period yet is in
service from its first reading on (:class:`finops.db.models.Gpu`); its first period starts there, so the
inventory does not cut that short. Every change marks the ledger hours from the import's time on dirty.

Node states: Slurm documentation, scontrol(1) "NODE STATE" and sinfo(1) "NODE STATE CODES": a base state and
``+FLAG`` suffixes, ``*`` for a node not responding (``IDLE+DRAIN``, ``DOWN*+DRAIN``, ``IDLE+CLOUD+POWERED_DOWN``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from finops.db.hours import HourMarks
from finops.db.models import Gpu, GpuService, Node
from finops.jobs.mig import gres_mig_type, mig_share

_UNAVAILABLE = frozenset(
    {
        "DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "MAINT", "NOT_RESPONDING", "INVAL",
        "INVALID_REG", "UNKNOWN", "REBOOT_ISSUED", "REBOOT_REQUESTED", "POWER_DOWN", "POWERED_DOWN",
        "POWERING_DOWN", "POWERING_UP",
    }
)  # fmt: skip


def state_words(state: str) -> set[str]:
    """The words of a Slurm node State (``DOWN*+DRAIN`` -> {DOWN, NOT_RESPONDING, DRAIN}), upper case."""
    words = set()
    for word in state.upper().split("+"):
        if word.endswith("*"):
            words.add("NOT_RESPONDING")
        word = word.rstrip("*~#!%$@^-")
        if word:
            words.add(word)
    return words


def in_service(state: str | None) -> bool:
    """Whether a node in this State has its GPUs in service (the module docstring says which); no State (an
    inventory that printed none): in service."""
    words = state_words(state or "")
    return "FUTURE" not in words and not ({"CLOUD", "POWERED_DOWN"} <= words)


def unavailable(state: str | None) -> bool:
    """Whether a node in this State is in service but cannot run jobs (drained, down, failing, rebooting, not
    responding, powered down)."""
    return in_service(state) and bool(state_words(state or "") & _UNAVAILABLE)


def physical_gpus(gres: Sequence[tuple[str | None, int]], model: str | None) -> int:
    """How many physical GPUs a node's ``gpu`` GRES items (type or None, count) name: whole GPUs one each; the MIG
    devices of a profile (``a100_1g.5gb:7``) fill ``count × share`` GPUs (:func:`finops.jobs.mig.mig_share`, on
    ``model`` or the type's board), rounded up, at least one per item when the share is unknown."""
    whole = 0
    shares = Fraction(0)
    for gres_type, count in gres:
        mig = gres_mig_type(gres_type)
        if mig is None:
            whole += count
            continue
        try:
            shares += count * mig_share(mig[1], mig[0] or model)
        except ValueError:
            whole += 1 if count else 0
    return whole + math.ceil(shares)


@dataclass
class CapacityResult:
    """What an inventory import did to capacity: GPUs created; nodes whose GPUs entered service, left it (out of
    service, or gone from the inventory: hostnames) and nodes listed unavailable (hostname and state)."""

    gpus_created: int = 0
    entered: int = 0
    left: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)


def ensure_gpus(session: Session, node: Node, count: int, model: str, at: datetime) -> tuple[list[int], int]:
    """The ids of ``node``'s GPUs at indices 0 to ``count`` − 1, the missing ones created as placeholders of
    ``model`` entering service at ``at`` (:func:`open_service` gives them their period); and how many were
    created."""
    existing: dict[int, int] = {
        index: gpu_id for index, gpu_id in session.execute(select(Gpu.gpu_index, Gpu.id).where(Gpu.node_id == node.id))
    }
    created = [
        Gpu(node_id=node.id, gpu_index=index, model=model, in_service_from=at)
        for index in range(count)
        if index not in existing
    ]
    session.add_all(created)
    session.flush()
    return [existing[index] for index in range(count) if index in existing] + [gpu.id for gpu in created], len(created)


def open_service(session: Session, gpu_ids: Sequence[int], at: datetime, marks: HourMarks) -> int:
    """Open a service period at ``at`` for each of ``gpu_ids`` without one open then (a GPU a collector reported and
    that has no period: from its ``in_service_from`` instead); returns how many were opened at ``at``."""
    if not gpu_ids:
        return 0
    rows = session.execute(select(Gpu.id, Gpu.uuid, Gpu.in_service_from).where(Gpu.id.in_(gpu_ids))).all()
    periods: dict[int, list[GpuService]] = {}
    for period in session.scalars(select(GpuService).where(GpuService.gpu_id.in_(gpu_ids))):
        periods.setdefault(period.gpu_id, []).append(period)
    opened = 0
    for gpu_id, uuid, entered in rows:
        held = periods.get(gpu_id, [])
        if any(p.end is None or p.end > at for p in held):
            continue
        start = entered if uuid is not None and not held and entered < at else at
        session.add(GpuService(gpu_id=gpu_id, start=start, end=None))
        if start == at:
            opened += 1
            if entered > at:
                session.execute(update(Gpu).where(Gpu.id == gpu_id).values(in_service_from=at))
    if opened:
        marks.add_run(at, None)
    return opened


def close_service(session: Session, gpu_ids: Sequence[int], at: datetime, marks: HourMarks) -> int:
    """End at ``at`` the open service period of each of ``gpu_ids`` (a period that would end before it starts is
    removed; a GPU a collector reported and that has no period gets [``in_service_from``, ``at``)); returns how many
    GPUs left service."""
    if not gpu_ids:
        return 0
    closed = 0
    with_periods = set(session.scalars(select(GpuService.gpu_id).where(GpuService.gpu_id.in_(gpu_ids))))
    for period in session.scalars(
        select(GpuService).where(GpuService.gpu_id.in_(gpu_ids), GpuService.end.is_(None))
    ).all():
        if period.start < at:
            period.end = at
        else:
            session.execute(delete(GpuService).where(GpuService.id == period.id))
        closed += 1
    for gpu_id, entered in session.execute(
        select(Gpu.id, Gpu.in_service_from).where(Gpu.id.in_(gpu_ids), Gpu.uuid.is_not(None))
    ):
        if gpu_id not in with_periods and entered < at:
            session.add(GpuService(gpu_id=gpu_id, start=entered, end=at))
            closed += 1
    if closed:
        marks.add_run(at, None)
    return closed


def set_state(node: Node, cluster: str, state: str | None, reason: str | None, at: datetime) -> None:
    """Record ``node``'s inventory cluster, State and Reason; ``state_since`` moves to ``at`` when the State
    changed."""
    node.cluster = cluster
    if node.state != state or node.state_since is None:
        node.state_since = at
    node.state = state
    node.state_reason = reason


def end_gone(session: Session, cluster: str, listed: set[str], at: datetime, marks: HourMarks) -> list[str]:
    """End the service of the GPUs of ``cluster``'s nodes that an earlier import listed and this one does not
    (``listed``: its hostnames); their State is cleared (``state_since``: ``at``). Returns their hostnames."""
    gone = [
        node
        for node in session.scalars(
            select(Node).where(Node.cluster == cluster, Node.state.is_not(None)).order_by(Node.hostname)
        )
        if node.hostname not in listed
    ]
    for node in gone:
        gpu_ids = list(session.scalars(select(Gpu.id).where(Gpu.node_id == node.id)))
        close_service(session, gpu_ids, at, marks)
        node.state, node.state_reason, node.state_since = None, None, at
    return [node.hostname for node in gone]
