"""Placement of job allocations on physical GPUs: shares, first-fit, and the collectors' job map."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from fractions import Fraction

import pytest
from sqlalchemy import func, select

from collector.contract.wire import IngestBatch
from finops.db.ledger_tables import DirtyHour, LedgerEntry
from finops.db.models import Allocation, Gpu, Job, Node
from finops.ingest.readings import Ingestor
from finops.jobs.gpu_calendar import OPEN_END, Booking, GpuCalendar, Unit
from finops.jobs.job_map import reconcile_job_map
from finops.jobs.mig import gpu_slices, mig_share, parse_profile
from finops.jobs.placement import PlacementRequest, job_keys, place_jobs
from finops.jobs.slurm_import import import_sacct
from finops.timeutil import HOUR, to_epoch

T0 = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)
H100 = "NVIDIA H100 80GB HBM3"


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S")


def _sacct(job: int, start: datetime, end: datetime | None, gpus: int, node: str = "n1", tres: str = "") -> str:
    state = "RUNNING" if end is None else "COMPLETED"
    alloc = tres or f"gres/gpu={gpus}"
    stop = "Unknown" if end is None else _stamp(end)
    return f"{job}|{job}|c|gpu|acct|ann|{_stamp(start)}|{_stamp(start)}|{stop}|01:00:00|{state}|{alloc}|{node}|x"


def _ingest(session, node: str, readings: dict[int, str | None], start: datetime, minutes: int) -> None:  # type: ignore[no-untyped-def]
    """Per-minute readings of GPUs 0..7 of ``node`` from ``start``; GPU i carries job id ``readings.get(i)``."""
    gpus = [{"uuid": f"GPU-{node}-{i}", "index": i, "model": H100} for i in range(8)]
    samples = [
        {
            "uuid": f"GPU-{node}-{i}",
            "ts": start + timedelta(minutes=m),
            "utilization_ratio": 0.5,
            "job_id": readings.get(i),
        }
        for m in range(minutes)
        for i in range(8)
    ]
    Ingestor().store(session, IngestBatch.model_validate({"node": node, "gpus": gpus, "samples": samples}))


def _placed(session, job_id: str) -> list[int]:  # type: ignore[no-untyped-def]
    return sorted(
        session.scalars(
            select(Gpu.gpu_index)
            .join(Allocation, Allocation.gpu_id == Gpu.id)
            .join(Job, Job.id == Allocation.job_pk)
            .where(Job.job_id == job_id)
        )
    )


# --- MIG shares --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("profile", "model", "share"),
    [
        ("1g.10gb", H100, Fraction(1, 7)),
        ("3g.40gb", H100, Fraction(3, 7)),
        ("7g.80gb", H100, Fraction(1)),
        ("1g.20gb", H100, Fraction(1, 7)),  # compute slices, not memory
        ("1g.10gb.me", H100, Fraction(1, 7)),  # the device plugin writes +me as .me
        ("1g.18gb", "NVIDIA H200", Fraction(1, 7)),
        ("1g.5gb", "NVIDIA A100-SXM4-40GB", Fraction(1, 7)),
        ("1g.6gb", "NVIDIA A30", Fraction(1, 4)),
        ("2g.12gb", "NVIDIA-A30", Fraction(1, 2)),  # GPU feature discovery's label spelling
        ("1g.24gb", "NVIDIA RTX PRO 6000 Blackwell Server Edition", Fraction(1, 4)),
        ("3g.40gb", None, Fraction(3, 7)),  # model unknown: the profile names an A100/H100 80GB slice
        ("4g.24gb", None, Fraction(1)),  # A30
    ],
)
def test_mig_share_is_compute_slices_over_the_gpus(profile: str, model: str | None, share: Fraction) -> None:
    assert mig_share(profile, model) == share


@pytest.mark.parametrize(
    ("profile", "model", "message"),
    [
        ("1c.3g.40gb", H100, "is not a MIG profile"),
        ("gpu", H100, "is not a MIG profile"),
        ("7g.80gb", "NVIDIA A30", "has 7 compute slices; GPU model 'NVIDIA A30' has 4"),
        ("1g.24gb", None, "number of compute slices is unknown"),  # H100 94GB (7) or RTX PRO 6000 (4)
        ("1g.99gb", "NVIDIA B300", "on GPU model .NVIDIA B300.: the GPU.s number of compute slices is unknown"),
    ],
)
def test_mig_share_errors(profile: str, model: str | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        mig_share(profile, model)


def test_profile_and_slices() -> None:
    assert parse_profile("1g.10gb+me") == (1, "1g.10gb")
    assert gpu_slices("NVIDIA GH200 480GB") == 7
    assert gpu_slices("NVIDIA L40S") is None


# --- the calendar ------------------------------------------------------------------------------------------


def _booking(start: int, end: int, share: Fraction = Fraction(1)) -> Booking:
    return Booking(start, end, share, job_pk=1, keys=frozenset())


def test_calendar_whole_gpu_needs_it_free_and_shares_add_up_to_one() -> None:
    calendar = GpuCalendar(Gpu(id=1, node_id=1, gpu_index=0, model=H100))
    for _ in range(3):
        calendar.book(_booking(0, 100, Fraction(2, 7)))
    assert calendar.held(0, 100) == Fraction(6, 7)
    assert calendar.fits(0, 100, Fraction(1, 7))
    assert not calendar.fits(50, 60, Fraction(2, 7))
    assert not calendar.fits(99, 200, Fraction(1))
    assert calendar.fits(100, 200, Fraction(1))  # half-open: free from 100
    calendar.book(_booking(100, OPEN_END))
    assert not calendar.fits(10**9, 10**9 + 1, Fraction(1, 7))
    # Shares that never overlap in time do not add up.
    other = GpuCalendar(Gpu(id=2, node_id=1, gpu_index=1, model=H100))
    other.book(_booking(0, 10, Fraction(4, 7)))
    other.book(_booking(10, 20, Fraction(4, 7)))
    assert other.held(0, 20) == Fraction(4, 7)
    assert other.fits(5, 15, Fraction(3, 7)) and not other.fits(5, 15, Fraction(4, 7))


def test_calendar_remove_keeps_lookups_right() -> None:
    calendar = GpuCalendar(Gpu(id=1, node_id=1, gpu_index=0, model=H100))
    long = _booking(0, 1000)
    calendar.book(long)
    calendar.book(_booking(2000, 3000))
    assert not calendar.fits(500, 600, Fraction(1))
    calendar.remove(long)
    assert calendar.fits(500, 600, Fraction(1))
    assert not calendar.fits(2500, 2600, Fraction(1))


# --- placing jobs ------------------------------------------------------------------------------------------


def _pod_request(session, name: str, start: datetime, units: list[Unit], node: str = "m1") -> PlacementRequest:  # type: ignore[no-untyped-def]
    job = Job(
        scheduler="kubernetes", cluster="k", job_id=f"ns/{name}", job_id_raw=f"uid-{name}", user="", account="ns",
        partition="", name=name, state="Running", start=start, gpus=len(units), node_list=node, team_id=_team(session),
    )  # fmt: skip
    session.add(job)
    session.flush()
    return PlacementRequest(
        job.id, to_epoch(start), None, [(node, units)], H100, job_keys("kubernetes", job.job_id, job.job_id_raw)
    )


def _team(session) -> int:  # type: ignore[no-untyped-def]
    from finops.jobs.teams import team_by_name

    return team_by_name(session, "t").id


def test_mig_instances_of_several_pods_share_one_gpu(sessions) -> None:  # type: ignore[no-untyped-def]
    slice_ = Unit(Fraction(1, 7), "1g.10gb")
    big = Unit(Fraction(3, 7), "3g.40gb")
    with sessions.begin() as session:
        requests = [_pod_request(session, f"p{i}", T0, [slice_]) for i in range(4)]
        requests.append(_pod_request(session, "big", T0, [big]))
        requests.append(_pod_request(session, "whole", T0, [Unit()]))
        requests.append(_pod_request(session, "late", T0 + timedelta(hours=1), [big]))
        result = place_jobs(session, requests)
        rows = session.execute(
            select(Job.name, Gpu.gpu_index, Allocation.share_num, Allocation.share_den, Allocation.mig_profile)
            .join(Allocation, Allocation.job_pk == Job.id)
            .join(Gpu, Gpu.id == Allocation.gpu_id)
        ).all()
    assert result.allocations == 7
    placed = {name: (index, Fraction(num, den), profile) for name, index, num, den, profile in rows}
    # Four 1/7 slices and a 3/7 slice fill GPU 0 to 7/7; the whole GPU and the later 3/7 need other GPUs.
    assert {placed[f"p{i}"] for i in range(4)} == {(0, Fraction(1, 7), "1g.10gb")}
    assert placed["big"] == (0, Fraction(3, 7), "3g.40gb")
    assert placed["whole"] == (1, Fraction(1), None)
    assert placed["late"] == (2, Fraction(3, 7), "3g.40gb")


def test_slurm_mig_gres_type_allocates_a_share(sessions) -> None:  # type: ignore[no-untyped-def]
    line = _sacct(70, T0, None, 2, tres="gres/gpu:3g.40gb=2,gres/gpu=2")
    with sessions.begin() as session:
        import_sacct(session, [line], source="s")
        rows = session.execute(select(Allocation.share_num, Allocation.share_den, Allocation.mig_profile)).all()
        indices = _placed(session, "70")
    # Two 3/7 instances fit on one (placeholder) GPU.
    assert sorted(rows) == [(3, 7, "3g.40gb"), (3, 7, "3g.40gb")]
    assert indices == [0, 0]


def test_samples_naming_gpus_4_to_7_place_the_job_there(sessions) -> None:  # type: ignore[no-untyped-def]
    with sessions.begin() as session:
        _ingest(session, "n1", {i: "501" for i in range(4, 8)}, T0, 30)
        result = import_sacct(
            session, [_sacct(501, T0, T0 + timedelta(minutes=30), 4), _sacct(502, T0, None, 4)], source="s"
        )
        assert result.errors == []
        assert _placed(session, "501") == [4, 5, 6, 7]
        assert _placed(session, "502") == [0, 1, 2, 3]  # first-fit around it


def test_a_job_with_fewer_observed_gpus_gets_the_rest_first_fit(sessions) -> None:  # type: ignore[no-untyped-def]
    # The cgroup job map only names GPUs running one of the job's processes: two of the job's four here.
    with sessions.begin() as session:
        _ingest(session, "n1", {6: "601", 7: "601"}, T0, 10)
        import_sacct(session, [_sacct(601, T0, T0 + timedelta(minutes=10), 4)], source="s")
        assert _placed(session, "601") == [0, 1, 6, 7]


def test_samples_outside_the_jobs_interval_do_not_count(sessions) -> None:  # type: ignore[no-untyped-def]
    with sessions.begin() as session:
        _ingest(session, "n1", {5: "701"}, T0 + timedelta(hours=2), 10)  # job id reused later, not this run
        import_sacct(session, [_sacct(701, T0, T0 + timedelta(hours=1), 1)], source="s")
        assert _placed(session, "701") == [0]


def test_late_samples_re_place_the_job_and_displace_the_first_fit_one(sessions) -> None:  # type: ignore[no-untyped-def]
    end = T0 + timedelta(minutes=30)
    with sessions.begin() as session:
        # Imported before any sample arrived: first-fit puts 801 on 0-3 and 802 on 4-7.
        import_sacct(session, [_sacct(801, T0, end, 4), _sacct(802, T0, end, 4)], source="s")
        assert (_placed(session, "801"), _placed(session, "802")) == ([0, 1, 2, 3], [4, 5, 6, 7])
        session.execute(DirtyHour.__table__.delete())
        # Then the collector reports 801 on GPUs 4-7; 802's processes are not seen (idle).
        _ingest(session, "n1", {i: "801" for i in range(4, 8)}, T0, 30)
        moved = reconcile_job_map(session, _windows(session, to_epoch(T0), to_epoch(T0) + 2 * HOUR))
        assert moved == 1
        assert _placed(session, "801") == [4, 5, 6, 7]
        assert _placed(session, "802") == [0, 1, 2, 3]
        dirty = {to_epoch(h) for h in session.scalars(select(DirtyHour.hour))}
        assert to_epoch(T0) in dirty
        # Agreeing now: nothing moves again.
        assert reconcile_job_map(session, _windows(session, to_epoch(T0), to_epoch(T0) + 2 * HOUR)) == 0
        # Both jobs still hold 4 GPUs each for their whole interval, nothing overlapping.
        rows = session.execute(select(Allocation.gpu_id, Allocation.start, Allocation.end)).all()
    assert len(rows) == 8 and len({gpu for gpu, _, _ in rows}) == 8
    assert {(start, stop) for _, start, stop in rows} == {(T0, end)}


@pytest.mark.parametrize("length", [60, 24 * HOUR], ids=["by key", "a day: by scan"])
def test_reconcile_reads_only_the_samples_in_its_windows(sessions, length: int) -> None:  # type: ignore[no-untyped-def]
    with sessions.begin() as session:
        import_sacct(session, [_sacct(901, T0, T0 + timedelta(minutes=30), 1)], source="s")
        _ingest(session, "n1", {3: "901"}, T0, 30)
        assert _placed(session, "901") == [0]  # imported before its samples: first-fit
        later = to_epoch(T0) + 30 * 60  # after its last sample (minute 29)
        assert reconcile_job_map(session, _windows(session, later, later + length)) == 0
        assert reconcile_job_map(session, {}) == 0
        assert _placed(session, "901") == [0]
        assert reconcile_job_map(session, _windows(session, later - length, later)) == 1  # its last sample
        assert _placed(session, "901") == [3]


def _windows(session, start: int, end: int) -> dict[int, tuple[int, int]]:  # type: ignore[no-untyped-def]
    """Every GPU's window [start, end), as the scheduled rollup gives those it metered."""
    return {gpu_id: (start, end) for gpu_id in session.scalars(select(Gpu.id))}


