"""Edge cases of the incremental metering (:mod:`finops.ledger.metering`, :mod:`finops.ledger.metering_state`): each
test stores readings and holdings in steps through ingest, runs a rollup after some of them, then compares the
ledger and the team-hours, every column, with those of a cold rebuild of the same data (everything the ledger and
its metering keep removed, one rollup from an empty ledger up to the same ``until``), on both databases."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import select, text, update
from sqlalchemy.orm import Session, sessionmaker

from collector.contract.wire import GpuInfo, GpuSeries, IngestBatch
from finops.db.hours import mark_hours_dirty
from finops.db.ledger_tables import LedgerEntry, LedgerTeamHour
from finops.db.models import Allocation, Gpu, Team
from finops.ingest.readings import Ingestor
from finops.ledger import rollup as rollup_module
from finops.ledger.metering import ENERGY_LOOKBACK_SECONDS
from finops.ledger.metering_state import Arrivals
from finops.ledger.rollup import rollup
from finops.ledger.rollup_result import RollupResult
from finops.ledger.sql import LEDGER_COLUMNS
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import HOUR, from_epoch
from tests.support.holdings import hold

H100 = "NVIDIA H100 80GB HBM3"
T0 = int(datetime(2026, 10, 5, 10, tzinfo=UTC).timestamp())
STEP = 10
GPUS = 3
PRICING = Pricing(load_catalog(), PricingModel.ON_DEMAND)
STATE_TABLES = (
    "gpu_hour_metering", "metering_cursors", "metered_holdings", "reading_arrivals", "ledger", "ledger_team_hours",
    "ledger_dirty_hours",
)  # fmt: skip
"""What the ledger and its metering keep, removed before the cold rebuild."""

Energy = Callable[[int, int], float | None]


def utilization(gpu: int, ts: int) -> float:
    """A ratio with no short binary expansion, different per GPU and instant."""
    return ((ts // STEP) * 7919 + gpu * 104729) % 1000 / 1000


def counter(gpu: int, ts: int) -> float | None:
    """An energy counter running since long before T0: 350.123 J a second, 0.1 J more per GPU index."""
    return 1e7 + (ts - T0) * (350.123 + gpu / 10)


def activity(gpu: int, ts: int) -> float:
    """An SM activity ratio, different from the utilisation."""
    return utilization(gpu + 7, ts) / 2


class Fleet:
    """Node n1's GPUs 0..GPUS-1, their readings stored through ingest one transaction per call."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions
        self.ingestor = Ingestor()

    def store(
        self,
        instants: Iterable[int],
        gpus: Iterable[int] = range(GPUS),
        energy: Energy = counter,
        profiled: bool = False,
    ) -> None:
        """Readings of ``gpus`` at ``instants``, the energy counter's value by ``energy`` (None: not read), with SM
        activity when ``profiled``, committed in one ingest transaction."""
        times = sorted(instants)
        series = []
        for gpu in gpus:
            fields: dict[str, Any] = {
                "utilization_ratio": [utilization(gpu, ts) for ts in times],
                "energy_joules": [energy(gpu, ts) for ts in times],
            }
            if profiled:
                fields["sm_active_ratio"] = [activity(gpu, ts) for ts in times]
            series.append(GpuSeries(uuid=f"GPU-{gpu}", ts=times, **fields))
        infos = [GpuInfo(uuid=f"GPU-{gpu}", index=gpu, model=H100) for gpu in range(GPUS)]
        with self.sessions.begin() as session:
            self.ingestor.store(session, IngestBatch(node="n1", gpus=infos, series=series))

    def roll(self, until: int, **options: Any) -> None:
        """A rollup up to ``until``, committed."""
        with self.sessions.begin() as session:
            rollup(session, PRICING, until, **options)

    def gpu_ids(self) -> dict[int, int]:
        """GPU index -> ``gpus.id``."""
        with self.sessions() as session:
            return {g.gpu_index: g.id for g in session.scalars(select(Gpu))}

    def team(self) -> int:
        """The id of team ``alpha`` (made on first use)."""
        with self.sessions.begin() as session:
            found = session.scalar(select(Team.id).where(Team.name == "alpha"))
            if found is None:
                team = Team(name="alpha")
                session.add(team)
                session.flush()
                found = team.id
            return found

    def hold(self, gpu: int, name: str, start: int, end: int | None, share: tuple[int, int] = (1, 1)) -> int:
        """Job ``name`` of team alpha holding GPU index ``gpu`` over [start, end); its allocation id. The hours it
        overlaps up to ``end`` (or start + 2 h) are marked dirty, as a job import marks them."""
        team_id, gpu_id = self.team(), self.gpu_ids()[gpu]
        with self.sessions.begin() as session:
            team = session.get(Team, team_id)
            assert team is not None
            allocation = hold(session, team, gpu_id, name, start, end, share)
            stop = start + 2 * HOUR if end is None else end
            mark_hours_dirty(session, range(start - start % HOUR, stop, HOUR))
            return allocation.id

    def end_job(self, allocation_id: int, end: int, was: int) -> None:
        """Allocation ``allocation_id`` ends at ``end`` instead (its hours up to ``was`` marked dirty)."""
        with self.sessions.begin() as session:
            session.execute(update(Allocation).where(Allocation.id == allocation_id).values(end=from_epoch(end)))
            low = min(end, was)
            mark_hours_dirty(session, range(low - low % HOUR, max(end, was), HOUR))

    def snapshot(self) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """The ledger's rows and the team-hours, every column, in key order."""
        with self.sessions() as session:
            ledger_columns = [getattr(LedgerEntry, name) for name in LEDGER_COLUMNS]
            team_columns = list(LedgerTeamHour.__table__.columns)
            ledger = [tuple(r) for r in session.execute(select(*ledger_columns).order_by(*ledger_columns[:3]))]
            teams = [tuple(r) for r in session.execute(select(*team_columns).order_by(*team_columns[:2]))]
        return ledger, teams

    def assert_cold_rebuild_equal(self, until: int) -> list[tuple[Any, ...]]:
        """The ledger and team-hours equal those of a cold rebuild up to ``until``; returns the ledger's rows."""
        incremental = self.snapshot()
        with self.sessions.begin() as session:
            for table in STATE_TABLES:
                session.execute(text(f"DELETE FROM {table}"))
        self.roll(until)
        cold = self.snapshot()
        assert incremental[0] == cold[0]
        assert incremental[1] == cold[1]
        assert incremental[0], "the ledger has rows"
        return cold[0]


