"""The dashboard's query functions (finops/analysis/dashboard_queries.py, finops/analysis/filters.py) on two clusters:
the scenario's node in cluster ``orion`` (partition ``gpu``) and a second node in cluster ``vega`` (partition
``debug``), on SQLite and PostgreSQL. The numbers the pages show are compared with
``finops.analysis.report.cost_report`` and ``finops.analysis.budgets.budget_status`` for the same filters."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy.orm import Session, sessionmaker

from collector.contract.clocks_events import CLOCKS_EVENT_REASONS
from finops.analysis.budgets import budget_status
from finops.analysis.dashboard_queries import filter_choices, ledger_cube, month_overview, node_names, top_idle
from finops.analysis.report import GROUP_BYS, ReportRow, cost_report
from finops.analysis.telemetry import bucket_seconds, job_telemetry, node_buckets
from finops.db.engine import make_engine, session_factory, upgrade
from finops.db.models import UNALLOCATED_TEAM
from finops.ledger.costmodel import quantize
from finops.pricing.catalog import PricingModel, load_catalog
from finops.timeutil import month_start, utc_now
from tests.support import scenario
from tests.support.two_clusters import NODE_B, seed_two_clusters

FILTERS: list[dict[str, str]] = [
    {},
    {"team": "alpha"},
    {"team": "gamma"},
    {"team": UNALLOCATED_TEAM},
    {"cluster": "orion"},
    {"cluster": "vega"},
    {"partition": "gpu"},
    {"partition": "debug"},
    {"cluster": "vega", "team": "gamma", "partition": "debug"},
    {"team": "nobody"},
]


@pytest.fixture
def seeded(database_url: str) -> tuple[sessionmaker[Session], datetime]:
    engine = make_engine(database_url)
    upgrade(engine)
    t0 = seed_two_clusters(database_url)
    return session_factory(engine), t0


def _money_and_seconds(rows: list[ReportRow]) -> list[tuple[object, ...]]:
    return [
        (r.key, r.team, r.user, r.allocated_cost, r.used_cost, r.idle_cost, r.energy_cost, r.allocated_gpu_seconds,
         r.unmetered_gpu_seconds, r.currency)
        for r in rows
    ]  # fmt: skip


def test_the_cube_gives_the_cost_report_for_every_grouping_and_filter(seeded) -> None:  # type: ignore[no-untyped-def]
    sessions, t0 = seeded
    start, end = t0 - timedelta(days=1), t0 + timedelta(hours=3)
    with sessions() as session:
        for filters in FILTERS:
            cube = ledger_cube(session, start, end, **filters)
            for by in ("team", "job", "user"):
                expected = cost_report(session, start, end, by, **filters)
                got = cube.report(by)
                assert _money_and_seconds(got) == _money_and_seconds(expected), (filters, by)
                for mine, theirs in zip(got, expected, strict=True):
                    assert mine.used_gpu_seconds == pytest.approx(theirs.used_gpu_seconds)
                    assert mine.idle_gpu_seconds == pytest.approx(theirs.idle_gpu_seconds)
                    assert mine.energy_joules == pytest.approx(theirs.energy_joules)
                assert cube.top_idle(by, 2) == top_idle(got, 2)
            with pytest.raises(ValueError, match="node"):
                cube.report("node")  # type: ignore[arg-type]
            by_team = {row.key: row.allocated_cost for row in cube.report("team")}
            daily: dict[str, Decimal] = {}
            for day in cube.daily():
                daily[day.team] = daily.get(day.team, Decimal(0)) + day.allocated_cost
            assert daily == by_team, "the days of a team add up to its total"


def test_filters_split_the_capacity_without_losing_or_doubling_a_cent(seeded) -> None:  # type: ignore[no-untyped-def]
    sessions, t0 = seeded
    window = (t0, t0 + timedelta(hours=2))
    with sessions() as session:
        rate = load_catalog().rate(scenario.MODEL, PricingModel.ON_DEMAND, t0)

        def capacity(**filters: str) -> Decimal:
            return sum((row.allocated_cost for row in cost_report(session, *window, **filters)), Decimal(0))

        assert capacity() == quantize(6 * rate), "3 GPUs x 2 hours"
        assert capacity(cluster="orion") == quantize(4 * rate), "the scenario's node, its unheld capacity included"
        assert capacity(cluster="vega") == quantize(2 * rate), "node B: job 601's hour and the hour before it"
        assert capacity(partition="gpu") + capacity(partition="debug") == capacity()
        assert capacity(team="gamma") == quantize(rate)
        assert capacity(team="nobody") == 0
        vega = {row.key: row for row in cost_report(session, *window, "team", cluster="vega")}
        assert set(vega) == {"gamma", UNALLOCATED_TEAM}
        for by in GROUP_BYS:
            catalog = load_catalog()
            assert cost_report(
                session, *window, by, cluster=None, team=None, partition=None, catalog=catalog
            ) == cost_report(session, *window, by, catalog=catalog), "no filter is the report as before"


def test_filter_choices_and_nodes(seeded) -> None:  # type: ignore[no-untyped-def]
    sessions, _ = seeded
    with sessions() as session:
        choices = filter_choices(session)
        assert choices.clusters == ["orion", "vega"]
        assert choices.partitions == ["debug", "gpu"]
        assert {"alpha", "gamma", UNALLOCATED_TEAM, "__unmapped__"} <= set(choices.teams)
        assert node_names(session) == [scenario.NODE, NODE_B]
        assert node_names(session, cluster="vega") == [NODE_B]
        assert node_names(session, partition="gpu") == [scenario.NODE]
        assert node_names(session, cluster="orion", partition="debug") == []


def test_month_overview_agrees_with_budget_status_and_the_report(seeded) -> None:  # type: ignore[no-untyped-def]
    sessions, _ = seeded
    at = utc_now().replace(second=0, microsecond=0)
    with sessions() as session:
        for filters in FILTERS:
            overview = month_overview(session, at, **filters)
            assert overview.budgets == budget_status(session, at, team=filters.get("team")), filters
            rows = cost_report(session, month_start(at), at, "team", **filters)
            assert overview.spent == sum((row.allocated_cost for row in rows), Decimal(0)), filters
            assert overview.forecast >= overview.spent
        everything = month_overview(session, at)
        (alpha,) = everything.budgets
        assert (alpha.team, alpha.budget, alpha.currency) == ("alpha", Decimal("1000.000000"), "USD")
        assert everything.currency == "USD"


def test_top_idle_lists_the_biggest_wasters_first(seeded) -> None:  # type: ignore[no-untyped-def]
    sessions, t0 = seeded
    with sessions() as session:
        jobs = cost_report(session, t0, t0 + timedelta(hours=2), "job")
    wasters = top_idle(jobs, 2)
    assert {row.key for row in wasters} == {"502", "601"}  # idle 0.75 r each; job 501 idled 0.5 r
    assert [row.key for row in top_idle(jobs)][-1] == "501"
    assert all(row.key != UNALLOCATED_TEAM for row in top_idle(jobs))
    assert [row.idle_cost for row in wasters] == sorted((row.idle_cost for row in wasters), reverse=True)


def test_job_telemetry_reads_the_gpus_inside_the_allocation(seeded) -> None:  # type: ignore[no-untyped-def]
    sessions, t0 = seeded
    with sessions() as session:
        found = job_telemetry(session, "501", utc_now())
        assert (found.jobs, found.gpus, found.start, found.end) == (1, 1, t0, t0 + timedelta(minutes=90))
        assert found.bucket_seconds == 30, "the narrowest width giving at most 300 points over 90 minutes"
        assert {(p.node, p.gpu_index) for p in found.points} == {(scenario.NODE, 0)}
        assert len(found.points) == 90, "one reading a minute over the 90-minute allocation"
        assert [p.utilization for p in found.points] == [1.0] * 60 + [0.0] * 30
        assert {p.power_watts for p in found.points} == {600.0}
        wide = job_telemetry(session, "501", utc_now(), max_buckets=3)
        assert wide.bucket_seconds == 1800
        assert [p.utilization for p in wide.points] == [1.0, 1.0, 0.0]
        assert job_telemetry(session, "501", utc_now(), cluster="vega").points == []
        assert len(job_telemetry(session, "501", utc_now(), team="alpha").points) == 90
        assert job_telemetry(session, "501", utc_now(), team="beta").points == [], "another team's job: nothing"
        assert job_telemetry(session, "no-such-job", utc_now()).points == []


def test_node_buckets_mean_power_temperature_and_decoded_throttle_reasons(seeded) -> None:  # type: ignore[no-untyped-def]
    sessions, t0 = seeded
    with sessions() as session:
        buckets = node_buckets(session, t0, t0 + timedelta(hours=2), 3600)
        a = [b for b in buckets if b.node == scenario.NODE]
        assert [b.ts for b in a] == [t0, t0 + timedelta(hours=1)]
        assert [b.utilization for b in a] == [pytest.approx(0.75), pytest.approx(0.25)]  # (100 % + 50 %) / 2, ...
        assert [b.power_watts for b in a] == [1200.0, 1200.0]  # two GPUs at 600 W
        assert [(b.gpus, b.readings) for b in a] == [(2, 120), (2, 120)]
        assert all(count == 0 for b in a for count in b.reason_readings.values())
        b_node = [b for b in buckets if b.node == NODE_B]
        assert [b.max_temperature_celsius for b in b_node] == [70.0, 70.0]
        active = {reason for b in b_node for reason, count in b.reason_readings.items() if count == b.readings}
        assert active == {"sw_power_cap", "hw_thermal"}
        assert set(b_node[0].reason_readings) == set(CLOCKS_EVENT_REASONS)
        only_vega = node_buckets(session, t0, t0 + timedelta(hours=2), 3600, cluster="vega")
        assert {b.node for b in only_vega} == {NODE_B}
        wide = node_buckets(session, t0, t0 + timedelta(hours=2), 7200, partition="gpu")
        assert sum(b.readings for b in wide) == 240


def test_bucket_widths() -> None:
    t0 = scenario.start_hour()
    assert bucket_seconds(t0, t0 + timedelta(hours=1), 300) == 30
    assert bucket_seconds(t0, t0 + timedelta(hours=24), 240, minimum=3600) == 3600
    assert bucket_seconds(t0, t0 + timedelta(days=30), 240, minimum=3600) == 10800
    assert bucket_seconds(t0, t0 + timedelta(days=3650), 10) == 86400, "the widest when none is wide enough"