def test_pods_are_matched_by_uid_and_by_namespace_name(sessions) -> None:  # type: ignore[no-untyped-def]
    with sessions.begin() as session:
        _ingest(session, "m1", {2: "pod/uid-a", 5: "ns/b"}, T0, 10)
        a = _pod_request(session, "a", T0, [Unit()])
        b = _pod_request(session, "b", T0, [Unit(Fraction(1, 7), "1g.10gb")])
        result = place_jobs(session, [a, b])
        assert result.observed == 2
        assert _placed(session, "ns/a") == [2]
        assert _placed(session, "ns/b") == [5]
        node = session.scalars(select(Node).where(Node.hostname == "m1")).one()
        assert node.hostname == "m1"


def test_the_scheduled_rollup_moves_jobs_onto_the_gpus_their_samples_name(sessions) -> None:  # type: ignore[no-untyped-def]
    from finops.analysis.idle import IdlePolicy
    from finops.pricing.catalog import Pricing, PricingModel, load_catalog
    from finops.service.scheduler import run_rollup

    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    with sessions.begin() as session:
        import_sacct(session, [_sacct(951, start, start + timedelta(minutes=30), 2)], source="s")
        _ingest(session, "n1", {5: "951", 6: "951"}, start, 30)
    run_rollup(sessions, Pricing(load_catalog(), PricingModel.ON_DEMAND), IdlePolicy())
    with sessions() as session:
        assert _placed(session, "951") == [5, 6]
        # The same run rebuilt the job's hour with the new placement: its ledger rows are on GPUs 5 and 6.
        costed = session.execute(
            select(Gpu.gpu_index, func.sum(LedgerEntry.seconds))
            .join(LedgerEntry, LedgerEntry.gpu_id == Gpu.id)
            .join(Job, Job.id == LedgerEntry.job_pk)
            .where(Job.job_id == "951")
            .group_by(Gpu.gpu_index)
        ).all()
        assert sorted(costed) == [(5, 1800), (6, 1800)]