def ticks(start: int, stop: int) -> range:
    """Reading instants every STEP seconds in [start, stop)."""
    return range(start, stop, STEP)


@pytest.fixture
def fleet(sessions: sessionmaker[Session]) -> Fleet:
    return Fleet(sessions)


def test_energy_counter_reset_at_the_cursor(fleet: Fleet) -> None:
    """GPU 0's counter resets at the first reading after a rollup's cursor; GPU 1's first reading after the cursor
    has no counter value, its second is the reset."""
    reset = T0 + 1200

    def energy(gpu: int, ts: int) -> float | None:
        if gpu == 1 and ts == reset:
            return None
        since = reset + STEP * gpu  # the first value after the reset
        if gpu < 2 and ts >= since:
            return 1.5 + (ts - since) * 300.25
        return counter(gpu, ts)

    fleet.store(ticks(T0, reset), energy=energy)
    fleet.roll(reset)
    fleet.store(ticks(reset, T0 + 2400), energy=energy)
    fleet.roll(T0 + 2400 + 3)
    fleet.assert_cold_rebuild_equal(T0 + 2400 + 3)


def test_readings_without_a_counter_value_just_before_the_cursor(fleet: Fleet) -> None:
    """The readings just before a rollup's cursor carry no counter value: GPU 0's last, GPU 1's last two, GPU 2's
    for exactly the energy lookback, so that the first increment after the cursor spans them, or (GPU 2) not."""
    cursor = T0 + 1800
    silent = {0: cursor - STEP, 1: cursor - 2 * STEP, 2: cursor - ENERGY_LOOKBACK_SECONDS + STEP}

    def energy(gpu: int, ts: int) -> float | None:
        return None if silent[gpu] <= ts < cursor else counter(gpu, ts)

    fleet.store(ticks(T0 - HOUR, cursor), energy=energy)
    fleet.roll(cursor)
    fleet.store(ticks(cursor, T0 + HOUR + 600), energy=energy)
    fleet.roll(T0 + HOUR + 600)
    fleet.assert_cold_rebuild_equal(T0 + HOUR + 600)


