"""Budgets (finops/analysis/budgets.py), on both databases: month-to-date spend equal to the cost report's cents for
every team, what a budget may be (amount, month, names, the price catalogue's currency, a known team), deleting
one, and budgets stored in another currency shown as not comparable."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from finops.analysis.budgets import (
    KNOWN_TEAMS_SHOWN,
    BudgetError,
    UnknownTeam,
    budget_status,
    delete_budget,
    known_teams,
    month_start,
    parse_amount,
    parse_month,
    record_budget_events,
    set_budget,
)
from finops.analysis.events import list_events
from finops.analysis.report import cost_report
from finops.analysis.report_format import report_dicts
from finops.db.ledger_tables import LedgerEntry
from finops.db.models import UNALLOCATED_TEAM, Budget
from finops.jobs.teams import set_rule, team_by_name
from finops.ledger.costmodel import quantize
from finops.ledger.team_hours import refresh_team_hours
from finops.pricing.catalog import DEFAULT_CATALOG, load_catalog
from finops.pricing.store import import_catalog
from tests.support import scenario

DEMO_SPEND = {
    "vision": Decimal("213282.637369"),
    "speech": Decimal("79655.837403"),
    "llm-pretrain": Decimal("57085.997382"),
    "recsys": Decimal("46344.941432"),
    "research": Decimal("25372.637411"),
    "sandbox": Decimal("3357.898715"),
    UNALLOCATED_TEAM: Decimal("166690.130288"),
}
"""Month-to-date allocated cost per team of a synthetic demo week whose report showed vision at 213,282.63 and its
budget at 213,282.64: the report's largest-remainder rounding gives the week's 4 spare cents to the four larger
remainders, not vision's .7369."""


def _cents_by_team(rows: list[dict[str, object]]) -> dict[str, str]:
    return {str(row["team"]): str(row["allocated_cost"]) for row in rows}


def _spent_by_team(statuses: list) -> dict[str, str]:  # type: ignore[type-arg]
    return {s.team: f"{s.spent:.2f}" for s in statuses}


def test_spent_equals_the_report_for_every_team(loaded) -> None:  # type: ignore[no-untyped-def]
    """The slice's teams (alpha, __unmapped__, __unallocated__) each with a budget: month-to-date spend is the
    report's cost to the cent, for the whole report and with --team."""
    sessions, t0, _, _ = loaded
    at = t0 + timedelta(hours=2)
    with sessions.begin() as session:
        teams = [row.key for row in cost_report(session, month_start(at), at)]
        for team in teams:
            set_budget(session, team, Decimal("1000"), at, "USD", actor="system:test")
    assert set(teams) == {"alpha", "__unmapped__", UNALLOCATED_TEAM}
    with sessions() as session:
        report = _cents_by_team(report_dicts(cost_report(session, month_start(at), at)))
        assert _spent_by_team(budget_status(session, at)) == report
        for team in teams:
            alone = _cents_by_team(report_dicts(cost_report(session, month_start(at), at, team=team)))
            assert _spent_by_team(budget_status(session, at, team=team)) == alone


@pytest.fixture
def demo_month(sessions):  # type: ignore[no-untyped-def]
    """:data:`DEMO_SPEND` as one ledger hour per team in November 2026, with their team-hours; (sessions, at)."""
    with sessions.begin() as session:
        gpu = scenario.one_gpu_node(session)
        first = datetime(2026, 11, 19, tzinfo=UTC)
        for i, (team, amount) in enumerate(DEMO_SPEND.items()):
            session.add(
                LedgerEntry(
                    hour=first + timedelta(hours=i), gpu_id=gpu.id, job_pk=None, team_id=team_by_name(session, team).id,
                    seconds=3600, used_gpu_seconds=0.0, sample_count=0, energy_joules=0.0, allocated_cost=amount,
                    used_cost=Decimal(0), idle_cost=Decimal(0), energy_cost=Decimal(0), currency="USD",
                    pricing_model="on-demand",
                )
            )  # fmt: skip
        session.flush()
        refresh_team_hours(session, first, first + timedelta(hours=len(DEMO_SPEND)))
        for team in DEMO_SPEND:
            set_budget(session, team, Decimal("500000"), first, "USD", actor="system:test")
    return sessions, datetime(2026, 11, 26, 0, 24, tzinfo=UTC)


