"""The REST API over a real socket on the hand-computed slice: costs (JSON, CSV, every grouping) equal the
report, budgets CRUD, idle episodes, events, team rules, authentication, and the OpenAPI schema."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal

import httpx
import pytest

from finops.analysis.budgets import record_budget_events
from finops.analysis.idle import IdlePolicy, detect_idle
from finops.analysis.report import GROUP_BYS, cost_report
from finops.analysis.report_format import report_dicts
from finops.db.models import UNALLOCATED_TEAM, UNMAPPED_TEAM
from finops.pricing.catalog import DEFAULT_CATALOG, load_catalog
from finops.web.app import create_app
from finops.web.cost_schema import CostsOut
from tests.support.servers import running

TOKEN = "rest-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def api(loaded):  # type: ignore[no-untyped-def]
    """(base URL, sessions, T, rate) with idle episodes judged."""
    sessions, t0, rate, pricing = loaded
    with sessions.begin() as session:
        detect_idle(session, t0, t0 + timedelta(hours=2), IdlePolicy(), pricing)
    with running(create_app(sessions, "ingest-only", api_token=TOKEN)) as url:
        yield url, sessions, t0, rate


def _period(t0) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {"start": t0.isoformat(), "end": (t0 + timedelta(hours=2)).isoformat()}


def test_costs_equal_the_report_for_every_grouping(api) -> None:  # type: ignore[no-untyped-def]
    url, sessions, t0, _ = api
    for group_by in GROUP_BYS:
        response = httpx.get(f"{url}/api/v1/costs", params={**_period(t0), "group_by": group_by}, headers=AUTH)
        assert response.status_code == 200, response.text
        with sessions() as session:
            rows = cost_report(session, t0, t0 + timedelta(hours=2), group_by, catalog=load_catalog())
            expected = report_dicts(rows, group_by)
        assert response.json()["rows"] == expected
        CostsOut.model_validate(response.json())  # the OpenAPI description has every field sent, and no other
        totals = sum(Decimal(row["allocated_cost"]) for row in response.json()["rows"])
        assert totals == sum(Decimal(row["allocated_cost"]) for row in expected) and totals > 0
    nodes = httpx.get(f"{url}/api/v1/costs", params={**_period(t0), "group_by": "node"}, headers=AUTH).json()
    assert [row["node"] for row in nodes["rows"]] == ["gpu-a-01"]
    users = httpx.get(f"{url}/api/v1/costs", params={**_period(t0), "group_by": "user"}, headers=AUTH).json()
    assert {row["user"] for row in users["rows"]} == {"alice", "bob", UNALLOCATED_TEAM}


def test_costs_as_csv(api) -> None:  # type: ignore[no-untyped-def]
    url, _, t0, _ = api
    response = httpx.get(f"{url}/api/v1/costs", params={**_period(t0), "format": "csv"}, headers=AUTH)
    assert response.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert {row["team"] for row in rows} == {"alpha", UNMAPPED_TEAM, UNALLOCATED_TEAM}


def test_bad_parameters_and_missing_token(api) -> None:  # type: ignore[no-untyped-def]
    url, _, t0, _ = api
    assert httpx.get(f"{url}/api/v1/costs", params=_period(t0)).status_code == 401
    wrong = httpx.get(f"{url}/api/v1/costs", params=_period(t0), headers={"Authorization": "Bearer ingest-only"})
    assert wrong.status_code == 401
    bad_time = httpx.get(f"{url}/api/v1/costs", params={"start": "yesterday", "end": "now"}, headers=AUTH)
    assert bad_time.status_code == 422 and "start" in bad_time.json()["detail"]
    bad_group = httpx.get(f"{url}/api/v1/costs", params={**_period(t0), "group_by": "planet"}, headers=AUTH)
    assert bad_group.status_code == 422


def test_budget_crud_and_events(api) -> None:  # type: ignore[no-untyped-def]
    url, sessions, t0, rate = api
    month = f"{t0:%Y-%m}"
    body = {"amount": str((rate * Decimal("1.6")).quantize(Decimal("0.01"))), "currency": "USD"}
    assert httpx.put(f"{url}/api/v1/budgets/alpha/{month}", json=body, headers=AUTH).status_code == 204
    listed = httpx.get(f"{url}/api/v1/budgets", params={"month": month}, headers=AUTH).json()
    assert [(b["team"], b["budget"]) for b in listed] == [("alpha", f"{Decimal(body['amount']):.6f}")]
    with sessions.begin() as session:
        record_budget_events(session, t0 + timedelta(hours=2))
    events = httpx.get(f"{url}/api/v1/events", params={"kind": "budget_threshold"}, headers=AUTH).json()
    assert sorted(e["payload"]["threshold_percent"] for e in events) == [50, 80]
    assert httpx.delete(f"{url}/api/v1/budgets/alpha/{month}", headers=AUTH).status_code == 204
    assert httpx.delete(f"{url}/api/v1/budgets/alpha/{month}", headers=AUTH).status_code == 404
    assert httpx.get(f"{url}/api/v1/budgets", params={"month": month}, headers=AUTH).json() == []
    negative = httpx.put(f"{url}/api/v1/budgets/alpha/{month}", json={"amount": "-1", "currency": "USD"}, headers=AUTH)
    assert negative.status_code == 422


def test_idle_episodes_and_team_rules(api) -> None:  # type: ignore[no-untyped-def]
    url, _, t0, rate = api
    (episode,) = httpx.get(f"{url}/api/v1/idle-episodes", params=_period(t0), headers=AUTH).json()
    assert (episode["job_id"], episode["team"], episode["hours"]) == ("501", "alpha", 0.5)
    assert Decimal(episode["cost"]) == (rate / 2).quantize(Decimal("0.000001"))
    rule = {"kind": "account", "value": "acct-b", "team": "beta"}
    assert httpx.put(f"{url}/api/v1/team-rules", json=rule, headers=AUTH).json() == {"jobs_moved": 1}
    rules = httpx.get(f"{url}/api/v1/team-rules", headers=AUTH).json()
    assert {"kind": "account", "key": "", "value": "acct-b", "team": "beta"} in rules
    removed = httpx.delete(f"{url}/api/v1/team-rules/account", params={"value": "acct-b"}, headers=AUTH)
    assert removed.json() == {"jobs_moved": 1}
    bad = httpx.put(f"{url}/api/v1/team-rules", json={"kind": "label", "value": "x", "team": "t"}, headers=AUTH)
    assert bad.status_code == 422 and "label name" in bad.json()["detail"]


def test_openapi_schema_lists_every_route(api) -> None:  # type: ignore[no-untyped-def]
    url, _, _, _ = api
    assert httpx.get(f"{url}/openapi.json").status_code == 401
    assert httpx.get(f"{url}/docs").status_code == 401
    assert httpx.get(f"{url}/docs", headers=AUTH).status_code == 200
    schema = httpx.get(f"{url}/openapi.json", headers=AUTH).json()
    paths = schema["paths"]
    for path in (
        "/api/v1/ingest",
        "/api/v1/costs",
        "/api/v1/budgets",
        "/api/v1/budgets/{team}/{month}",
        "/api/v1/idle-episodes",
        "/api/v1/events",
        "/api/v1/team-rules",
        "/api/v1/prices",
        "/api/v1/pricing-rules",
    ):
        assert path in paths, path
    group_by = next(p for p in paths["/api/v1/costs"]["get"]["parameters"] if p["name"] == "group_by")
    assert group_by["schema"]["enum"] == list(GROUP_BYS)
    assert set(paths["/api/v1/budgets/{team}/{month}"]) == {"put", "delete"}
    ok = paths["/api/v1/costs"]["get"]["responses"]["200"]["content"]
    assert ok["application/json"]["schema"] == {"$ref": "#/components/schemas/CostsOut"} and "text/csv" in ok
    row = schema["components"]["schemas"]["CostRowOut"]["properties"]
    for name in ("sm_active_ratio", "tensor_active_ratio", "dram_active_ratio", "sm_active_cost", "profiled_share"):
        assert {"type": "null"} in row[name]["anyOf"] and "Null when" in row[name]["description"], name


def test_price_catalog_and_pricing_rules(api) -> None:  # type: ignore[no-untyped-def]
    url, _, _, rate = api
    catalog = httpx.get(f"{url}/api/v1/prices", headers=AUTH).json()
    h100 = [r for r in catalog["rows"] if r["model"] == "H100-SXM-80GB" and r["pricing_model"] == "on-demand"]
    assert (
        catalog["currency"] == "USD"
        and Decimal(max(h100, key=lambda r: r["effective_from"])["rate_per_gpu_hour"]) == rate
    )
    assert catalog["unpriced_models"] == ["MI210"] and not any(r["model"] == "MI210" for r in catalog["rows"])
    assert {r["pricing_model"]: r["estimate"] for r in catalog["rows"] if r["model"] == "MI250X"} == {
        "on-demand": True, "on-prem": True,
    }  # fmt: skip
    assert not any(r["estimate"] for r in h100)
    broken = httpx.put(f"{url}/api/v1/prices", content=b"currency: usd\n", headers=AUTH)
    assert broken.status_code == 422 and "currency" in broken.json()["detail"]
    same = httpx.put(f"{url}/api/v1/prices", content=DEFAULT_CATALOG.read_bytes(), headers=AUTH)
    assert same.json() == {"repriced_from": None}
    rule = {"selector": "node", "value": "gpu-a-01", "pricing_model": "spot"}
    assert httpx.put(f"{url}/api/v1/pricing-rules", json=rule, headers=AUTH).status_code == 204
    assert httpx.get(f"{url}/api/v1/pricing-rules", headers=AUTH).json() == [{**rule, "key": ""}]
    bad = httpx.put(f"{url}/api/v1/pricing-rules", json={**rule, "selector": "node_label"}, headers=AUTH)
    assert bad.status_code == 422 and "label name" in bad.json()["detail"]
    removed = httpx.delete(f"{url}/api/v1/pricing-rules/node", params={"value": "gpu-a-01"}, headers=AUTH)
    assert removed.status_code == 204
    assert httpx.get(f"{url}/api/v1/pricing-rules", headers=AUTH).json() == []