def test_readings_on_hour_boundaries_and_at_until(fleet: Fleet) -> None:
    """Rollups up to an hour's start exactly, with readings at that instant (left for the next) and at the one
    before; the cursor's hour ends with the chunk."""
    fleet.store(ticks(T0, T0 + HOUR + 1))
    fleet.roll(T0 + HOUR)
    fleet.store(ticks(T0 + HOUR + STEP, T0 + 2 * HOUR + 1))
    fleet.roll(T0 + 2 * HOUR)
    fleet.roll(T0 + 2 * HOUR + 1)
    fleet.assert_cold_rebuild_equal(T0 + 2 * HOUR + 1)


def test_a_gap_longer_than_the_lookback_straddles_the_cursor(fleet: Fleet) -> None:
    """GPU 0 silent for longer than the energy lookback after the cursor, GPU 1 for just the lookback, GPU 2 for one
    second more: the first increment after the gap counts only within the lookback."""
    fleet.store(ticks(T0, T0 + 600))
    fleet.roll(T0 + 600)
    resume = T0 + 600 - STEP + ENERGY_LOOKBACK_SECONDS
    fleet.store(ticks(T0 + 600 - STEP + 2 * ENERGY_LOOKBACK_SECONDS, T0 + 3 * HOUR), gpus=[0])
    fleet.store([resume], gpus=[1])
    fleet.store([resume + 1], gpus=[2])
    fleet.roll(resume + 2)
    fleet.store(ticks(resume + STEP, T0 + 3 * HOUR), gpus=[1, 2])
    fleet.roll(T0 + 3 * HOUR)
    fleet.assert_cold_rebuild_equal(T0 + 3 * HOUR)


def test_jobs_starting_and_ending_between_rollups_in_one_hour(fleet: Fleet) -> None:
    """In one hour: a job on GPU 0 that starts after one rollup's cursor and ends before the next; one on GPU 1
    imported after its start was metered; one on GPU 2 whose end moves before the cursor; readings keep arriving."""
    fleet.store(ticks(T0, T0 + 900))
    running = fleet.hold(2, "running", T0 + 100, None)
    fleet.roll(T0 + 900)
    fleet.hold(0, "between", T0 + 1000, T0 + 1500)
    fleet.store(ticks(T0 + 900, T0 + 1800))
    fleet.roll(T0 + 1800)
    fleet.hold(1, "imported", T0 + 1200, T0 + 2500)
    fleet.end_job(running, T0 + 1700, T0 + 2 * HOUR)
    fleet.store(ticks(T0 + 1800, T0 + 2700))
    fleet.roll(T0 + 2700)
    fleet.store(ticks(T0 + 2700, T0 + HOUR + 600))
    fleet.roll(T0 + HOUR + 600)
    fleet.assert_cold_rebuild_equal(T0 + HOUR + 600)


def test_gpu_hours_turning_shared_between_rollups(fleet: Fleet) -> None:
    """GPU 0's hour turns shared when a MIG share is imported after its readings were metered; GPU 1's when a second
    job, time-sliced, starts after the cursor; GPU 2's stops being shared when the overlapping job is cut short."""
    fleet.store(ticks(T0, T0 + 1200))
    fleet.hold(0, "whole", T0, None)
    fleet.hold(1, "first", T0, None)
    overlapping = fleet.hold(2, "a", T0, None)
    fleet.hold(2, "b", T0 + 300, None)
    fleet.roll(T0 + 1200)
    fleet.hold(0, "mig", T0 + 600, T0 + 1800, share=(3, 7))
    fleet.hold(1, "sliced", T0 + 1500, T0 + 2000)
    fleet.end_job(overlapping, T0 + 200, T0 + 2 * HOUR)
    fleet.store(ticks(T0 + 1200, T0 + 2400))
    fleet.roll(T0 + 2400)
    fleet.store(ticks(T0 + 2400, T0 + HOUR + 300))
    fleet.roll(T0 + HOUR + 300)
    fleet.assert_cold_rebuild_equal(T0 + HOUR + 300)


def test_a_late_reading_older_than_every_kept_hour(fleet: Fleet) -> None:
    """After three hours were metered, readings of GPU 1 arrive for the first hour, and one before it."""
    fleet.store(ticks(T0, T0 + 3 * HOUR), gpus=[0, 2])
    fleet.store(ticks(T0 + 600, T0 + 3 * HOUR), gpus=[1])
    fleet.roll(T0 + 3 * HOUR)
    fleet.store(ticks(T0 + 100, T0 + 300), gpus=[1])
    fleet.roll(T0 + 3 * HOUR + 5)
    fleet.store([T0 + 5], gpus=[1])
    fleet.roll(T0 + 3 * HOUR + 5)
    fleet.assert_cold_rebuild_equal(T0 + 3 * HOUR + 5)


