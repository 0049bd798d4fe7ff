"""The budget routes of the REST API over a real socket, on both databases: field-level 422s (never a 500) for
what :func:`finops.analysis.budgets.set_budget` refuses, ``allow_unknown_team``, DELETE 204/404, and a budget
stored in another currency listed as not comparable."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from typing import Any

import httpx
import pytest

from finops.analysis.budgets import parse_month
from finops.db.models import Budget
from finops.jobs.teams import team_by_name
from finops.timeutil import month_start
from finops.web.app import create_app
from tests.support.servers import running

TOKEN = "budget-api-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def api(loaded) -> Iterator[tuple[str, Any, str]]:  # type: ignore[no-untyped-def]
    """(base URL, sessions, this month as YYYY-MM) on the slice."""
    sessions, t0, _, _ = loaded
    with running(create_app(sessions, "ingest-only", api_token=TOKEN)) as url:
        yield url, sessions, f"{month_start(t0 + timedelta(hours=3)):%Y-%m}"


def _put(url: str, team: str, month: str, body: object, **params: str) -> httpx.Response:
    return httpx.put(f"{url}/api/v1/budgets/{team}/{month}", json=body, params=params, headers=AUTH)


def test_refusals_are_field_level_422s(api) -> None:  # type: ignore[no-untyped-def]
    url, sessions, month = api
    cases: list[tuple[str, str, object, dict[str, str], list[str], str]] = [
        ("alpha", month, {"amount": "100", "currency": "EUR"}, {}, ["body", "currency"],
         "budget currency EUR is not the price catalogue's currency USD"),
        ("alpha", month, {"amount": "100", "currency": "E" * 5000}, {}, ["body", "currency"], "is not an ISO 4217"),
        ("alpha", month, {"amount": -1}, {}, ["body", "amount"], "amount -1 is not more than 0"),
        ("alpha", month, {"amount": "1e12"}, {}, ["body", "amount"], "is not below 1,000,000,000,000"),
        ("alpha", month, {"amount": "Infinity"}, {}, ["body", "amount"], "is not a finite number"),
        ("alpha", month, {"amount": "0.0000001"}, {}, ["body", "amount"], "has more than 6 decimals"),
        ("alpha", "2026-13", {"amount": 1}, {}, ["path", "month"], "month '2026-13' is not a month as YYYY-MM"),
        ("alpha", "9999-12", {"amount": 1}, {}, ["path", "month"], "month 9999-12 is out of range"),
        ("a" * 300, month, {"amount": 1}, {}, ["path", "team"], "is not up to 128 printable characters"),
        ("al%00pha", month, {"amount": 1}, {}, ["path", "team"], "holds a NUL character"),
        ("alpha", month, {"amount": 1}, {"project": "p\x00"}, ["query", "project"], "holds a NUL character"),
        ("nosuchteam", month, {"amount": 1}, {}, ["path", "team"],
         "team nosuchteam has no jobs or rules yet; known teams: __unallocated__, __unmapped__, alpha; "
         "add allow_unknown_team=true to the query to set its budget anyway"),
    ]  # fmt: skip
    for team, put_month, body, params, loc, message in cases:
        response = _put(url, team, put_month, body, **params)
        assert response.status_code == 422, (team, put_month, body, response.text)
        (detail,) = response.json()["detail"]
        assert detail["loc"] == loc and message in detail["msg"], detail
    infinite = httpx.put(
        f"{url}/api/v1/budgets/alpha/{month}",
        content=b'{"amount": 1e400}',
        headers={**AUTH, "Content-Type": "application/json"},
    )
    assert infinite.status_code == 422 and "is not a finite number" in infinite.text
    listed = httpx.get(f"{url}/api/v1/budgets", params={"month": "10000-01"}, headers=AUTH)
    assert listed.status_code == 422 and listed.json()["detail"][0]["loc"] == ["query", "month"]
    with sessions() as session:
        assert session.query(Budget).count() == 0


def test_set_unknown_team_delete(api) -> None:  # type: ignore[no-untyped-def]
    url, _, month = api
    assert _put(url, "alpha", month, {"amount": "1000"}).status_code == 204, "currency: the catalogue's"
    assert _put(url, "alpha", month, {"amount": 25, "currency": "USD"}, project="llm").status_code == 204
    assert _put(url, "newteam", month, {"amount": 5}, allow_unknown_team="true").status_code == 204
    listed = httpx.get(f"{url}/api/v1/budgets", params={"month": month}, headers=AUTH).json()
    assert [(b["team"], b["project"], b["budget"], b["currency"]) for b in listed] == [
        ("alpha", "", "1000.000000", "USD"),
        ("alpha", "llm", "25.000000", "USD"),
        ("newteam", "", "5.000000", "USD"),
    ]
    assert all(b["comparable"] and b["problem"] is None and b["spend_currency"] == "USD" for b in listed)
    assert _put(url, "newteam", month, {"amount": 6}).status_code == 204, "a team with a budget is known"
    delete = f"{url}/api/v1/budgets/alpha/{month}"
    assert httpx.delete(delete, params={"project": "llm"}, headers=AUTH).status_code == 204
    missing = httpx.delete(delete, params={"project": "llm"}, headers=AUTH)
    assert missing.status_code == 404 and missing.json() == {
        "detail": f"no budget for team 'alpha' project 'llm' in {month}"
    }
    assert httpx.delete(delete, headers=AUTH).status_code == 204
    assert httpx.delete(f"{url}/api/v1/budgets/nobody/{month}", headers=AUTH).status_code == 404
    bad = httpx.delete(f"{url}/api/v1/budgets/alpha/2026-1", headers=AUTH)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["path", "month"]


def test_budget_in_another_currency_is_listed_as_not_comparable(api) -> None:  # type: ignore[no-untyped-def]
    url, sessions, month = api
    with sessions.begin() as session:
        team_id = team_by_name(session, "alpha").id
        session.add(Budget(team_id=team_id, month=parse_month(month), project="", amount=Decimal(100), currency="EUR"))
    (listed,) = httpx.get(f"{url}/api/v1/budgets", params={"month": month}, headers=AUTH).json()
    assert (listed["currency"], listed["spend_currency"], listed["comparable"]) == ("EUR", "USD", False)
    assert listed["used_percent"] is None
    assert listed["problem"] == (
        "budget in EUR but spend in USD: not comparable; set the budget again in USD, or delete it"
    )
    assert _put(url, "alpha", month, {"amount": 100}).status_code == 204, "the fix: set it again"
    (fixed,) = httpx.get(f"{url}/api/v1/budgets", params={"month": month}, headers=AUTH).json()
    assert fixed["comparable"] and fixed["currency"] == "USD" and fixed["used_percent"] is not None
