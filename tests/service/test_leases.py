"""Job leases on PostgreSQL, two schedulers in one test process (each its own :class:`JobLeases` and holder name):
one lease holder per job, the other skips; a lease taken over once expired or released; a holder that lost its
lease mid-run commits nothing; the metrics say who holds what. SQLite has no leases."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from finops.db.models import JobLease, Watermark
from finops.service.leases import JobLeases, job_leases
from finops.timeutil import utc_now

postgresql = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)


@pytest.fixture
def schedulers(sessions: sessionmaker[Session]) -> Iterator[tuple[JobLeases, JobLeases]]:
    """Two schedulers' leases on one PostgreSQL database, with 30 s leases, renewed by the test only."""
    first = JobLeases(sessions, 30, CollectorRegistry(), holder="host-a:1:aaaa")
    second = JobLeases(sessions, 30, CollectorRegistry(), holder="host-b:2:bbbb")
    yield first, second
    first.release()
    second.release()


def _expire(sessions: sessionmaker[Session], name: str) -> None:
    """Make lease ``name`` run out now, as it does when its holder stops renewing."""
    with sessions.begin() as session:
        session.execute(update(JobLease).where(JobLease.name == name).values(expires_at=JobLease.expires_at - 60))


def _mark(sessions: sessionmaker[Session], name: str) -> str:
    """A job's work: one committed row (a watermark named ``name``)."""
    with sessions.begin() as session:
        session.add(Watermark(name=name, value=utc_now()))
    return name


def _marks(sessions: sessionmaker[Session]) -> list[str]:
    with sessions() as session:
        return list(session.scalars(select(Watermark.name).order_by(Watermark.name)))


@postgresql
def test_one_holder_runs_the_job_and_the_other_skips(sessions, schedulers) -> None:  # type: ignore[no-untyped-def]
    first, second = schedulers
    run_first, run_second = first.leased("rollup", _mark), second.leased("rollup", _mark)
    assert first.renew() == {"rollup"}
    assert second.renew() == set()
    assert run_first(sessions, "by-a") == "by-a"
    assert run_second(sessions, "by-b") is None
    assert _marks(sessions) == ["by-a"]
    assert first.renew() == {"rollup"}, "the holder renews its lease"
    with sessions() as session:
        lease = session.get(JobLease, "rollup")
    assert lease is not None and lease.holder == "host-a:1:aaaa"


@postgresql
def test_an_expired_lease_is_taken_over_and_its_old_holder_commits_nothing(sessions, schedulers, caplog) -> None:  # type: ignore[no-untyped-def]
    first, second = schedulers
    caplog.set_level(logging.INFO, logger="finops.service.leases")

    def work_while_the_lease_is_taken(sessions: sessionmaker[Session]) -> str:
        """Write, then (the holder stalled past its lease) another process takes the lease before the commit."""
        with sessions.begin() as session:
            session.add(Watermark(name="by-a", value=utc_now()))
            session.flush()
            taken: list[set[str]] = []
            # Another process's doing: a thread of its own, outside this job's fenced context.
            other = threading.Thread(target=lambda: (_expire(sessions, "rollup"), taken.append(second.renew())))
            other.start()
            other.join()
            assert taken == [{"rollup"}]
        return "committed"

    stalled = first.leased("rollup", work_while_the_lease_is_taken)
    second.leased("rollup", _mark)
    first.renew()
    assert stalled(sessions) is None, "the commit found the lease gone"
    assert _marks(sessions) == []
    assert "rollup: lease taken over from host-a:1:aaaa" in caplog.text
    assert "rollup: lease lost during the run" in caplog.text
    assert first.renew() == set()
    assert not first.holds("rollup") and second.holds("rollup")
    assert "rollup: lease lost to host-b:2:bbbb" in caplog.text


@postgresql
def test_a_released_lease_is_taken_at_the_next_renewal(sessions, schedulers) -> None:  # type: ignore[no-untyped-def]
    first, second = schedulers
    taken: list[str] = []
    second.when_taken(taken.append)
    for leases in schedulers:
        leases.leased("alert_delivery", _mark)
    first.renew()
    assert second.renew() == set()
    first.release()
    assert not first.holds("alert_delivery")
    assert second.renew() == {"alert_delivery"}
    assert second.renew() == {"alert_delivery"}
    assert taken == ["alert_delivery"], "told once, when taken; not at each renewal"
    assert second.leased("alert_delivery", _mark)(sessions, "by-b") == "by-b"


@postgresql
def test_metrics_say_which_process_holds_each_lease(sessions) -> None:  # type: ignore[no-untyped-def]
    registries = CollectorRegistry(), CollectorRegistry()
    first = JobLeases(sessions, 30, registries[0], holder="host-a:1:aaaa")
    second = JobLeases(sessions, 30, registries[1], holder="host-b:2:bbbb")
    try:
        for leases in (first, second):
            leases.leased("rollup", _mark)
        first.start()
        second.renew()
        held = [r.get_sample_value("gpufinops_job_lease_held", {"job": "rollup"}) for r in registries]
        taken = [r.get_sample_value("gpufinops_job_lease_acquisitions_total", {"job": "rollup"}) for r in registries]
        assert (held, taken) == ([1, 0], [1, 0])
        first.release()
        second.renew()
        held = [r.get_sample_value("gpufinops_job_lease_held", {"job": "rollup"}) for r in registries]
        taken = [r.get_sample_value("gpufinops_job_lease_acquisitions_total", {"job": "rollup"}) for r in registries]
        assert (held, taken) == ([0, 1], [1, 1])
    finally:
        second.release()


def test_sqlite_has_no_leases(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from finops.db.engine import make_engine, session_factory

    engine = make_engine(f"sqlite:///{tmp_path / 'one.sqlite'}")
    try:
        assert job_leases(session_factory(engine), 30, CollectorRegistry()) is None
    finally:
        engine.dispose()