def test_metered_windows_are_the_readings_each_rollup_metered_new(sessions) -> None:  # type: ignore[no-untyped-def]
    from finops.ledger.metering_state import metered_windows
    from finops.ledger.rollup import rollup
    from finops.pricing.catalog import Pricing, PricingModel, load_catalog

    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    t0 = to_epoch(T0)

    def windows(until: int) -> set[tuple[int, int]]:
        cursors: dict[int, int] = {}
        rollup(session, pricing, until, cursors_before=cursors)
        found = metered_windows(session, cursors, t0)
        assert not found or len(found) == 8
        return set(found.values())

    with sessions.begin() as session:
        _ingest(session, "n1", {}, T0, 30)  # minutes 0-29
        assert windows(t0 + 30 * 60) == {(t0, t0 + 29 * 60 + 1)}
        _ingest(session, "n1", {}, T0 + timedelta(minutes=30), 15)
        assert windows(t0 + 45 * 60) == {(t0 + 29 * 60 + 1, t0 + 44 * 60 + 1)}
        assert windows(t0 + 50 * 60) == set()  # nothing new
        # A late reading (10:30, before every cursor) moves the cursors back to the hour's start: metered from there.
        _ingest(session, "n1", {}, T0 + timedelta(minutes=10, seconds=30), 1)
        assert windows(t0 + 55 * 60) == {(t0, t0 + 44 * 60 + 1)}


