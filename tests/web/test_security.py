"""Who may do what, tried as an attacker on the network would, over a real socket: one table of attempts (no token,
wrong token, an ingest credential on the REST API, a node's token for another node, a viewer writing, a team token
reading another team through every read endpoint, expired and revoked tokens, readings out of time, bursts over the
limit, oversized and gzip-bomb bodies), each with the status it must get and the database unchanged where it must
be; then no secret of the run in its logs.

Two teams share the hand-computed slice (``tests/support/scenario.py``): ``alpha`` (account ``acct-a``, user alice)
and ``beta`` (account ``acct-b``, user bob), each with a budget, budget events, a team rule, a firing alert and a
silence."""

from __future__ import annotations

import gzip
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from alerts.models import AlertInstance, AlertSilence
from finops.access.api_tokens import create_token as create_api_token
from finops.access.api_tokens import revoke_token as revoke_api_token
from finops.analysis.budgets import record_budget_events
from finops.analysis.idle import IdlePolicy, detect_idle
from finops.db.models import Budget, GpuSample, TeamRule
from finops.ingest.limits import IngestLimits
from finops.ingest.node_tokens import create_token as create_node_token
from finops.ledger.rollup import rollup
from finops.timeutil import to_epoch, utc_now
from finops.web.app import create_app
from finops.web.gzip_body import MAX_BODY_BYTES
from tests.support.servers import running

SHARED = "shared-ingest-s3cret"
SETTING = "api-setting-s3cret"
ACTOR = "system:test"
DAY = timedelta(days=1)
BURST = 50
"""The readings burst of the service under test: small, so that a burst is cheap to send."""


@dataclass
class Run:
    """The service under test and the credentials of the run."""

    url: str
    sessions: sessionmaker[Session]
    tokens: dict[str, str]
    month: str

    def headers(self, who: str | None) -> dict[str, str]:
        """``Authorization`` for ``who`` (a key of :attr:`tokens`, or raw text after ``raw:``), none for None."""
        if who is None:
            return {}
        token = who.removeprefix("raw:") if who.startswith("raw:") else self.tokens[who]
        return {"Authorization": f"Bearer {token}"}


def _readings(node: str, uuid: str, stamps: list[int]) -> dict[str, Any]:
    return {
        "node": node,
        "gpus": [{"uuid": uuid, "index": 0, "model": "NVIDIA H100 80GB HBM3"}],
        "series": [{"uuid": uuid, "ts": stamps, "utilization_ratio": [0.5] * len(stamps)}],
    }


NODE_A, NODE_B = "sec-a-01", "sec-b-01"
UUID_A, UUID_B = "GPU-aaaaaaaa-0000-0000-0000-00000000000a", "GPU-bbbbbbbb-0000-0000-0000-00000000000b"


@pytest.fixture
def run(loaded) -> Iterator[Run]:  # type: ignore[no-untyped-def]
    sessions, t0, _rate, pricing = loaded
    now = utc_now()
    tokens = {"setting": SETTING, "shared": SHARED}
    with sessions.begin() as session:
        for name, role, team in (("admin", "admin", None), ("viewer", "viewer", None), ("alpha", "team", "alpha")):
            tokens[name] = create_api_token(session, role, now, team=team, name=name, actor=ACTOR)[1]
        tokens["expired"] = create_api_token(session, "viewer", now - 2 * DAY, expires_in=DAY, actor=ACTOR)[1]
        revoked_row, tokens["revoked"] = create_api_token(session, "admin", now, actor=ACTOR)
        revoke_api_token(session, revoked_row.id, now, actor=ACTOR)
        tokens["node-a"] = create_node_token(session, NODE_A, now, actor=ACTOR)[1]
        detect_idle(session, t0, t0 + timedelta(hours=2), IdlePolicy(), pricing)
    month = f"{t0:%Y-%m}"
    limits = IngestLimits(readings_burst=BURST, readings_per_second=0.01)
    with running(create_app(sessions, SHARED, api_token=SETTING, limits=limits)) as url:
        admin = {"Authorization": f"Bearer {tokens['admin']}"}
        for account, team in (("acct-a", "alpha"), ("acct-b", "beta")):
            rule = {"kind": "account", "value": account, "team": team}
            assert httpx.put(f"{url}/api/v1/team-rules", json=rule, headers=admin).status_code == 200
            silence = {"matchers": [f'team="{team}"'], "ends_at": (now + timedelta(days=1)).isoformat()}
            assert httpx.post(f"{url}/api/v1/alerts/silences", json=silence, headers=admin).status_code == 201
            budget = {"amount": "0.01", "currency": "USD"}
            assert httpx.put(f"{url}/api/v1/budgets/{team}/{month}", json=budget, headers=admin).status_code == 204
        with sessions.begin() as session:
            rollup(session, pricing, to_epoch(t0 + timedelta(hours=2)))
            record_budget_events(session, t0 + timedelta(hours=2))
            for team in ("alpha", "beta"):
                session.add(
                    AlertInstance(
                        fingerprint=f"sec-{team}"[:16], rule="budget-threshold", labels={"team": team},
                        annotations={"title": f"{team} over budget"}, figures={}, severity="warning",
                        state="firing", starts_at=now, ends_at=None, last_evaluated_at=now, group_key=team,
                    )
                )  # fmt: skip
        yield Run(url, sessions, tokens, month)