def test_two_rollups_with_the_same_until(fleet: Fleet) -> None:
    fleet.store(ticks(T0, T0 + 1800))
    fleet.roll(T0 + 1000)
    fleet.roll(T0 + 1000)
    fleet.store(ticks(T0 + 1800, T0 + 2000))
    fleet.roll(T0 + 2000)
    fleet.roll(T0 + 2000)
    fleet.assert_cold_rebuild_equal(T0 + 2000)


def test_profiled_readings_after_unprofiled_ones_in_one_hour(fleet: Fleet) -> None:
    """GPU-hours metered before profiling data starts, then profiled readings in the same hour, and unprofiled ones
    again after; a held GPU so that the activity reaches the ledger."""
    fleet.store(ticks(T0, T0 + 1200))
    fleet.hold(0, "profiled", T0, None)
    fleet.roll(T0 + 1200)
    fleet.store(ticks(T0 + 1200, T0 + 2400), profiled=True)
    fleet.roll(T0 + 2400)
    fleet.store(ticks(T0 + 2400, T0 + HOUR + 600))
    fleet.roll(T0 + HOUR + 600)
    fleet.assert_cold_rebuild_equal(T0 + HOUR + 600)


def test_a_rollup_with_an_earlier_until_than_the_last(fleet: Fleet) -> None:
    """A rollup up to an instant before the previous rollup's ``until`` (a rollup run by hand with ``--until``, a
    clock stepped back): the readings between the two were metered by the first, left out by the second."""
    fleet.store(ticks(T0, T0 + 3000))
    fleet.hold(1, "held", T0, None)
    fleet.roll(T0 + 3000)
    fleet.roll(T0 + 2400)
    fleet.store(ticks(T0 + 3000, T0 + HOUR + 600))
    fleet.roll(T0 + HOUR + 600)
    fleet.assert_cold_rebuild_equal(T0 + HOUR + 600)


def test_a_rollup_with_an_earlier_until_gives_the_ledger_up_to_it(fleet: Fleet) -> None:
    """Right after the rollup with the earlier ``until``, in the same hour, the ledger is a cold rebuild's up to it:
    the GPU-hours whose holdings did not change (GPUs 0 and 2, unallocated) are metered again too."""
    fleet.store(ticks(T0, T0 + 3000))
    fleet.hold(1, "held", T0, None)
    fleet.roll(T0 + 3000)
    fleet.roll(T0 + 2400)
    fleet.assert_cold_rebuild_equal(T0 + 2400)


def test_a_rollup_with_an_earlier_until_in_an_earlier_hour(fleet: Fleet) -> None:
    """The rows of the hour after the one the earlier ``until`` falls in, written by the rollup that went further, are
    gone: the ledger ends at ``until``, as a cold rebuild's does."""
    fleet.store(ticks(T0, T0 + HOUR + 600))
    fleet.roll(T0 + HOUR + 600)
    fleet.roll(T0 + 2400)
    fleet.assert_cold_rebuild_equal(T0 + 2400)


def test_a_rollup_with_an_earlier_until_in_an_earlier_hour_then_a_later_one(fleet: Fleet) -> None:
    fleet.store(ticks(T0, T0 + HOUR + 600))
    fleet.hold(1, "held", T0, None)
    fleet.roll(T0 + HOUR + 600)
    fleet.roll(T0 + 2400)
    fleet.store(ticks(T0 + HOUR + 600, T0 + HOUR + 900))
    fleet.roll(T0 + HOUR + 900)
    fleet.assert_cold_rebuild_equal(T0 + HOUR + 900)


def test_a_gpu_entering_service_mid_hour_between_rollups(fleet: Fleet) -> None:
    """GPU 2 first reports between two rollups of one hour, a job holding it from after its first reading; then a
    reading of it before that (a spool) moves its entry back within the hour."""
    fleet.store(ticks(T0, T0 + 900), gpus=[0, 1])
    fleet.roll(T0 + 900)
    fleet.store(ticks(T0 + 900, T0 + 1800), gpus=[0, 1])
    fleet.store(ticks(T0 + 1005, T0 + 1800), gpus=[2])
    fleet.hold(2, "new", T0 + 1200, None)
    fleet.roll(T0 + 1800)
    fleet.store(ticks(T0 + 1800, T0 + 2700))
    fleet.store([T0 + 905], gpus=[2])
    fleet.roll(T0 + 2700)
    fleet.assert_cold_rebuild_equal(T0 + 2700)


