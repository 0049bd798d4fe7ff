"""The ledger on the hand-computed slice (tests/support/scenario.py), on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from sqlalchemy import select

from finops.analysis.idle import IdlePolicy, detect_idle, list_episodes
from finops.analysis.report import cost_report
from finops.db.ledger_tables import LedgerEntry
from finops.db.models import UNALLOCATED_TEAM, UNMAPPED_TEAM
from finops.jobs.teams import map_account
from finops.ledger.costmodel import QUANTUM, capacity_cost
from finops.ledger.rollup import rollup
from finops.pricing.catalog import PricingModel
from finops.timeutil import to_epoch
from tests.support import scenario


def test_team_costs_match_the_hand_computation(loaded) -> None:  # type: ignore[no-untyped-def]
    sessions, t0, r, _ = loaded
    with sessions() as session:
        rows = {row.key: row for row in cost_report(session, t0, t0 + timedelta(hours=2), "team")}
    assert set(rows) == {"alpha", UNMAPPED_TEAM, UNALLOCATED_TEAM}
    half = Decimal("0.5")
    expected = {
        "alpha": (5400, r * Decimal("1.5"), r, r * half),
        UNMAPPED_TEAM: (5400, r * Decimal("1.5"), r * Decimal("0.75"), r * Decimal("0.75")),
        UNALLOCATED_TEAM: (3600, r, Decimal(0), Decimal(0)),
    }
    for team, (seconds, allocated, used, idle) in expected.items():
        row = rows[team]
        assert row.allocated_gpu_seconds == seconds
        assert abs(row.allocated_cost - allocated) <= 2 * QUANTUM
        assert abs(row.used_cost - used) <= 2 * QUANTUM
        assert abs(row.idle_cost - idle) <= 2 * QUANTUM
    assert sum(row.allocated_cost for row in rows.values()) == (4 * r).quantize(QUANTUM)
    assert rows["alpha"].used_gpu_seconds == pytest.approx(3600)
    assert rows["alpha"].idle_gpu_seconds == pytest.approx(1800)
    assert rows[UNMAPPED_TEAM].used_gpu_seconds == pytest.approx(2700)
    total_joules = sum(row.energy_joules for row in rows.values())
    assert total_joules == pytest.approx(2 * 119 * 36_000)


def test_team_report_from_team_hours_equals_the_ledgers_for_every_team_filter(loaded) -> None:  # type: ignore[no-untyped-def]
    """By team, the report reads the team-hours; with a cluster filter naming the slice's only cluster (every held
    row) it reads the ledger's rows: both give the same held rows, unfiltered and for each team's filter."""
    from finops.db.models import Job

    sessions, t0, _, _ = loaded
    window = (t0, t0 + timedelta(hours=2))
    with sessions() as session:
        (cluster,) = set(session.scalars(select(Job.cluster)))
        whole = cost_report(session, *window, "team")
        for team in [None, *(row.key for row in whole)]:
            from_team_hours = cost_report(session, *window, "team", team=team)
            from_ledger = cost_report(session, *window, "team", team=team, cluster=cluster)
            held = [row for row in from_team_hours if row.key != UNALLOCATED_TEAM]
            assert held == [row for row in from_ledger if row.key != UNALLOCATED_TEAM]
            assert from_team_hours == (whole if team is None else [row for row in whole if row.key == team])


def test_job_report_names_jobs_and_owners(loaded) -> None:  # type: ignore[no-untyped-def]
    sessions, t0, _, _ = loaded
    with sessions() as session:
        rows = {row.key: row for row in cost_report(session, t0, t0 + timedelta(hours=2), "job")}
    assert set(rows) == {"501", "502", UNALLOCATED_TEAM}
    assert (rows["501"].team, rows["501"].user) == ("alpha", "alice")
    assert (rows["502"].team, rows["502"].user) == (UNMAPPED_TEAM, "bob")


def test_report_table_keeps_job_ids_as_they_are_and_money_in_cents(loaded) -> None:  # type: ignore[no-untyped-def]
    from finops.analysis.report_format import report_table

    sessions, t0, r, _ = loaded
    with sessions() as session:
        rows = cost_report(session, t0, t0 + timedelta(hours=2), "job")
    lines = report_table(rows, "job").splitlines()
    first_cells = [line.split()[0] for line in lines[2:]]
    assert {"501", "502", UNALLOCATED_TEAM, "TOTAL"} == set(first_cells)
    total = lines[-1].split()
    assert total[5] == f"{(4 * r).quantize(Decimal('0.01')):,.2f}"


def test_rebuilding_changes_nothing(loaded) -> None:  # type: ignore[no-untyped-def]
    sessions, t0, _, pricing = loaded
    window = (t0, t0 + timedelta(hours=2))
    with sessions() as session:
        before = cost_report(session, *window, "team")
    with sessions.begin() as session:
        from finops.db.hours import mark_hours_dirty

        mark_hours_dirty(session, [to_epoch(t0), to_epoch(t0) + 3600])
        rollup(session, pricing, to_epoch(t0 + timedelta(hours=2)))
    with sessions() as session:
        assert cost_report(session, *window, "team") == before


def test_two_rollups_at_once_write_each_row_once(loaded) -> None:  # type: ignore[no-untyped-def]
    """Two rollups of the same dirty hours started together (two processes' schedulers) leave the ledger as one
    rollup does: the second waits for the first (PostgreSQL: advisory lock; SQLite: the write lock)."""
    import threading

    from finops.db.hours import mark_hours_dirty

    sessions, t0, _, pricing = loaded
    with sessions() as session:
        before = sorted(session.execute(select(LedgerEntry.hour, LedgerEntry.gpu_id, LedgerEntry.team_id,
                                               LedgerEntry.allocated_cost)).all())  # fmt: skip
    with sessions.begin() as session:
        mark_hours_dirty(session, [to_epoch(t0), to_epoch(t0) + 3600])
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            start.wait()
            with sessions.begin() as session:
                rollup(session, pricing, to_epoch(t0 + timedelta(hours=2)))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    with sessions() as session:
        after = sorted(session.execute(select(LedgerEntry.hour, LedgerEntry.gpu_id, LedgerEntry.team_id,
                                              LedgerEntry.allocated_cost)).all())  # fmt: skip
    assert after == before


def test_remapping_an_account_moves_its_cost(loaded) -> None:  # type: ignore[no-untyped-def]
    sessions, t0, r, pricing = loaded
    with sessions.begin() as session:
        assert map_account(session, "acct-b", "beta", actor="system:test") == 1
        rollup(session, pricing, to_epoch(t0 + timedelta(hours=2)))
    with sessions() as session:
        rows = {row.key: row for row in cost_report(session, t0, t0 + timedelta(hours=2), "team")}
    assert UNMAPPED_TEAM not in rows
    assert abs(rows["beta"].allocated_cost - r * Decimal("1.5")) <= 2 * QUANTUM


def test_idle_episode_found_on_the_sliding_window(loaded) -> None:  # type: ignore[no-untyped-def]
    sessions, t0, r, pricing = loaded
    with sessions.begin() as session:
        stored = detect_idle(session, t0, t0 + timedelta(hours=2), IdlePolicy(), pricing)
        again = detect_idle(session, t0, t0 + timedelta(hours=2), IdlePolicy(), pricing)
    assert stored == again == 1
    with sessions() as session:
        (episode,) = list_episodes(session, t0, t0 + timedelta(hours=2))
    # GPU 0 reads 0 % from T+60 min; job 501 holds it until T+90 min: a 30-minute episode, memory released.
    assert (episode.job_id, episode.gpu_index, episode.team) == ("501", 0, "alpha")
    assert (episode.start, episode.end) == (t0 + timedelta(minutes=60), t0 + timedelta(minutes=90))
    assert not episode.memory_held
    assert episode.cost == (r / 2).quantize(QUANTUM)


def test_idle_episode_is_costed_under_its_nodes_pricing_model(loaded) -> None:  # type: ignore[no-untyped-def]
    """A pricing rule putting the slice's node on spot prices its idle episode at the spot rate."""
    from finops.db.models import Node
    from finops.pricing.rules import set_pricing_rule

    sessions, t0, _, pricing = loaded
    spot = pricing.catalog.rate(scenario.MODEL, PricingModel.SPOT, t0)
    assert spot != pricing.catalog.rate(scenario.MODEL, PricingModel.ON_DEMAND, t0)
    with sessions.begin() as session:
        (hostname,) = session.scalars(select(Node.hostname)).all()
        set_pricing_rule(session, "node", "", hostname, PricingModel.SPOT, actor="system:test")
        detect_idle(session, t0, t0 + timedelta(hours=2), IdlePolicy(), pricing)
        (episode,) = list_episodes(session, t0, t0 + timedelta(hours=2))
    assert episode.cost == (spot / 2).quantize(QUANTUM)


def test_idle_grace_and_partition_thresholds(loaded) -> None:  # type: ignore[no-untyped-def]
    """Partition "gpu" calling ≤ 60 % idle makes job 502's 50 % GPU idle, from its start + grace to the last
    reading; a grace longer than job 501's busy first hour + 6 min leaves its 30-minute episode too short."""
    sessions, t0, _, pricing = loaded
    lenient = IdlePolicy(grace_seconds=600, partition_thresholds={"gpu": 0.6})
    with sessions.begin() as session:
        detect_idle(session, t0, t0 + timedelta(hours=2), lenient, pricing)
        episodes = {e.job_id: e for e in list_episodes(session, t0, t0 + timedelta(hours=2))}
    assert set(episodes) == {"501", "502"}
    assert (episodes["502"].start, episodes["502"].end) == (t0 + timedelta(minutes=40), t0 + timedelta(minutes=119))
    assert episodes["502"].memory_held
    with sessions.begin() as session:
        detect_idle(session, t0, t0 + timedelta(hours=2), IdlePolicy(grace_seconds=4000), pricing)
        assert list_episodes(session, t0, t0 + timedelta(hours=2)) == []


def test_mig_share_bills_its_fraction_and_leaves_the_rest_unallocated(loaded) -> None:  # type: ignore[no-untyped-def]
    """Job 502's allocation turned into a 1g.10gb MIG slice (1/7 of GPU 1): it pays 1/7 of the GPU-hours it
    held, metered by the whole GPU's utilisation (50 %), and the other 6/7 are unallocated."""
    from sqlalchemy import update

    from finops.db.hours import mark_hours_dirty
    from finops.db.models import Allocation, Job

    sessions, t0, r, pricing = loaded
    with sessions.begin() as session:
        job_pk = session.scalars(select(Job.id).where(Job.job_id == "502")).one()
        session.execute(
            update(Allocation)
            .where(Allocation.job_pk == job_pk)
            .values(share_num=1, share_den=7, mig_profile="1g.10gb")
        )
        mark_hours_dirty(session, [to_epoch(t0), to_epoch(t0) + 3600])
        rollup(session, pricing, to_epoch(t0 + timedelta(hours=2)))
    with sessions() as session:
        rows = {row.key: row for row in cost_report(session, t0, t0 + timedelta(hours=2), "team")}
    held = r * Decimal("1.5") / 7
    assert abs(rows[UNMAPPED_TEAM].allocated_cost - held) <= 2 * QUANTUM
    assert abs(rows[UNMAPPED_TEAM].used_cost - held / 2) <= 2 * QUANTUM
    assert sum(row.allocated_cost for row in rows.values()) == (4 * r).quantize(QUANTUM)
    assert sum(row.allocated_gpu_seconds for row in rows.values()) == 4 * 3600
    assert rows[UNMAPPED_TEAM].allocated_gpu_seconds == pytest.approx(5400 / 7, abs=2)


def test_time_sliced_hour_is_split_by_the_jobs_measured_utilisation(loaded) -> None:  # type: ignore[no-untyped-def]
    """Job 502 time-slices GPU 0 with job 501 over [T, T+30 min). Per-job SM utilisation measured 0.6 for 501
    and 0.2 for 502 splits that half hour 3 : 1 (501 alone holds the rest of the hour): 3,150 and 450
    GPU-seconds. Without the measurements the half hour is split equally: 2,700 and 900."""
    from sqlalchemy import delete, update

    from finops.db.hours import mark_hours_dirty
    from finops.db.models import Allocation, Gpu, GpuJobUtilization, Job

    sessions, t0, r, pricing = loaded
    hour = to_epoch(t0)
    with sessions.begin() as session:
        gpu0 = session.scalars(select(Gpu.id).where(Gpu.uuid == scenario.UUIDS[0])).one()
        job_pk = session.scalars(select(Job.id).where(Job.job_id == "502")).one()
        session.execute(
            update(Allocation)
            .where(Allocation.job_pk == job_pk)
            .values(gpu_id=gpu0, start=t0, end=t0 + timedelta(minutes=30))
        )
        session.add_all(
            GpuJobUtilization(gpu_id=gpu0, ts=t0 + timedelta(minutes=minute), job_id=job, utilization_ratio=ratio)
            for minute in range(30)
            for job, ratio in (("501", 0.6), ("502", 0.2))
        )
        mark_hours_dirty(session, [hour, hour + 3600])
        rollup(session, pricing, to_epoch(t0 + timedelta(hours=2)))

    def gpu0_first_hour() -> dict[str, tuple[int, Decimal]]:
        with sessions() as session:
            rows = session.execute(
                select(Job.job_id, LedgerEntry.seconds, LedgerEntry.allocated_cost)
                .outerjoin(Job, Job.id == LedgerEntry.job_pk)
                .where(LedgerEntry.gpu_id == gpu0, LedgerEntry.hour == t0)
            ).all()
        return {job or UNALLOCATED_TEAM: (seconds, cost) for job, seconds, cost in rows}

    measured = gpu0_first_hour()
    assert {job: seconds for job, (seconds, _) in measured.items()} == {"501": 3150, "502": 450}
    assert measured["501"][1] == capacity_cost(r, 3150) and measured["502"][1] == capacity_cost(r, 450)
    with sessions.begin() as session:
        session.execute(delete(GpuJobUtilization))
        mark_hours_dirty(session, [hour])
        rollup(session, pricing, to_epoch(t0 + timedelta(hours=2)))
    assert {job: seconds for job, (seconds, _) in gpu0_first_hour().items()} == {"501": 2700, "502": 900}


def test_pricing_rule_reprices_a_node(loaded) -> None:  # type: ignore[no-untyped-def]
    """A node rule putting gpu-a-01 on on-prem pricing re-prices every one of its GPU-hours on the next rollup."""
    from finops.pricing.rules import set_pricing_rule

    sessions, t0, _, pricing = loaded
    onprem = pricing.catalog.rate(scenario.MODEL, PricingModel.ON_PREM, t0)
    with sessions.begin() as session:
        set_pricing_rule(session, "node", "", scenario.NODE, PricingModel.ON_PREM, actor="system:test")
        rollup(session, pricing, to_epoch(t0 + timedelta(hours=2)))
    with sessions() as session:
        rows = cost_report(session, t0, t0 + timedelta(hours=2), "team")
        models = set(session.scalars(select(LedgerEntry.pricing_model).where(LedgerEntry.hour >= t0)))
    assert sum(row.allocated_cost for row in rows) == 4 * capacity_cost(onprem, 3600)  # rounded per GPU-hour
    assert models == {"on-prem"}
