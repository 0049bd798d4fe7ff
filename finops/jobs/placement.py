"""Which physical GPUs a job's allocation sits on: from the collectors' job map where samples name them,
else first-fit. Shared by the Slurm and Kubernetes importers and by the rollup.

Schedulers report a job's nodes and device count, not its GPU indices. Placement is:

1. **Observed**: the distinct GPUs of a job's node whose samples inside the job's [start, end) carry the job's
   id (:func:`job_keys`: a Slurm job's JobIDRaw or JobID such as ``1234`` or ``1234_7``; a pod's ``pod/<uid>``
   from cgroups or ``namespace/name`` from dcgm-exporter). The job is put on exactly those GPUs, whole GPUs
   first, then MIG instances. The cgroup job map names only GPUs running one of the job's processes, so a job
   that holds more devices than samples show gets the rest by first-fit; a node whose samples show more GPUs
   than the even split of a multi-node job gave it keeps them all (the split is a guess, the samples are not).
   Another job's allocation on an observed GPU that its own samples do not confirm is *displaced*: moved by
   first-fit to a GPU that is free, and its ledger hours marked dirty.
2. **First-fit**, as Slurm's ``select/cons_tres`` does by default: on each node the lowest-numbered GPUs with
   room over the job's whole [start, end), in job start order. A whole GPU needs the GPU free; MIG instances
   (shares ``g/slices``, see :mod:`finops.jobs.mig`) of several jobs may sit on one GPU at the same time as long as
   their shares add up to at most 1 at every instant.

GPUs a node has not reported yet are created as placeholders at the lowest unused index and take their UUID (and the
model the collector reads) when the node's collector first reports. A placeholder is in service only while jobs hold
it, unless the node inventory or a collector says otherwise (:class:`finops.db.models.Gpu`). A placeholder's model
is, first found: that of the node's collector-reported GPUs when they are all one model, the node inventory's
(``nodes.gpu_model``, :mod:`finops.jobs.inventory`), that of the node's other placeholders when they are all one
model, the job's GPU type (``gres/gpu:h100=8``), else ``unknown``. Samples that arrive after the import are
reconciled by :func:`finops.jobs.job_map.reconcile_job_map`, which the scheduled rollup runs on the readings it
has just metered.

Instants are epoch seconds (int) here; an open end is :data:`finops.jobs.gpu_calendar.OPEN_END`.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction

from sqlalchemy import and_, delete, select
from sqlalchemy.orm import Session

from finops.db.hours import hours_between, mark_hours_dirty
from finops.db.models import Allocation, Gpu, Job
from finops.jobs.compute_partitions import gres_gpu_name
from finops.jobs.gpu_calendar import OPEN_END, WHOLE, Booking, GpuCalendar, Unit
from finops.jobs.nodes import effective_model, ensure_nodes
from finops.jobs.observed_gpus import Observations, observe
from finops.timeutil import from_epoch, to_epoch

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PlacementRequest:
    """A job to place: ``job_pk`` (Job.id, already flushed), [``start``, ``end``) in epoch seconds (``end`` None
    while it runs), ``nodes``: (hostname, units on that node) in the scheduler's node order, ``gpu_type``: model
    name for placeholder GPUs (None: unknown), ``keys``: the ids samples carry for this job
    (:func:`job_keys`)."""

    job_pk: int
    start: int
    end: int | None
    nodes: Sequence[tuple[str, Sequence[Unit]]]
    gpu_type: str | None
    keys: frozenset[str]


@dataclass(slots=True)
class PlacementResult:
    """What :func:`place_jobs` did: allocation rows written, units put on GPUs named by samples, and other
    jobs' allocations displaced from such GPUs."""

    allocations: int = 0
    observed: int = 0
    displaced: int = 0


def job_keys(scheduler: str, job_id: str, job_id_raw: str) -> frozenset[str]:
    """The ``gpu_samples.job_id`` values that name a job: for Slurm its JobIDRaw and JobID (``1234``,
    ``1234_7``); for Kubernetes ``pod/<uid>`` (cgroup job map) and ``namespace/name`` (dcgm-exporter)."""
    if scheduler == "kubernetes":
        return frozenset((f"pod/{job_id_raw}", job_id))
    return frozenset((job_id_raw, job_id))