def test_a_gpu_first_seen_later_reports_readings_from_hours_before(fleet: Fleet) -> None:
    """GPU 2 first reports two hours after the others; later its readings of the first hour arrive, which moves its
    entry into service back two hours: the hour between, without readings, is in service too."""
    fleet.store(ticks(T0, T0 + 3 * HOUR), gpus=[0, 1])
    fleet.store(ticks(T0 + 2 * HOUR, T0 + 3 * HOUR), gpus=[2])
    fleet.roll(T0 + 3 * HOUR)
    fleet.store(ticks(T0 + 600, T0 + 1200), gpus=[2])
    fleet.roll(T0 + 3 * HOUR)
    fleet.assert_cold_rebuild_equal(T0 + 3 * HOUR)


def _committing_while_the_rollup_starts(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch, instants: range, until: int
) -> RollupResult:
    """A rollup up to ``until`` during which GPU 0's readings at ``instants`` are committed by another transaction,
    after the rollup chose its hours and before it meters (PostgreSQL; skips on SQLite, where nothing commits while a
    rollup holds the write lock)."""
    with fleet.sessions() as session:
        if session.connection().dialect.name != "postgresql":
            pytest.skip("SQLite: nothing commits while a rollup holds the write lock")
    original = Arrivals.capture
    committed: list[int] = []

    def capture(self: Arrivals, connection: Any) -> None:
        if not committed:
            committed.append(1)
            fleet.store(instants, gpus=[0])
        original(self, connection)

    with monkeypatch.context() as patched:
        patched.setattr(Arrivals, "capture", capture)
        with fleet.sessions.begin() as session:
            result = rollup(session, PRICING, until)
    assert committed
    return result


