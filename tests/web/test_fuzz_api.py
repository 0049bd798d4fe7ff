"""The REST API fuzzed from its own OpenAPI document (Schemathesis) with each role's token, on SQLite and PostgreSQL:
no 5xx, no response that breaks the document, and no answer to team ``alpha``'s token that holds anything of team
``gamma``. The ingest route is fuzzed the same way with a node token.

Each role fuzzes a database of its own holding two teams (:func:`tests.support.two_clusters.seed_two_clusters`):
``alpha`` (account ``acct-a``, user alice, node ``gpu-a-01``, cluster ``orion``) and ``gamma`` (account ``acct-c``,
user carol, node ``gpu-b-01``, cluster ``vega``), each with a budget, budget events and a silence.

Generation is deterministic (``derandomize``) and bounded per operation (:data:`EXAMPLES`); the number of cases run
is written at the end of the run."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.config import SchemathesisConfig
from schemathesis.generation.meta import TestPhase
from sqlalchemy.orm import sessionmaker

from alerts.store import create_silence
from finops.access.api_tokens import create_token as create_api_token
from finops.analysis.budgets import record_budget_events, set_budget
from finops.db.engine import make_engine, session_factory, upgrade
from finops.ingest.node_tokens import create_token as create_node_token
from finops.timeutil import utc_now
from finops.web.app import INGEST_PATH, create_app
from tests.conftest import reset_postgres
from tests.support import scenario
from tests.support.two_clusters import NODE_B, UUID_B, seed_two_clusters

ACTOR = "system:test"
DAY = timedelta(days=1)
EXAMPLES = 12
"""Examples generated per operation and role, besides Schemathesis's deterministic boundary cases."""
GAMMA_MARKS = ("gamma", "carol", "acct-c", NODE_B, UUID_B, "vega")
"""What only team ``gamma``'s rows hold: none may be in an answer to ``alpha``'s token (unless the request held it)."""
FUZZ_NODE = "fuzz-n-01"
"""The node whose token fuzzes ingest: every generated batch is sent as this node's."""
BACKENDS = ("sqlite", "postgresql")
ROLES = ("admin", "viewer", "team")
CASES: dict[str, int] = {}
"""Cases run, per test: written at the end of the run (:func:`cases_run`)."""

CONFIG = SchemathesisConfig.from_dict({"checks": {"positive_data_acceptance": {"enabled": False}}})
"""Every check of Schemathesis but one: the document gives the parameters' types, not every rule a route checks
(an ISO 8601 time, a month, a known team, a label rule's key), so a value of the right type may be refused (422,
naming the field)."""
schema = schemathesis.openapi.from_dict(create_app(sessionmaker(), None).openapi(), config=CONFIG)
"""The service's OpenAPI document, as ``/openapi.json`` serves it."""
FUZZ = settings(
    max_examples=EXAMPLES, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)


@dataclass
class Service:
    """The application under test and the token it is fuzzed with."""

    app: FastAPI
    token: str
    t0: datetime
    """When the seeded readings start (:func:`tests.support.scenario.start_hour`)."""


@pytest.fixture(scope="module", autouse=True)
def cases_run(request: pytest.FixtureRequest) -> Iterator[None]:
    """Write how many cases each test ran once the module's tests are done."""
    yield
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if capture is not None and reporter is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(f"\nSchemathesis cases run: {CASES}")
    # The leak check looked at rows: alpha's token was answered alpha's rows, a viewer's gamma's.
    for role, seen in (("team", "team: alpha's rows"), ("viewer", "viewer: gamma's rows")):
        assert not CASES.get(role) or CASES.get(seen), f"no {role} case was answered rows to judge"