class Placer:
    """The GPU calendars of the nodes a placement touches, loaded once: every allocation on them that is open
    or ends after ``since`` (epoch seconds), with its job's ids."""

    def __init__(self, session: Session, hostnames: Iterable[str], since: int) -> None:
        self.session = session
        nodes = ensure_nodes(session, hostnames)
        self.node_ids = {name: node.id for name, node in nodes.items()}
        self.inventory = {name: node.gpu_model for name, node in nodes.items()}
        self.nodes: dict[str, list[GpuCalendar]] = {name: [] for name in self.node_ids}
        self.by_gpu: dict[int, GpuCalendar] = {}
        self.hostname_of: dict[int, str] = {node_id: name for name, node_id in self.node_ids.items()}
        gpus = session.scalars(
            select(Gpu).where(Gpu.node_id.in_(self.node_ids.values())).order_by(Gpu.node_id, Gpu.gpu_index)
        ).all()
        for gpu in gpus:
            calendar = GpuCalendar(gpu)
            self.nodes[self.hostname_of[gpu.node_id]].append(calendar)
            self.by_gpu[gpu.id] = calendar
        self.loaded_since = since
        self._load((Allocation.end.is_(None)) | (Allocation.end > from_epoch(since)))

    def _load(self, condition: object) -> None:
        if not self.by_gpu:
            return
        rows = self.session.execute(
            select(
                Allocation.id,
                Allocation.gpu_id,
                Allocation.start,
                Allocation.end,
                Allocation.share_num,
                Allocation.share_den,
                Allocation.mig_profile,
                Job.id,
                Job.scheduler,
                Job.job_id,
                Job.job_id_raw,
            )
            .join(Job, Job.id == Allocation.job_pk)
            .where(Allocation.gpu_id.in_(self.by_gpu.keys()), condition)  # type: ignore[arg-type]
            .order_by(Allocation.start)
        ).all()
        for allocation_id, gpu_id, start, end, num, den, profile, job_pk, scheduler, job_id, raw in rows:
            self.by_gpu[gpu_id].book(
                Booking(
                    start=to_epoch(start),
                    end=OPEN_END if end is None else to_epoch(end),
                    share=Fraction(num, den),
                    job_pk=job_pk,
                    keys=job_keys(scheduler, job_id, raw),
                    mig_profile=profile,
                    allocation_id=allocation_id,
                )
            )

    def load_back_to(self, since: int) -> None:
        """Also load the allocations that ended in [since, the earliest instant loaded so far)."""
        if since < self.loaded_since:
            self._load(
                and_(
                    Allocation.end.is_not(None),
                    Allocation.end > from_epoch(since),
                    Allocation.end <= from_epoch(self.loaded_since),
                )
            )
            self.loaded_since = since

    def node_model(self, hostname: str) -> str | None:
        """The model of the node's GPUs as :func:`~finops.jobs.nodes.effective_model` decides, else None."""
        gpus = [(c.gpu.uuid is not None, c.gpu.model) for c in self.nodes[hostname]]
        return effective_model(gpus, self.inventory.get(hostname))

    def first_fit(self, hostname: str, start: int, end: int, share: Fraction, gpu_type: str | None) -> GpuCalendar:
        """The lowest-numbered GPU of the node with ``share`` free over [start, end); a new placeholder GPU
        when none has room."""
        calendars = self.nodes[hostname]
        for calendar in calendars:
            if calendar.fits(start, end, share):
                return calendar
        used = {c.gpu.gpu_index for c in calendars}
        placeholder = Gpu(
            node_id=self.node_ids[hostname],
            gpu_index=next(i for i in range(len(used) + 1) if i not in used),
            model=self.node_model(hostname) or (gpu_type and gres_gpu_name(gpu_type)) or "unknown",
            in_service_from=from_epoch(start),
        )
        self.session.add(placeholder)
        self.session.flush()
        calendar = GpuCalendar(placeholder)
        bisect.insort(calendars, calendar, key=lambda c: c.gpu.gpu_index)
        self.by_gpu[placeholder.id] = calendar
        return calendar


def _end_time(end: int) -> datetime | None:
    return None if end == OPEN_END else from_epoch(end)


@dataclass(slots=True)
class _Task:
    """Units still to place by first-fit over [start, end) on one node, for one job (``owner``: its request,
    or the booking displaced); ``order`` breaks ties between equal starts (displaced bookings first)."""

    start: int
    order: int
    hostname: str
    end: int
    units: list[Unit]
    owner: PlacementRequest | Booking
    gpu_type: str | None