def _count(sessions: sessionmaker[Session], model: type) -> int:
    with sessions() as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


READS = (
    "/api/v1/costs?group_by=team",
    "/api/v1/costs?group_by=job",
    "/api/v1/costs?group_by=user",
    "/api/v1/costs?group_by=node",
    "/api/v1/costs?group_by=gpu_model",
    "/api/v1/costs?group_by=job&format=csv",
    "/api/v1/budgets?month={month}",
    "/api/v1/idle-episodes",
    "/api/v1/rightsizing?by=job",
    "/api/v1/rightsizing?by=user",
    "/api/v1/rightsizing?by=team",
    "/api/v1/events",
    "/api/v1/team-rules",
    "/api/v1/alerts?state=all",
    "/api/v1/alerts/silences",
)
"""Every read route with team data (``start``/``end`` added where needed)."""


def _read(run: Run, path: str, who: str | None) -> httpx.Response:
    with run.sessions() as session:
        first = session.scalar(select(func.min(GpuSample.ts)))
    assert first is not None
    period = {"start": (first - timedelta(days=1)).isoformat(), "end": (utc_now() + timedelta(days=1)).isoformat()}
    params = period if "costs" in path or "idle" in path or "rightsizing" in path else {}
    return httpx.get(f"{run.url}{path.format(month=run.month)}", params=params or None, headers=run.headers(who))


def test_a_team_token_sees_only_its_team_through_every_read_route(run: Run) -> None:
    for path in READS:
        viewer = _read(run, path, "viewer")
        alpha = _read(run, path, "alpha")
        assert (viewer.status_code, alpha.status_code) == (200, 200), (path, viewer.text[:200], alpha.text[:200])
        if ("costs" in path and "gpu_model" not in path and "node" not in path) or "budgets" in path:
            assert "beta" in viewer.text or "bob" in viewer.text, (path, viewer.text[:300])
        assert "beta" not in alpha.text and "bob" not in alpha.text, (path, alpha.text[:300])
    by_team = _read(run, "/api/v1/costs?group_by=team", "alpha").json()["rows"]
    assert [row["team"] for row in by_team] == ["alpha"]
    for path, who in (("/api/v1/alerts/deliveries", "alpha"), ("/api/v1/audit", "alpha"), ("/api/v1/audit", "viewer")):
        assert _read(run, path, who).status_code == 403, (path, who)
    audit = _read(run, "/api/v1/audit?action=budget.set", "admin")
    admin_id = run.tokens["admin"].removeprefix("gfa_").split("_")[0]
    assert [(e["actor"], e["subject"].split()[1]) for e in reversed(audit.json())] == [
        (f"api-token:{admin_id}", "alpha"),
        (f"api-token:{admin_id}", "beta"),
    ], "each budget the admin token set, by that token"


@dataclass(frozen=True)
class Attempt:
    """One try: ``method`` ``path`` as ``who`` with ``body``; the status it must get, and a count that must not
    change (None: none checked)."""

    name: str
    method: str
    path: str
    who: str | None
    status: int
    body: bytes | None = None
    gzipped: bool = False
    unchanged: Callable[[sessionmaker[Session]], int] | None = None


def _samples(sessions: sessionmaker[Session]) -> int:
    return _count(sessions, GpuSample)


def _budgets(sessions: sessionmaker[Session]) -> int:
    with sessions() as session:
        return int(session.scalar(select(func.sum(Budget.amount))) * 100)


def _rules(sessions: sessionmaker[Session]) -> int:
    return _count(sessions, TeamRule)


def _silences(sessions: sessionmaker[Session]) -> int:
    return _count(sessions, AlertSilence)