def test_spent_takes_the_reports_cent_where_rounding_alone_differs(demo_month) -> None:  # type: ignore[no-untyped-def]
    sessions, at = demo_month
    with sessions() as session:
        report = _cents_by_team(report_dicts(cost_report(session, month_start(at), at)))
        statuses = budget_status(session, at)
    assert report["vision"] == "213282.63" != f"{quantize(DEMO_SPEND['vision'], Decimal('0.01'))}"
    assert _spent_by_team(statuses) == report
    assert sum(Decimal(cents) for cents in report.values()) == quantize(sum(DEMO_SPEND.values()), Decimal("0.01"))


def test_amounts_months_and_names() -> None:
    assert parse_amount("1000") == Decimal("1000.000000") and parse_amount(Decimal("0.000001")) == Decimal("0.000001")
    assert parse_amount("999999999999.999999") == Decimal("999999999999.999999")
    assert parse_amount("12.500000000") == Decimal("12.5")  # trailing zeros are not decimals
    refused = {
        "abc": "is not a decimal number",
        "1" * 65: "is not a decimal number",
        "NaN": "is not a finite number",
        "-Infinity": "is not a finite number",
        "0": "is not more than 0",
        "-5": "is not more than 0",
        "1e12": "is not below 1,000,000,000,000",
        "1e999999999": "is not below",
        "1.0000001": "has more than 6 decimals",
    }
    for text, message in refused.items():
        with pytest.raises(BudgetError, match=message) as caught:
            parse_amount(text)
        assert caught.value.field == "amount"
    assert parse_month("2026-11") == datetime(2026, 11, 1, tzinfo=UTC)
    for text in ("2026-13", "2026-00", "2026-1", "2026-11-01", "november", "x" * 10_000, "1999-12", "3000-01"):
        with pytest.raises(BudgetError, match="month") as caught:
            parse_month(text)
        assert caught.value.field == "month" and len(str(caught.value)) < 120


def test_refusals_name_the_field_and_write_nothing(loaded) -> None:  # type: ignore[no-untyped-def]
    sessions, t0, _, _ = loaded
    refused = [
        ({"amount": "0"}, "amount", "is not more than 0"),
        ({"currency": "EUR"}, "currency", "budget currency EUR is not the price catalogue's currency USD"),
        ({"currency": "usd"}, "currency", "is not an ISO 4217 code such as USD"),
        ({"currency": "X" * 10_000}, "currency", "is not an ISO 4217 code"),
        ({"team": ""}, "team", "team name is empty"),
        ({"team": "a" * 129}, "team", "up to 128 printable characters"),
        ({"team": "al\x00pha"}, "team", "printable"),
        ({"project": "p" * 129}, "project", "up to 128 printable characters"),
        ({"month": datetime(1999, 12, 31, tzinfo=UTC)}, "month", "1999-12 is out of range"),
    ]
    for change, field, message in refused:
        request = {"team": "alpha", "amount": "100", "month": t0, "currency": "USD", "project": "", **change}
        with sessions.begin() as session, pytest.raises(BudgetError, match=message) as caught:
            set_budget(session, **request, actor="system:test")  # type: ignore[arg-type]
        assert caught.value.field == field
    with sessions() as session:
        assert session.query(Budget).count() == 0
        assert budget_status(session, t0) == []


def test_currency_is_the_catalogue_in_force(loaded) -> None:  # type: ignore[no-untyped-def]
    """None means the catalogue's currency; after importing a catalogue in EUR, USD is refused and EUR taken."""
    sessions, t0, _, _ = loaded
    with sessions.begin() as session:
        assert set_budget(session, "alpha", "100", t0, actor="system:test").currency == "USD"
        euro = DEFAULT_CATALOG.read_text(encoding="utf-8").replace("currency: USD", "currency: EUR", 1)
        import_catalog(session, euro, "euro.yaml", load_catalog(), actor="system:test")
    with sessions.begin() as session, pytest.raises(BudgetError, match="USD is not the price catalogue's currency EUR"):
        set_budget(session, "alpha", "100", t0, "USD", actor="system:test")
    with sessions.begin() as session:
        budget = set_budget(session, "alpha", "100", t0, actor="system:test")
        assert (budget.amount, budget.currency) == (Decimal("100"), "EUR")