@pytest.fixture(scope="module")
def service(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """``request.param``: ``(backend, role)``. A database of its own on ``backend`` with two teams' data, and the
    application on it with a token of ``role`` (``team``: alpha's; ``node``: node :data:`FUZZ_NODE`'s)."""
    backend, role = request.param
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / f'{role}.sqlite'}"
    else:
        url = request.getfixturevalue("postgres_run_url")
        reset_postgres(url)
    engine = make_engine(url)
    upgrade(engine)
    t0 = seed_two_clusters(url)
    sessions = session_factory(engine)
    now = utc_now()
    with sessions.begin() as session:
        set_budget(session, "gamma", Decimal("10"), now, actor=ACTOR)
        record_budget_events(session, scenario.slice_end(t0))
        create_silence(session, ['team="gamma"'], now + timedelta(days=1), now, comment="gamma eval", actor=ACTOR)
        if role == "node":
            token = create_node_token(session, FUZZ_NODE, now, actor=ACTOR)[1]
        else:
            team = "alpha" if role == "team" else None
            token = create_api_token(session, role, now, team=team, actor=ACTOR)[1]
    yield Service(create_app(sessions, None), token, t0)
    engine.dispose()


def _as(case: schemathesis.Case, token: str) -> dict[str, str]:
    """The case without a generated ``Authorization``; the header to send instead."""
    if case.headers:
        for name in [n for n in case.headers if n.lower() == "authorization"]:
            del case.headers[name]
    return {"Authorization": f"Bearer {token}"}


def _count(key: str) -> None:
    CASES[key] = CASES.get(key, 0) + 1


def _into_the_data(case: schemathesis.Case, t0: datetime) -> None:
    """Point a valid case generated at random to the seeded data: its period (``start``/``since`` a day before
    ``t0``, ``end``/``until`` a day after) and ``month`` (``t0``'s), which random text almost never is, so that the
    other parameters are fuzzed on routes that answer rows."""
    meta = case.meta
    if meta is None or meta.generation.mode != GenerationMode.POSITIVE or meta.phase.name != TestPhase.FUZZING:
        return
    if not isinstance(case.query, dict):
        return
    values = {"start": t0 - DAY, "since": t0 - DAY, "end": t0 + DAY, "until": t0 + DAY}
    for name, value in values.items():
        if name in case.query:
            case.query[name] = value.isoformat()
    if "month" in case.query:
        case.query["month"] = f"{t0:%Y-%m}"


@schema.exclude(path=INGEST_PATH).parametrize()
@pytest.mark.parametrize("service", [(b, r) for b in BACKENDS for r in ROLES], indirect=True, ids=lambda p: "-".join(p))
@FUZZ
def test_rest_api(case: schemathesis.Case, service: Service, request: pytest.FixtureRequest) -> None:
    _into_the_data(case, service.t0)
    response = case.call_and_validate(app=service.app, headers=_as(case, service.token))
    role = request.node.callspec.id.rsplit("-", 1)[-1]
    _count(role)
    sent, answer = repr((case.path_parameters, case.query, case.body)).lower(), response.text.lower()
    shown = [mark for mark in GAMMA_MARKS if mark.lower() in answer and mark.lower() not in sent]
    if role == "team":
        assert not shown, f"{case.method} {case.formatted_path} {case.query}: alpha's token was given {shown}"
        if "alpha" in answer and response.status_code == 200:
            _count("team: alpha's rows")
    elif shown and response.status_code == 200:
        _count(f"{role}: gamma's rows")


@schema.include(path=INGEST_PATH).parametrize()
@pytest.mark.parametrize("service", [(b, "node") for b in BACKENDS], indirect=True, ids=lambda p: "-".join(p))
@FUZZ
def test_ingest_api(case: schemathesis.Case, service: Service) -> None:
    # A valid batch is the token's node's; an invalid one is refused before its node is looked at.
    if case.meta is not None and case.meta.generation.mode == GenerationMode.POSITIVE and isinstance(case.body, dict):
        case.body["node"] = FUZZ_NODE
    case.call_and_validate(app=service.app, headers=_as(case, service.token))
    _count("node")
