"""Job leases on PostgreSQL: any number of ``serve`` and ``scheduler`` processes on one database run each scheduled
job once per interval, on the process holding the job's lease (one :class:`finops.db.models.JobLease` row per job
name: holder, expiry).

- Keeping: a thread of each scheduler process (:meth:`JobLeases.start`) renews, every third of the lease
  (``FINOPS_JOB_LEASE_SECONDS``, default 30 s), the leases it holds, and takes each lease nobody holds yet or
  whose ``expires_at`` has passed, in one short transaction (``INSERT … ON CONFLICT DO UPDATE … WHERE``: of two
  processes racing for a lease, the second waits for the first's row lock and then finds the lease taken).
  Expiry is reckoned in the database's clock (``clock_timestamp()``, whole seconds), never a host's.
- Running: a job wrapped by :meth:`JobLeases.leased` runs only while this process holds its lease (as its last
  renewal found); otherwise the run is skipped, logged at DEBUG.
- Fencing: while a wrapped job runs, every transaction it commits through the scheduler's session factory first
  locks its lease row where holder = this process and ``expires_at`` is still ahead (``SELECT … FOR UPDATE`` in a
  ``before_commit`` hook, so job code is unchanged: rollup, alert evaluation and delivery, imports alike). No such
  row: :class:`LeaseLost` and the transaction is rolled back. Taking a lease over updates that row, so it waits
  for the commit: work of a process that lost its lease never commits, and work that committed was done under it.
- Dying: a holder killed mid-run (``kill -9``) leaves its transaction on a connection that closes with the
  process; PostgreSQL rolls it back once the statement running ends (a backend notices its client has gone when
  it next reads from it, unless ``client_connection_check_interval`` is set). Its lease ends at most one lease
  after its last renewal and another process takes it at its next renewal: within 4/3 of a lease (40 s by
  default). The new holder runs the job at once (:meth:`JobLeases.when_taken`: the scheduler moves an interval
  job's next run to now), and that run redoes the work (a rollup rebuilds the hours still marked dirty).
- Stopping: :meth:`JobLeases.release` (at SIGTERM or SIGINT, and when the scheduler shuts down) stops the thread
  and ends this process's leases (their expiry set to the database's now), so that another process takes them at
  its next renewal (within a third of a lease) instead of after expiry, and runs their jobs at once.

SQLite is one process's database: :func:`job_leases` gives None there and the scheduler runs every job itself.

Metrics, on the process's registry: ``gpufinops_job_lease_held{job}`` (1 while this process holds the job's lease)
and ``gpufinops_job_lease_acquisitions_total{job}`` (times it took the lease: first, after expiry or release).
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import ParamSpec, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge
from sqlalchemy import BigInteger, ColumnElement, case, cast, event, func, or_, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session, sessionmaker

from finops.db.models import JobLease
from finops.errors import FinopsError

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

_RUNNING: ContextVar[tuple[JobLeases, str] | None] = ContextVar("finops_job_lease", default=None)
"""The leases and job name of the leased job running in this thread (set by :meth:`JobLeases.leased`)."""


class LeaseLost(FinopsError):
    """A leased job tried to commit without holding its lease (expired, or taken by another process); the
    transaction is rolled back."""


def _database_now() -> ColumnElement[int]:
    """The database's clock now, in whole epoch seconds (``clock_timestamp()``: not the transaction's start)."""
    return cast(func.floor(func.extract("epoch", func.clock_timestamp())), BigInteger)


def holder_name() -> str:
    """This process's name in lease rows: ``host:pid:random`` (the random part tells a restarted pid apart)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class JobLeases:
    """One scheduler process's leases on PostgreSQL (module docstring): ``sessions`` is the session factory the
    jobs use (its commits are fenced), ``lease_seconds`` the lease duration (renewed every third of it),
    ``registry`` where the lease metrics go, ``holder`` this process's name, ``clock`` a monotonic clock in
    seconds (injectable for tests)."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        lease_seconds: int,
        registry: CollectorRegistry,
        *,
        holder: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sessions = sessions
        self.lease_seconds = lease_seconds
        self.holder = holder or holder_name()
        self.clock = clock
        self._names: set[str] = set()
        self._deadlines: dict[str, float] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._on_taken: Callable[[str], None] | None = None
        self._held = Gauge(
            "gpufinops_job_lease_held",
            "1 while this process holds the job's lease and runs the job; 0 while another process does.",
            ["job"],
            registry=registry,
        )
        self._acquired = Counter(
            "gpufinops_job_lease_acquisitions",
            "Times this process took the job's lease: at start, after its holder's lease expired or was released.",
            ["job"],
            registry=registry,
        )
        event.listen(sessions, "before_commit", self._fence_running_job)

    def leased(self, name: str, function: Callable[P, R]) -> Callable[P, R | None]:
        """``function`` run under the lease ``name`` (taken by :meth:`renew` from then on): called while this
        process holds the lease, with its commits fenced; skipped (None) otherwise. A run whose commit finds the
        lease lost is logged at WARNING and returns None."""
        self._names.add(name)
        self._held.labels(name).set(0)
        self._acquired.labels(name)

        @functools.wraps(function)
        def run(*args: P.args, **kwargs: P.kwargs) -> R | None:
            if not self.holds(name):
                log.debug("%s: skipped, another scheduler holds its lease", name)
                return None
            running = _RUNNING.set((self, name))
            try:
                return function(*args, **kwargs)
            except LeaseLost:
                log.warning("%s: lease lost during the run; its work was rolled back, the lease holder redoes it", name)
                return None
            finally:
                _RUNNING.reset(running)

        return run

    def when_taken(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(name)`` from the renewal each time this process takes lease ``name`` from another
        holder or a free row (not when it renews its own): the scheduler runs the job then, instead of at its next
        interval. An error it raises is logged and the renewal goes on."""
        self._on_taken = callback

    def holds(self, name: str) -> bool:
        """Whether this process held lease ``name`` at its last renewal and that renewal has not run out (local,
        monotonic clock: no database round trip)."""
        with self._lock:
            return self._deadlines.get(name, float("-inf")) > self.clock()

    def renew(self) -> set[str]:
        """Renew this process's leases and take those that are free or expired, in one transaction; returns the
        names held now. Logs each lease taken (INFO, saying from whom) or lost (WARNING). Database errors raise."""
        names = sorted(self._names)
        if not names:
            return set()
        started = self.clock()
        now = _database_now()
        with self.sessions.begin() as session:
            before = dict(session.execute(select(JobLease.name, JobLease.holder).where(JobLease.name.in_(names))).all())
            rows = [{"name": n, "holder": self.holder, "acquired_at": now, "expires_at": now + self.lease_seconds}
                    for n in names]  # fmt: skip
            statement = insert(JobLease).values(rows)
            mine = JobLease.holder == statement.excluded.holder
            statement = statement.on_conflict_do_update(
                index_elements=[JobLease.name],
                set_={
                    "holder": statement.excluded.holder,
                    "acquired_at": case((mine, JobLease.acquired_at), else_=statement.excluded.acquired_at),
                    "expires_at": statement.excluded.expires_at,
                },
                where=or_(mine, JobLease.expires_at <= now),
            )
            held = set(session.scalars(statement.returning(JobLease.name)))
        deadline = started + self.lease_seconds - 1  # the database's expiry, less its rounding to whole seconds
        with self._lock:
            had = {name for name, until in self._deadlines.items() if until > self.clock()}
            self._deadlines = dict.fromkeys(held, deadline)
        for name in names:
            self._held.labels(name).set(1 if name in held else 0)
            if name in held and before.get(name) != self.holder:
                self._acquired.labels(name).inc()
                previous = before.get(name)
                log.info("%s: lease taken%s", name, f" over from {previous}" if previous else "")
                self._taken(name)
            elif name in had and name not in held:
                log.warning("%s: lease lost to %s; this process no longer runs the job", name, before.get(name))
        return held

    def start(self) -> None:
        """Renew once now (so that the jobs' first runs know which are this process's), then every third of the
        lease in a daemon thread until :meth:`release`. A failed renewal is logged and tried again next time; the
        leases it did not renew run out."""
        self._renew_logged()
        self._thread = threading.Thread(target=self._keep, name="job-leases", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop renewing and end this process's leases now (expiry set to the database's now), so another process
        takes them at its next renewal; a job still running here can no longer commit. A database error is logged.
        Releasing again does nothing more."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=self.lease_seconds)
        with self._lock:
            self._deadlines.clear()
        for name in self._names:
            self._held.labels(name).set(0)
        try:
            with self.sessions.begin() as session:
                mine = update(JobLease).where(JobLease.holder == self.holder)
                session.execute(mine.values(expires_at=_database_now()))
        except Exception:
            log.warning("job leases not released; they expire within %d s", self.lease_seconds, exc_info=True)
        if event.contains(self.sessions, "before_commit", self._fence_running_job):  # released once already: gone
            event.remove(self.sessions, "before_commit", self._fence_running_job)

    def check(self, session: Session, name: str) -> None:
        """Lock lease ``name``'s row in ``session``'s transaction if this process holds it and it has not expired
        (held until that transaction ends: no one can take the lease before it commits); :class:`LeaseLost` if not."""
        held = session.execute(
            select(JobLease.name)
            .where(JobLease.name == name, JobLease.holder == self.holder, JobLease.expires_at > _database_now())
            .with_for_update()
        ).first()
        if held is None:
            raise LeaseLost(f"{name}: this process ({self.holder}) no longer holds the job's lease")

    def _fence_running_job(self, session: Session) -> None:
        """``before_commit`` hook of the jobs' sessions: :meth:`check` the lease of the leased job running in this
        thread, if any (savepoints are left to their transaction's commit)."""
        running = _RUNNING.get()
        if running is not None and running[0] is self and not session.in_nested_transaction():
            self.check(session, running[1])

    def _taken(self, name: str) -> None:
        if self._on_taken is None:
            return
        try:
            self._on_taken(name)
        except Exception:
            log.warning("%s: lease taken, but its job could not be run at once; it runs at its next interval", name,
                        exc_info=True)  # fmt: skip

    def _keep(self) -> None:
        while not self._stopped.wait(self.lease_seconds / 3):
            self._renew_logged()

    def _renew_logged(self) -> None:
        try:
            self.renew()
        except Exception:
            log.warning("job leases not renewed; those held run out unless the next renewal succeeds", exc_info=True)


def job_leases(sessions: sessionmaker[Session], lease_seconds: int, registry: CollectorRegistry) -> JobLeases | None:
    """The job leases of a scheduler on ``sessions``' database: :class:`JobLeases` on PostgreSQL, None on SQLite
    (one process's database: the scheduler runs every job itself)."""
    with sessions() as session:
        dialect = session.get_bind().dialect.name
    return JobLeases(sessions, lease_seconds, registry) if dialect == "postgresql" else None