def test_readings_committed_while_a_rollup_starts_in_an_hour_it_does_not_rebuild(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL: GPU 0 silent for hours; its current readings are committed before a rollup, and its readings of
    an older hour (a spool) while the rollup starts, after it chose its hours and before it meters: the rollup
    does not meter them (their hour is not one of its) and its cursor moves past them, so the next rollup finds them
    late."""
    fleet.store(ticks(T0, T0 + 600))
    fleet.roll(T0 + 600)
    fleet.roll(T0 + 3 * HOUR)
    fleet.store(ticks(T0 + 3 * HOUR, T0 + 3 * HOUR + 600), gpus=[0])
    _committing_while_the_rollup_starts(fleet, monkeypatch, ticks(T0 + HOUR, T0 + HOUR + 600), T0 + 3 * HOUR + 600)
    with fleet.sessions.begin() as session:
        assert rollup(session, PRICING, T0 + 3 * HOUR + 700).late_gpus == 1
    fleet.assert_cold_rebuild_equal(T0 + 3 * HOUR + 700)


def test_readings_committed_while_a_rollup_starts_in_the_hour_it_meters(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL: GPU 0's readings of the current hour committed while a rollup starts are metered by it, and their
    record is settled with it: the next rollup finds nothing late and meters only what is new."""
    fleet.store(ticks(T0, T0 + 600))
    fleet.roll(T0 + 600)
    metered = _committing_while_the_rollup_starts(fleet, monkeypatch, ticks(T0 + 600, T0 + 900), T0 + 900)
    assert metered.readings_metered == 30
    fleet.store(ticks(T0 + 900, T0 + 1200))
    with fleet.sessions.begin() as session:
        after = rollup(session, PRICING, T0 + 1200)
    assert (after.late_gpus, after.readings_metered) == (0, 30 * GPUS)
    fleet.assert_cold_rebuild_equal(T0 + 1200)


def test_a_job_imported_into_an_hour_long_before_the_cursor(fleet: Fleet) -> None:
    """Hours after the cursor's are not read again when a job is imported into an older one; its hour alone is."""
    fleet.store(ticks(T0, T0 + 3 * HOUR + 600))
    fleet.roll(T0 + 3 * HOUR + 600)
    fleet.hold(0, "old", T0 + 1000, T0 + 2000)
    fleet.hold(1, "spanning", T0 + HOUR - 100, T0 + HOUR + 100)
    fleet.store(ticks(T0 + 3 * HOUR + 600, T0 + 3 * HOUR + 900))
    fleet.roll(T0 + 3 * HOUR + 900)
    fleet.assert_cold_rebuild_equal(T0 + 3 * HOUR + 900)


def test_a_late_reading_and_a_job_import_in_one_rollup(fleet: Fleet) -> None:
    """GPU 0's late readings in the hour before the one a job is imported into, on the same GPU."""
    fleet.store(ticks(T0, T0 + 600), gpus=[0])
    fleet.store(ticks(T0, T0 + 3 * HOUR), gpus=[1, 2])
    fleet.store(ticks(T0 + 900, T0 + 3 * HOUR), gpus=[0])
    fleet.roll(T0 + 3 * HOUR)
    fleet.store(ticks(T0 + 600, T0 + 900), gpus=[0])
    fleet.hold(0, "imported", T0 + HOUR + 300, T0 + HOUR + 1300)
    fleet.roll(T0 + 3 * HOUR + 1)
    fleet.assert_cold_rebuild_equal(T0 + 3 * HOUR + 1)


@pytest.mark.parametrize("most_hours", [1, 2])
def test_late_readings_rebuilt_a_few_hours_a_transaction(fleet: Fleet, most_hours: int) -> None:
    """The hours a late reading makes dirty rebuilt a few at a time (as the scheduler's rollup does, each part
    committed), while readings of the current hour keep arriving between the parts."""
    fleet.store(ticks(T0, T0 + 4 * HOUR + 60), gpus=[0, 2])
    fleet.store([*ticks(T0, T0 + 300), *ticks(T0 + 900, T0 + 4 * HOUR + 60)], gpus=[1])
    fleet.roll(T0 + 4 * HOUR + 60)
    fleet.store(ticks(T0 + 300, T0 + 900), gpus=[1])  # held back, late
    pending = True
    until = T0 + 4 * HOUR + 60
    while pending:
        until += 30
        fleet.store(ticks(until - 30, until))
        with fleet.sessions.begin() as session:
            pending = rollup(session, PRICING, until, most_hours=most_hours).pending_hours > 0
    fleet.assert_cold_rebuild_equal(until)


def test_a_backlog_rebuilt_in_parallel_chunks(fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    """A day and a half of readings after a rollup, rebuilt in one rollup by helper connections (chunks computed at
    once from what is committed), with a job imported into the first hours and energy missing across a chunk's
    start."""

    def energy(gpu: int, ts: int) -> float | None:
        return None if gpu == 2 and T0 + 12 * HOUR - 1200 <= ts < T0 + 12 * HOUR + 600 else counter(gpu, ts)

    fleet.store(ticks(T0, T0 + 1800), energy=energy)
    fleet.roll(T0 + 1800)
    fleet.hold(1, "early", T0 + 600, T0 + 2 * HOUR)
    for day_part in range(3):
        lo = T0 + 1800 + day_part * 12 * HOUR
        fleet.store(range(lo, lo + 12 * HOUR, 60), energy=energy)
    until = T0 + 1800 + 36 * HOUR
    elsewhere = rollup_module._chunks_built_elsewhere
    helped: list[int] = []

    def spied(*args: Any, **kwargs: Any) -> Any:
        helped.append(len(args[1]))
        return elsewhere(*args, **kwargs)

    monkeypatch.setattr(rollup_module, "_chunks_built_elsewhere", spied)
    fleet.roll(until, connections=4)
    assert helped and helped[0] >= 4, "the chunks were computed on helper connections"
    fleet.assert_cold_rebuild_equal(until)


def test_a_new_gpu_whose_first_readings_are_hours_old(fleet: Fleet) -> None:
    """GPU 2 first reports (a spool) readings of the first hour only, after the ledger was built three hours on: it
    is in service from then, every hour since, the hours without its readings too."""
    fleet.store(ticks(T0, T0 + 3 * HOUR + 600), gpus=[0, 1])
    fleet.roll(T0 + 3 * HOUR + 600)
    fleet.store(ticks(T0 + 600, T0 + 1200), gpus=[2])
    fleet.roll(T0 + 3 * HOUR + 600)
    fleet.assert_cold_rebuild_equal(T0 + 3 * HOUR + 600)
