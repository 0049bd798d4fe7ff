"""Text no field can hold, sent over a real socket as a hostile tenant would: a month of year 0, NUL characters in
bodies, queries and paths (PostgreSQL refuses to store one, SQLite stored it), non-ASCII bytes in ``Authorization``
and an offset pushing a time past year 9999. Each is a 422 naming the field (401 for the header), never a 500, and
nothing is stored; the same months and times on the command line are one ``error:`` line with exit code 2."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from sqlalchemy import func, select

from alerts.models import AlertSilence
from finops.access.api_tokens import create_token
from finops.db.models import PricingRule, TeamRule
from finops.timeutil import utc_now
from finops.web.app import create_app
from tests.support.servers import running

ADMIN = "hostile-admin-token"
NUL = "\x00"


@pytest.fixture
def service(sessions):  # type: ignore[no-untyped-def]
    """(base URL, admin headers, team-token headers, sessions)."""
    with sessions.begin() as session:
        _, team_token = create_token(session, "team", utc_now(), team="alpha", actor="system:test")
    with running(create_app(sessions, "ingest-only", api_token=ADMIN)) as url:
        yield url, {"Authorization": f"Bearer {ADMIN}"}, {"Authorization": f"Bearer {team_token}"}, sessions


def _refused(response: httpx.Response, field: str) -> None:
    assert response.status_code == 422, (response.status_code, response.text)
    assert field in response.text, response.text


def test_a_month_of_year_zero_is_refused(service) -> None:  # type: ignore[no-untyped-def]
    url, admin, team, _ = service
    _refused(httpx.get(f"{url}/api/v1/budgets", params={"month": "0000-01"}, headers=team), "month")
    _refused(httpx.get(f"{url}/api/v1/costs/idle-by-reason", params={"month": "0000-01"}, headers=team), "month")
    body = {"amount": "10", "currency": "USD"}
    _refused(httpx.put(f"{url}/api/v1/budgets/alpha/0000-01", json=body, headers=admin), "month")


def test_nul_characters_are_refused_and_nothing_is_stored(service) -> None:  # type: ignore[no-untyped-def]
    url, admin, team, sessions = service
    now = utc_now()
    rule = {"kind": "account", "value": f"acct{NUL}", "team": "alpha"}
    _refused(httpx.put(f"{url}/api/v1/team-rules", json=rule, headers=admin), "value")
    price = {"selector": "node", "value": f"gpu{NUL}", "pricing_model": "on_demand"}
    _refused(httpx.put(f"{url}/api/v1/pricing-rules", json=price, headers=admin), "value")
    silence = {"matchers": [f'team="alpha{NUL}"'], "ends_at": (now + timedelta(hours=1)).isoformat()}
    _refused(httpx.post(f"{url}/api/v1/alerts/silences", json=silence, headers=admin), "matchers")
    commented = {**silence, "matchers": ['team="alpha"'], "comment": f"x{NUL}"}
    _refused(httpx.post(f"{url}/api/v1/alerts/silences", json=commented, headers=admin), "comment")
    _refused(httpx.get(f"{url}/api/v1/audit", params={"actor": f"a{NUL}"}, headers=admin), "actor")
    period = {"start": (now - timedelta(days=1)).isoformat(), "end": now.isoformat()}
    for name in ("team", "user"):
        answered = httpx.get(f"{url}/api/v1/rightsizing", params={**period, name: f"x{NUL}"}, headers=team)
        _refused(answered, name)
    _refused(httpx.delete(f"{url}/api/v1/budgets/al%00pha/2026-11", headers=admin), "team")
    with sessions() as session:
        for model in (TeamRule, PricingRule, AlertSilence):
            assert session.scalar(select(func.count()).select_from(model)) == 0, model


@pytest.mark.parametrize("api_token", [None, ADMIN])
def test_non_ascii_authorization_is_unauthorised(sessions, api_token) -> None:  # type: ignore[no-untyped-def]
    with running(create_app(sessions, None, api_token=api_token)) as url:
        for value in ("Bearer \xe9t\xe9".encode("latin-1"), b"Bearer \xff\xfe", "Bearer é".encode()):
            answered = httpx.get(f"{url}/api/v1/budgets", headers=[(b"Authorization", value)])
            assert answered.status_code == 401, answered.text


def test_an_offset_past_year_9999_is_refused(service) -> None:  # type: ignore[no-untyped-def]
    url, admin, _, _ = service
    _refused(httpx.get(f"{url}/api/v1/audit", params={"since": "9999-12-31T23:59:59-23:59"}, headers=admin), "since")


def test_full_width_digits_long_silences_and_re2_regexes_are_refused(service) -> None:  # type: ignore[no-untyped-def]
    url, admin, team, sessions = service
    _refused(httpx.get(f"{url}/api/v1/budgets", params={"month": "２０２６-１１"}, headers=team), "month")
    _refused(httpx.put(f"{url}/api/v1/budgets/alpha/2026-11", json={"amount": "１００"}, headers=admin), "amount")
    now = utc_now()
    period = {"start": (now - timedelta(days=1)).isoformat(), "end": now.isoformat()}
    for headroom in ("１.５", "1e999999", "101"):
        answered = httpx.get(f"{url}/api/v1/rightsizing", params={**period, "memory_headroom": headroom}, headers=team)
        _refused(answered, "memory_headroom")
    for silence, why in (
        ({"matchers": ['team="alpha"'], "ends_at": "9999-12-31T00:00:00Z"}, "a year"),
        ({"matchers": ['team="alpha"'], "starts_at": (now + timedelta(days=300)).isoformat(),
          "ends_at": (now + timedelta(days=400)).isoformat()}, "a year"),
        ({"matchers": [r"job=~(a)\1"], "ends_at": (now + timedelta(hours=1)).isoformat()}, "RE2"),
    ):  # fmt: skip
        _refused(httpx.post(f"{url}/api/v1/alerts/silences", json=silence, headers=admin), why)
    year = {"matchers": ['team="alpha"'], "ends_at": (now + timedelta(days=365)).isoformat()}
    assert httpx.post(f"{url}/api/v1/alerts/silences", json=year, headers=admin).status_code == 201
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(AlertSilence)) == 1