def test_a_backlog_moves_the_jobs_of_the_hours_a_second_rollup_of_a_transaction_meters(sessions, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Three days of backlog, rebuilt two days a transaction: the first transaction moves job 961 (its hour is the
    backlog's first), so it rolls up again, which meters the next hours too, job 962's among them."""
    from finops.analysis.idle import IdlePolicy
    from finops.pricing.catalog import Pricing, PricingModel, load_catalog
    from finops.service import scheduler

    start = T0
    later = start + timedelta(hours=60)
    monkeypatch.setattr(scheduler, "utc_now", lambda: start + timedelta(hours=72, minutes=30))
    with sessions.begin() as session:
        import_sacct(session, [_sacct(961, start, start + timedelta(minutes=30), 2)], source="s")
        import_sacct(session, [_sacct(962, later, later + timedelta(minutes=30), 1)], source="s")
        assert (_placed(session, "961"), _placed(session, "962")) == ([0, 1], [0])  # first-fit: no samples yet
        _ingest(session, "n1", {5: "961", 6: "961"}, start, 30)
        _ingest(session, "n1", {3: "962"}, later, 30)
    scheduler.run_rollup(sessions, Pricing(load_catalog(), PricingModel.ON_DEMAND), IdlePolicy())
    with sessions() as session:
        assert _placed(session, "961") == [5, 6]
        assert _placed(session, "962") == [3]


def test_a_rollup_that_moves_a_job_counts_each_hour_and_gpu_second_once(sessions) -> None:  # type: ignore[no-untyped-def]
    """The hours the move makes the transaction rebuild again are in the result once, as in the ledger."""
    from finops.analysis.idle import IdlePolicy
    from finops.pricing.catalog import Pricing, PricingModel, load_catalog
    from finops.service.scheduler import run_rollup

    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    with sessions.begin() as session:
        import_sacct(session, [_sacct(971, start, start + timedelta(minutes=30), 2)], source="s")
        _ingest(session, "n1", {5: "971", 6: "971"}, start, 30)
    built, _ = run_rollup(sessions, Pricing(load_catalog(), PricingModel.ON_DEMAND), IdlePolicy())
    with sessions() as session:
        assert _placed(session, "971") == [5, 6]
        hours = session.scalar(select(func.count(func.distinct(LedgerEntry.hour))))
        seconds = session.scalar(select(func.sum(LedgerEntry.seconds)))
    assert (built.hours, built.priced_gpu_seconds) == (hours, seconds)


def test_readings_committed_between_a_transaction_s_two_rollups_are_reconciled(sessions, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Job 991's reading, in the current hour (whose dirty mark the rollup keeps, so an ingest of it does not wait for
    the rollup), is committed after the transaction's first rollup metered the hour and reconciled job 981 onto the
    GPUs its readings name: the second rollup, which rebuilds 981's hour and the current one, meters it as new, so
    it is reconciled too."""
    from sqlalchemy import text

    from finops.analysis.idle import IdlePolicy
    from finops.pricing.catalog import Pricing, PricingModel, load_catalog
    from finops.service import scheduler

    if sessions.kw["bind"].dialect.name != "postgresql":
        pytest.skip("SQLite commits nothing while the rollup holds its write lock")
    later = T0 + timedelta(hours=2)  # the current hour: the rollups run at 12:30
    start = later - timedelta(hours=2)
    monkeypatch.setattr(scheduler, "utc_now", lambda: later + timedelta(minutes=30))
    with sessions.begin() as session:
        import_sacct(session, [_sacct(981, start, start + timedelta(minutes=30), 2)], source="s")
        import_sacct(session, [_sacct(991, later, later + timedelta(minutes=30), 1)], source="s")
        assert (_placed(session, "981"), _placed(session, "991")) == ([0, 1], [0])
        _ingest(session, "n1", {5: "981", 6: "981"}, start, 30)
    reconcile = scheduler.reconcile_job_map
    calls = []

    def reconcile_then_ingest(session, windows):  # type: ignore[no-untyped-def]
        moved = reconcile(session, windows)
        calls.append(moved)
        if len(calls) == 1:
            with sessions.begin() as other:
                other.execute(text("SET LOCAL lock_timeout = '10s'"))
                _ingest(other, "n1", {3: "991"}, later, 1)
        return moved

    monkeypatch.setattr(scheduler, "reconcile_job_map", reconcile_then_ingest)
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    scheduler.run_rollup(sessions, pricing, IdlePolicy())
    monkeypatch.setattr(scheduler, "reconcile_job_map", reconcile)
    scheduler.run_rollup(sessions, pricing, IdlePolicy())  # the next one: its hour rebuilt
    with sessions() as session:
        assert _placed(session, "981") == [5, 6]
        assert _placed(session, "991") == [3]
        costed = session.execute(
            select(Gpu.gpu_index)
            .join(LedgerEntry, LedgerEntry.gpu_id == Gpu.id)
            .join(Job, Job.id == LedgerEntry.job_pk)
            .where(Job.job_id == "991")
        ).all()
        assert {gpu for (gpu,) in costed} == {3}