def _attempts() -> list[Attempt]:
    now = int(time.time())
    json = orjson.dumps
    own = json(_readings(NODE_A, UUID_A, [now - 60]))
    other = json(_readings(NODE_B, UUID_B, [now - 60]))
    future = json(_readings(NODE_A, UUID_A, [now + 3600]))
    ancient = json(_readings(NODE_A, UUID_A, [now - 400 * 86400]))
    burst = json(_readings(NODE_A, UUID_A, list(range(now - 60 - BURST, now - 59))))
    budget = json({"amount": "1", "currency": "USD"})
    rule = json({"kind": "account", "value": "acct-b", "team": "alpha"})
    silence = json({"matchers": ['team=~".*"'], "ends_at": "2099-01-01T00:00:00Z"})
    bomb = gzip.compress(b" " * (MAX_BODY_BYTES + 1))
    ingest, costs, budgets = "/api/v1/ingest", "/api/v1/costs?group_by=team", "/api/v1/budgets/beta/{month}"
    return [
        Attempt("REST without a token", "GET", costs, None, 401),
        Attempt("REST with a wrong token", "GET", costs, "raw:not-a-token", 401),
        Attempt("REST with a made-up API token", "GET", costs, "raw:gfa_0123456789abcdef_x", 401),
        Attempt("REST with the shared ingest token", "GET", costs, "shared", 401),
        Attempt("REST with a node token", "GET", costs, "node-a", 401),
        Attempt("budget with the shared ingest token", "PUT", budgets, "shared", 401, budget, unchanged=_budgets),
        Attempt("REST with an expired API token", "GET", costs, "expired", 401),
        Attempt("REST with a revoked API token", "GET", costs, "revoked", 401),
        Attempt("viewer sets a budget", "PUT", budgets, "viewer", 403, budget, unchanged=_budgets),
        Attempt("team sets a budget", "PUT", budgets, "alpha", 403, budget, unchanged=_budgets),
        Attempt("team moves jobs by a rule", "PUT", "/api/v1/team-rules", "alpha", 403, rule, unchanged=_rules),
        Attempt("viewer silences every alert", "POST", "/api/v1/alerts/silences", "viewer", 403, silence,
                unchanged=_silences),
        Attempt("viewer imports prices", "PUT", "/api/v1/prices", "viewer", 403, b"currency: USD"),
        Attempt("team reads /metrics", "GET", "/metrics", "alpha", 403),
        Attempt("/metrics without a token", "GET", "/metrics", None, 401),
        Attempt("/metrics with the shared ingest token", "GET", "/metrics", "shared", 401),
        Attempt("/openapi.json without a token", "GET", "/openapi.json", None, 401),
        Attempt("/docs without a token", "GET", "/docs", None, 401),
        Attempt("viewer reads /metrics", "GET", "/metrics", "viewer", 200),
        Attempt("/healthz without a token", "GET", "/healthz", None, 200),
        Attempt("ingest without a token", "POST", ingest, None, 401, own, unchanged=_samples),
        Attempt("ingest with an API token", "POST", ingest, "admin", 401, own, unchanged=_samples),
        Attempt("node A's token for node B", "POST", ingest, "node-a", 403, other, unchanged=_samples),
        Attempt("a reading an hour ahead", "POST", ingest, "node-a", 422, future, unchanged=_samples),
        Attempt("a reading 400 days old", "POST", ingest, "node-a", 422, ancient, unchanged=_samples),
        Attempt("a batch over the burst", "POST", ingest, "node-a", 422, burst, unchanged=_samples),
        Attempt("a body over the limit", "POST", ingest, "node-a", 413, b"{" + b" " * MAX_BODY_BYTES + b"}",
                unchanged=_samples),
        Attempt("a gzip bomb", "POST", ingest, "node-a", 413, bomb, gzipped=True, unchanged=_samples),
        Attempt("a REST body over 4 MiB", "PUT", "/api/v1/prices", "admin", 413, b"#" * (5 * 2**20)),
        Attempt("node A's own batch", "POST", ingest, "node-a", 200, own),
    ]  # fmt: skip


def test_every_attempt_gets_its_status_and_changes_nothing_it_must_not(
    run: Run, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    got = []
    for attempt in _attempts():
        before = attempt.unchanged(run.sessions) if attempt.unchanged else None
        headers = run.headers(attempt.who) | {"Content-Type": "application/json"}
        if attempt.gzipped:
            headers["Content-Encoding"] = "gzip"
        response = httpx.request(
            attempt.method, f"{run.url}{attempt.path.format(month=run.month)}", content=attempt.body,
            headers=headers, timeout=60,
        )  # fmt: skip
        got.append((attempt.name, response.status_code))
        assert response.status_code == attempt.status, (attempt.name, response.status_code, response.text[:300])
        if attempt.unchanged is not None:
            assert attempt.unchanged(run.sessions) == before, attempt.name
    # Over the rate (a reading per 100 s, burst 50): two batches of 30 readings, the second refused whole.
    now = int(time.time())
    first, second = (orjson.dumps(_readings(NODE_A, UUID_A, list(range(now - k, now - k + 30)))) for k in (100, 200))
    assert httpx.post(f"{run.url}/api/v1/ingest", content=first, headers=run.headers("node-a")).status_code == 200
    before = _samples(run.sessions)
    over = httpx.post(f"{run.url}/api/v1/ingest", content=second, headers=run.headers("node-a"))
    assert over.status_code == 429 and int(over.headers["Retry-After"]) >= 1, over.text
    assert _samples(run.sessions) == before
    got.append(("a batch over the node's rate", over.status_code))
    assert len(got) == len(_attempts()) + 1
    for secret in run.tokens.values():
        assert secret not in caplog.text
