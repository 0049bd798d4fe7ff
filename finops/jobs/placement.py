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
reconciled by :func:`reconcile_job_map`, which the scheduled rollup runs before rebuilding dirty ledger hours.

Instants are epoch seconds (int) here; an open end is :data:`OPEN_END`.
"""

from __future__ import annotations

import bisect
import logging
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from typing import TypeVar

from sqlalchemy import ColumnElement, and_, delete, func, or_, select
from sqlalchemy.orm import Session

from finops.db.hours import HourMarks, hours_between, mark_hours_dirty
from finops.db.ledger_tables import DirtyHour
from finops.db.models import Allocation, Gpu, GpuSample, Job, Node
from finops.jobs.compute_partitions import gres_gpu_name
from finops.jobs.slurm_hostlist import expand_hostlist
from finops.timeutil import HOUR, from_epoch, to_epoch

log = logging.getLogger(__name__)

OPEN_END = 2**62
"""End of an allocation that is still open (a running job), in epoch seconds."""

WHOLE = Fraction(1)

_IN_CHUNK = 2000  # values per SQL IN list

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Unit:
    """One device a job holds on a node: a whole GPU (``share`` 1, no profile) or a MIG instance
    (``share`` = its compute slices over the GPU's, ``mig_profile`` such as ``1g.10gb``)."""

    share: Fraction = WHOLE
    mig_profile: str | None = None


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


@dataclass(slots=True)
class _Booking:
    """A job holding ``share`` of one GPU over [start, end). ``allocation_id`` None: not written yet."""

    start: int
    end: int
    share: Fraction
    job_pk: int
    keys: frozenset[str]
    mig_profile: str | None = None
    allocation_id: int | None = None


class GpuCalendar:
    """The bookings of one GPU, sorted by start, with the furthest end reached so far at each position, so
    the bookings overlapping an interval are found scanning back from it and stopping early."""

    def __init__(self, gpu: Gpu) -> None:
        self.gpu = gpu
        self.bookings: list[_Booking] = []
        self._starts: list[int] = []
        self._reach: list[int] = []  # _reach[i] = max end of bookings[0..i]

    def overlapping(self, start: int, end: int) -> Iterator[_Booking]:
        """Bookings that overlap [start, end), latest start first."""
        i = bisect.bisect_left(self._starts, end) - 1
        while i >= 0 and self._reach[i] > start:
            if self.bookings[i].end > start:
                yield self.bookings[i]
            i -= 1

    def held(self, start: int, end: int) -> Fraction:
        """The largest share booked at any instant of [start, end)."""
        events: list[tuple[int, Fraction]] = []
        for booking in self.overlapping(start, end):
            events.append((max(booking.start, start), booking.share))
            events.append((min(booking.end, end), -booking.share))
        events.sort(key=lambda event: (event[0], event[1] > 0))  # at one instant, ends before starts
        peak = current = Fraction(0)
        for _, change in events:
            current += change
            peak = max(peak, current)
        return peak

    def fits(self, start: int, end: int, share: Fraction) -> bool:
        """Whether ``share`` more of the GPU is free over the whole of [start, end)."""
        if share >= WHOLE:
            return next(self.overlapping(start, end), None) is None
        return self.held(start, end) + share <= WHOLE

    def book(self, booking: _Booking) -> None:
        """Add a booking (no check: see :meth:`fits`)."""
        i = bisect.bisect_right(self._starts, booking.start)
        self._starts.insert(i, booking.start)
        self.bookings.insert(i, booking)
        self._reach.insert(i, max(booking.end, self._reach[i - 1] if i else booking.end))
        for j in range(i + 1, len(self._reach)):
            if self._reach[j] >= booking.end:
                break
            self._reach[j] = booking.end

    def remove(self, booking: _Booking) -> None:
        """Drop a booking and recompute the reach after it."""
        i = next(k for k, b in enumerate(self.bookings) if b is booking)
        del self.bookings[i], self._starts[i], self._reach[i]
        reach = self._reach[i - 1] if i else 0
        for j in range(i, len(self._reach)):
            reach = max(reach, self.bookings[j].end)
            self._reach[j] = reach


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
                _Booking(
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
        """The model of the node's GPUs as :func:`effective_model` decides, else None."""
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


def ensure_nodes(session: Session, hostnames: Iterable[str]) -> dict[str, Node]:
    """The Node rows of ``hostnames``, created (and flushed) where missing; one query per 2000 names."""
    names = sorted(set(hostnames))
    nodes: dict[str, Node] = {}
    for chunk in _chunks(names):
        nodes.update((node.hostname, node) for node in session.scalars(select(Node).where(Node.hostname.in_(chunk))))
    missing = [Node(hostname=name) for name in names if name not in nodes]
    if missing:
        session.add_all(missing)
        session.flush()
        nodes.update((node.hostname, node) for node in missing)
    return nodes


def effective_model(gpus: Iterable[tuple[bool, str]], inventory: str | None) -> str | None:
    """The model of a node's GPUs from its ``gpus`` (reported by a collector?, model) and its inventory model: the
    collector-reported GPUs' model when they are all one, else the inventory's, else the placeholders' when they
    are all one (``unknown`` aside), else None."""
    reported: set[str] = set()
    placeholders: set[str] = set()
    for is_reported, model in gpus:
        if model != "unknown":
            (reported if is_reported else placeholders).add(model)
    if len(reported) == 1:
        return reported.pop()
    if inventory:
        return inventory
    return placeholders.pop() if len(placeholders) == 1 else None


def node_models(session: Session, hostnames: Iterable[str]) -> dict[str, str | None]:
    """Per hostname, the model of its GPUs as :func:`effective_model` decides (collector, inventory, placeholders);
    one query per 2000 names."""
    names = sorted(set(hostnames))
    gpus: dict[str, list[tuple[bool, str]]] = {name: [] for name in names}
    inventory: dict[str, str | None] = {}
    for chunk in _chunks(names):
        query = (
            select(Node.hostname, Node.gpu_model, Gpu.uuid.is_not(None), Gpu.model)
            .outerjoin(Gpu, Gpu.node_id == Node.id)
            .where(Node.hostname.in_(chunk))
        )
        for hostname, gpu_model, reported, model in session.execute(query.distinct()):
            inventory[hostname] = gpu_model
            if model is not None:
                gpus[hostname].append((bool(reported), model))
    return {name: effective_model(gpus[name], inventory.get(name)) for name in names}


@dataclass(slots=True)
class _Observations:
    """``gpu_samples.job_id`` value -> GPU id -> (first, last) sample instant (epoch seconds)."""

    spans: dict[str, dict[int, tuple[int, int]]] = field(default_factory=dict)

    def gpus(self, keys: Iterable[str], start: int, end: int) -> set[int]:
        """GPUs with a sample in [start, end) carrying one of ``keys`` (by first and last instant)."""
        found: set[int] = set()
        for key in keys:
            for gpu_id, (first, last) in self.spans.get(key, {}).items():
                if first < end and last >= start:
                    found.add(gpu_id)
        return found


def _in_windows(windows: Sequence[tuple[int, int | None]]) -> ColumnElement[bool]:
    """SQL condition: the sample's instant lies in one of the [start, end) windows (end None: open)."""
    bounds = [
        GpuSample.ts >= from_epoch(a)
        if b is None
        else and_(GpuSample.ts >= from_epoch(a), GpuSample.ts < from_epoch(b))
        for a, b in windows
    ]
    return or_(*bounds)


def _observe(session: Session, gpu_ids: Iterable[int], since: int, until: int | None) -> _Observations:
    """One query: per GPU (of ``gpu_ids``) and job id, the first and last sample in [since, until) carrying it."""
    ids = sorted(set(gpu_ids))
    observations = _Observations()
    if not ids:
        return observations
    gpu_filter = GpuSample.gpu_id.in_(ids) if len(ids) <= _IN_CHUNK else GpuSample.gpu_id.is_not(None)
    rows = session.execute(
        select(GpuSample.gpu_id, GpuSample.job_id, func.min(GpuSample.ts), func.max(GpuSample.ts))
        .where(gpu_filter, _in_windows([(since, until)]), GpuSample.job_id.is_not(None))
        .group_by(GpuSample.gpu_id, GpuSample.job_id)
    ).all()
    wanted = set(ids)
    for gpu_id, job_id, first, last in rows:
        if gpu_id in wanted and job_id is not None:
            observations.spans.setdefault(job_id, {})[gpu_id] = (to_epoch(first), to_epoch(last))
    return observations


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
    owner: PlacementRequest | _Booking
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
    observations = _observe(session, placer.by_gpu, since, until)
    new: list[tuple[GpuCalendar, _Booking]] = []
    tasks: list[_Task] = []
    for order, request in enumerate(requests):
        end = OPEN_END if request.end is None else request.end
        seen = observations.gpus(request.keys, request.start, end)
        for hostname, units in request.nodes:
            remaining = list(units)
            observed = [c for c in placer.nodes[hostname] if c.gpu.id in seen]
            for calendar, unit in _match_observed(observed, remaining):
                booking = _Booking(request.start, end, unit.share, request.job_pk, request.keys, unit.mig_profile)
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
            booking = _Booking(task.start, task.end, unit.share, task.owner.job_pk, task.owner.keys, unit.mig_profile)
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
    placer: Placer, calendar: GpuCalendar, booking: _Booking, observations: _Observations, tasks: list[_Task]
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


def reconcile_job_map(session: Session, until: int) -> int:
    """Re-place jobs whose samples, newly arrived in the ledger's dirty hours before ``until`` (epoch seconds),
    name GPUs their allocations are not on. Returns how many (job, node) placements moved.

    For each such job and node, the job's allocations on that node are rewritten by :func:`place_jobs` (so on
    the observed GPUs, other jobs displaced) and the job's hours are marked dirty, for the rollup that follows.
    Three queries when nothing disagrees: dirty hours, samples of those hours, the jobs they name with their
    allocations.
    """
    hours = sorted(
        to_epoch(h) for h in session.scalars(select(DirtyHour.hour).where(DirtyHour.hour < from_epoch(until)))
    )
    windows = _windows(hours, until)
    if not windows:
        return 0
    seen = session.execute(
        select(GpuSample.gpu_id, GpuSample.job_id, func.min(GpuSample.ts), func.max(GpuSample.ts), Node.hostname)
        .join(Gpu, Gpu.id == GpuSample.gpu_id)
        .join(Node, Node.id == Gpu.node_id)
        .where(_in_windows(windows), GpuSample.job_id.is_not(None))
        .group_by(GpuSample.gpu_id, GpuSample.job_id, Node.hostname)
    ).all()
    observations = _Observations()
    host_of_gpu: dict[int, str] = {}
    for gpu_id, job_id, first, last, hostname in seen:
        if job_id is None:
            continue
        observations.spans.setdefault(job_id, {})[gpu_id] = (to_epoch(first), to_epoch(last))
        host_of_gpu[gpu_id] = hostname
    jobs = _jobs_named(session, set(observations.spans))
    held: dict[int, list[tuple[int, int, str, Unit]]] = defaultdict(list)  # job -> (allocation, gpu, host, unit)
    for chunk in _chunks(sorted(jobs)):
        for allocation_id, job_pk, gpu_id, num, den, profile, hostname in session.execute(
            select(
                Allocation.id,
                Allocation.job_pk,
                Allocation.gpu_id,
                Allocation.share_num,
                Allocation.share_den,
                Allocation.mig_profile,
                Node.hostname,
            )
            .join(Gpu, Gpu.id == Allocation.gpu_id)
            .join(Node, Node.id == Gpu.node_id)
            .where(Allocation.job_pk.in_(chunk))
            .order_by(Allocation.id)
        ):
            held[job_pk].append((allocation_id, gpu_id, hostname, Unit(Fraction(num, den), profile)))
    requests: list[PlacementRequest] = []
    stale: list[int] = []
    marks = HourMarks()
    for job in sorted(jobs.values(), key=lambda j: (j.start or from_epoch(0), j.id)):
        if job.start is None:
            continue
        start, end = to_epoch(job.start), OPEN_END if job.end is None else to_epoch(job.end)
        keys = job_keys(job.scheduler, job.job_id, job.job_id_raw)
        nodes = set(expand_hostlist(job.node_list))
        observed: dict[str, set[int]] = defaultdict(set)
        for gpu_id in observations.gpus(keys, start, end):
            if host_of_gpu[gpu_id] in nodes:
                observed[host_of_gpu[gpu_id]].add(gpu_id)
        moved: list[tuple[str, Sequence[Unit]]] = []
        for hostname, gpu_ids in sorted(observed.items()):
            rows = [row for row in held[job.id] if row[2] == hostname]
            if rows and not gpu_ids <= {gpu_id for _, gpu_id, _, _ in rows}:
                stale.extend(allocation_id for allocation_id, _, _, _ in rows)
                moved.append((hostname, [unit for _, _, _, unit in rows]))
        if moved:
            requests.append(
                PlacementRequest(job.id, start, None if job.end is None else end, moved, job.gpu_type, keys)
            )
            marks.add_job(job)
    if not requests:
        return 0
    marks.mark(session)
    for chunk in _chunks(stale):
        session.execute(delete(Allocation).where(Allocation.id.in_(chunk)))
    place_jobs(session, requests)
    count = sum(len(r.nodes) for r in requests)
    log.info("job map: %d job placements moved to the GPUs their samples name", count)
    return count


def _windows(hours: list[int], until: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) runs of the given hour starts, clipped at ``until``."""
    windows: list[tuple[int, int]] = []
    for hour in hours:
        if windows and windows[-1][1] == hour:
            windows[-1] = (windows[-1][0], hour + HOUR)
        else:
            windows.append((hour, hour + HOUR))
    return [(a, min(b, until)) for a, b in windows if a < until]


def _jobs_named(session: Session, ids: set[str]) -> dict[int, Job]:
    """Jobs whose :func:`job_keys` include any of ``ids``, by Job.id."""
    plain = sorted(ids)
    uids = sorted(i.removeprefix("pod/") for i in ids if i.startswith("pod/"))
    jobs: dict[int, Job] = {}
    for chunk in _chunks(plain):
        for job in session.scalars(select(Job).where(or_(Job.job_id.in_(chunk), Job.job_id_raw.in_(chunk)))):
            jobs[job.id] = job
    for chunk in _chunks(uids):
        for job in session.scalars(select(Job).where(Job.scheduler == "kubernetes", Job.job_id_raw.in_(chunk))):
            jobs[job.id] = job
    return {pk: job for pk, job in jobs.items() if job_keys(job.scheduler, job.job_id, job.job_id_raw) & ids}


def _chunks(values: Sequence[T]) -> Iterator[list[T]]:
    """``values`` in lists of at most :data:`_IN_CHUNK` (bound parameters per SQL IN list)."""
    for i in range(0, len(values), _IN_CHUNK):
        yield list(values[i : i + _IN_CHUNK])