def place_jobs(session: Session, requests: Sequence[PlacementRequest]) -> PlacementResult:
    """Put each request's units on GPUs and write the Allocation rows (the jobs must have none yet), in the
    caller's transaction; one sample query for the whole batch.

    Requests are placed in the order given (callers sort by start); see the module docstring for the rules.
    Displaced allocations of other jobs are rewritten on their new GPUs and their hours marked dirty; the
    caller marks the hours of the requests' own jobs.
    """
    result = PlacementResult()
    requests = [r for r in requests if any(units for _, units in r.nodes)]
    if not requests:
        return result
    since = min(r.start for r in requests)
    until = None if any(r.end is None for r in requests) else max(r.end for r in requests if r.end is not None)
    placer = Placer(session, (host for r in requests for host, _ in r.nodes), since)
    observations = observe(session, placer.by_gpu, since, until)
    new: list[tuple[GpuCalendar, Booking]] = []
    tasks: list[_Task] = []
    for order, request in enumerate(requests):
        end = OPEN_END if request.end is None else request.end
        seen = observations.gpus(request.keys, request.start, end)
        for hostname, units in request.nodes:
            remaining = list(units)
            observed = [c for c in placer.nodes[hostname] if c.gpu.id in seen]
            for calendar, unit in _match_observed(observed, remaining):
                booking = Booking(request.start, end, unit.share, request.job_pk, request.keys, unit.mig_profile)
                result.displaced += _displace(placer, calendar, booking, observations, tasks)
                calendar.book(booking)
                new.append((calendar, booking))
                result.observed += 1
            if remaining:
                tasks.append(_Task(request.start, order, hostname, end, remaining, request, request.gpu_type))
    tasks.sort(key=lambda task: (task.start, task.order))
    for task in tasks:
        placer.load_back_to(task.start)
        for unit in task.units:
            calendar = placer.first_fit(task.hostname, task.start, task.end, unit.share, task.gpu_type)
            booking = Booking(task.start, task.end, unit.share, task.owner.job_pk, task.owner.keys, unit.mig_profile)
            calendar.book(booking)
            new.append((calendar, booking))
    rows = [
        {
            "job_pk": booking.job_pk,
            "gpu_id": calendar.gpu.id,
            "start": booking.start,
            "end": None if booking.end == OPEN_END else booking.end,
            "share_num": booking.share.numerator,
            "share_den": booking.share.denominator,
            "mig_profile": booking.mig_profile,
        }
        for calendar, booking in new
    ]
    session.execute(Allocation.__table__.insert(), rows)  # type: ignore[attr-defined]
    for calendar, booking in new:  # a GPU is in service from its first holding on at the latest
        if to_epoch(calendar.gpu.in_service_from) > booking.start:
            calendar.gpu.in_service_from = from_epoch(booking.start)
    result.allocations = len(rows)
    return result


def _match_observed(observed: list[GpuCalendar], remaining: list[Unit]) -> list[tuple[GpuCalendar, Unit]]:
    """Pair a node's observed GPUs (index order) with units, whole GPUs first; units used are taken out of
    ``remaining``. Observed GPUs left over become extra whole units when the job holds whole GPUs."""
    pairs: list[tuple[GpuCalendar, Unit]] = []
    free = list(observed)
    for unit in sorted(remaining, key=lambda u: u.share < WHOLE):
        if not free:
            break
        calendar = free.pop(0)
        pairs.append((calendar, unit))
        remaining.remove(unit)
    if free and any(unit.share == WHOLE for _, unit in pairs):
        pairs.extend((calendar, Unit()) for calendar in free)
    return pairs


def _displace(
    placer: Placer, calendar: GpuCalendar, booking: Booking, observations: Observations, tasks: list[_Task]
) -> int:
    """Make room on ``calendar`` for an observed ``booking``: other jobs' bookings overlapping it that their
    own samples do not put on this GPU leave it (queued in ``tasks`` for first-fit). Returns how many left."""
    if calendar.fits(booking.start, booking.end, booking.share):
        return 0
    moved = 0
    for other in list(calendar.overlapping(booking.start, booking.end)):
        if other.job_pk == booking.job_pk or calendar.gpu.id in observations.gpus(other.keys, other.start, other.end):
            continue
        calendar.remove(other)
        if other.allocation_id is not None:
            placer.session.execute(delete(Allocation).where(Allocation.id == other.allocation_id))
        mark_hours_dirty(placer.session, hours_between(from_epoch(other.start), _end_time(other.end)))
        hostname = placer.hostname_of[calendar.gpu.node_id]
        tasks.append(
            _Task(
                other.start, -1, hostname, other.end, [Unit(other.share, other.mig_profile)], other, calendar.gpu.model
            )
        )
        moved += 1
    if not calendar.fits(booking.start, booking.end, booking.share):
        log.warning(
            "GPU %s: samples put job %s on it over [%s, %s) beside other jobs their samples also put there",
            calendar.gpu.id,
            booking.job_pk,
            from_epoch(booking.start).isoformat(),
            "open" if booking.end == OPEN_END else from_epoch(booking.end).isoformat(),
        )
    return moved