def test_known_teams_and_unknown_ones(loaded) -> None:  # type: ignore[no-untyped-def]
    """Known: a rule, a job, a ledger hour or a budget. A team row alone (left by a rule removed, say) is not."""
    sessions, t0, _, _ = loaded
    with sessions.begin() as session:
        team_by_name(session, "ghost")
        set_rule(session, "namespace", "", "ns-vision", "vision", actor="system:test")
        assert known_teams(session) == ["__unallocated__", "__unmapped__", "alpha", "vision"]
    with sessions.begin() as session, pytest.raises(UnknownTeam) as caught:
        set_budget(session, "ghost", "100", t0, actor="system:test")
    assert str(caught.value) == (
        "team ghost has no jobs or rules yet; known teams: __unallocated__, __unmapped__, alpha, vision"
    )
    assert caught.value.field == "team"
    with sessions.begin() as session:
        set_budget(session, "vision", "100", t0, actor="system:test")
        set_budget(session, "ghost", "100", t0, allow_unknown_team=True, actor="system:test")
        assert "ghost" in known_teams(session), "a team with a budget is known"
        for k in range(KNOWN_TEAMS_SHOWN + 5):
            set_rule(session, "account", "", f"acct-{k}", f"team-{k:02d}", actor="system:test")
    with sessions.begin() as session, pytest.raises(UnknownTeam, match=r", team-15 and 10 more$"):
        set_budget(session, "nobody", "100", t0, actor="system:test")


def test_delete_and_replace(loaded) -> None:  # type: ignore[no-untyped-def]
    sessions, t0, _, _ = loaded
    with sessions.begin() as session:
        set_budget(session, "alpha", "100", t0, actor="system:test")
        set_budget(session, "alpha", "250.5", t0, actor="system:test")
        set_budget(session, "alpha", "40", t0, project="llm", actor="system:test")
    with sessions() as session:
        assert [(s.project, s.budget) for s in budget_status(session, t0)] == [
            ("", Decimal("250.5")),
            ("llm", Decimal(40)),
        ]
    with sessions.begin() as session:
        assert delete_budget(session, "alpha", t0, project="llm", actor="system:test")
        assert not delete_budget(session, "alpha", t0, project="llm", actor="system:test")
        assert not delete_budget(session, "nobody", t0, actor="system:test")
        assert delete_budget(
            session, "alpha", t0 + timedelta(minutes=1), actor="system:test"
        )  # any instant of the month
        with pytest.raises(BudgetError, match="printable"):
            delete_budget(session, "al\x00pha", t0, actor="system:test")
    with sessions() as session:
        assert budget_status(session, t0) == []


def test_budget_in_another_currency_is_not_compared(loaded) -> None:  # type: ignore[no-untyped-def]
    """A budget stored in EUR before the currency was checked: its spend (USD) is not shown as a share of it and
    no threshold is recorded; setting it again in the catalogue's currency fixes it."""
    sessions, t0, r, _ = loaded
    at = t0 + timedelta(hours=2)
    with sessions.begin() as session:
        team_id = team_by_name(session, "alpha").id
        session.add(Budget(team_id=team_id, month=month_start(at), project="", amount=r, currency="EUR"))
        session.flush()
        assert record_budget_events(session, at) == 1
        (status,) = budget_status(session, at)
    assert (status.comparable, status.currency, status.spend_currency) == (False, "EUR", "USD")
    assert status.used_percent.is_nan() and status.used_ratio != status.used_ratio  # NaN
    assert status.problem == (
        "budget in EUR but spend in USD: not comparable; set the budget again in USD, or delete it"
    )
    with sessions() as session:
        assert list_events(session) == []
    with sessions.begin() as session:
        set_budget(session, "alpha", r, at, actor="system:test")
        (status,) = budget_status(session, at)
    assert status.comparable and status.problem is None and status.used_percent > 100
