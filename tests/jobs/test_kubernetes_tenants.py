"""A tenant's pod choosing who pays and who it is: a pod in beta's namespace labelled ``team=alpha,user=alice`` is
billed to beta (the namespace's rule is never overridden by the pod's own labels unless the site says so), under
the claimed user ``claimed:alice``, in the ledger, the cost report and the REST API; on both databases."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from finops.access.api_tokens import create_token
from finops.analysis.report import cost_report
from finops.db.models import Job, Team
from finops.jobs.kubernetes import parse_nodes
from finops.jobs.kubernetes_import import import_pods
from finops.jobs.teams import set_precedence, set_rule
from finops.ledger.rollup import rollup
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import to_epoch
from finops.web.app import create_app
from tests.support.servers import running

FIXTURES = Path(__file__).parents[1] / "fixtures" / "kubernetes"
START = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)
ACTOR = "system:test"


def _listing(namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """One running 4-GPU pod (the fixture's ``llama-ft-0``) in ``namespace`` with only ``labels``."""
    document = orjson.loads((FIXTURES / "pods.json").read_bytes())
    pod = copy.deepcopy(next(i for i in document["items"] if i["metadata"]["name"] == "llama-ft-0"))
    pod["metadata"].update(namespace=namespace, labels=labels, uid=f"uid-{namespace}")
    return {"kind": "List", "items": [pod]}


def _import(session: Session, document: dict[str, Any]) -> None:
    nodes, _ = parse_nodes(orjson.loads((FIXTURES / "nodes.json").read_bytes()), source="nodes.json")
    result = import_pods(session, document, source="pods.json", listed_at=START + timedelta(hours=2), nodes=nodes)
    assert (result.jobs, result.errors) == (1, [])


def _rules(session: Session) -> None:
    set_rule(session, "namespace", "", "beta-ns", "beta", actor=ACTOR)
    set_rule(session, "label", "team", "alpha", "alpha", actor=ACTOR)


def _job(session: Session) -> tuple[str, str]:
    """(team, user) of the one pod."""
    team, user = session.execute(select(Team.name, Job.user).join(Team, Team.id == Job.team_id)).one()
    return team, user


def test_a_pod_in_betas_namespace_labelled_alpha_is_billed_to_beta_under_a_claimed_user(
    sessions: sessionmaker[Session],
) -> None:
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    with sessions.begin() as session:
        _rules(session)
        _import(session, _listing("beta-ns", {"team": "alpha", "user": "alice"}))
        assert _job(session) == ("beta", "claimed:alice")
        rollup(session, pricing, to_epoch(START + timedelta(hours=1)))
        by_team = {row.key: row for row in cost_report(session, START, START + timedelta(hours=1))}
        by_user = {row.key for row in cost_report(session, START, START + timedelta(hours=1), "user")}
        [job] = [
            r for r in cost_report(session, START, START + timedelta(hours=1), "job") if r.team != "__unallocated__"
        ]
    assert "alpha" not in by_team and by_team["beta"].allocated_cost > 0
    assert "alice" not in by_user and "claimed:alice" in by_user
    assert (job.team, job.user) == ("beta", "claimed:alice")


def test_labels_decide_only_where_the_site_lets_them(sessions: sessionmaker[Session]) -> None:
    with sessions.begin() as session:
        _rules(session)
        _import(session, _listing("beta-ns", {"team": "alpha"}))
        assert _job(session)[0] == "beta"
        # A site whose pipelines alone label pods puts labels first: the pod moves, and back again.
        assert set_precedence(session, "label", actor=ACTOR) == 1
        assert _job(session)[0] == "alpha"
        _import(session, _listing("beta-ns", {"team": "alpha"}))  # a re-import keeps the site's precedence
        assert _job(session)[0] == "alpha"
        assert set_precedence(session, "namespace", actor=ACTOR) == 1
        assert _job(session)[0] == "beta"
    with sessions.begin() as session:
        # A namespace no rule names (nor an account rule): the label still decides.
        _import(session, _listing("scratch", {"team": "alpha", "user": "bob"}))
        teams = dict(session.execute(select(Job.namespace, Team.name).join(Team, Team.id == Job.team_id)).all())
    assert teams == {"beta-ns": "beta", "scratch": "alpha"}


def test_an_account_rule_naming_the_namespace_also_beats_the_pods_labels(sessions: sessionmaker[Session]) -> None:
    with sessions.begin() as session:
        set_rule(session, "account", "", "beta-ns", "beta", actor=ACTOR)
        set_rule(session, "label", "team", "alpha", "alpha", actor=ACTOR)
        _import(session, _listing("beta-ns", {"team": "alpha"}))
        assert _job(session) == ("beta", "")


def test_a_user_label_longer_than_a_label_value_is_refused_by_name(sessions: sessionmaker[Session]) -> None:
    nodes, _ = parse_nodes(orjson.loads((FIXTURES / "nodes.json").read_bytes()), source="nodes.json")
    with sessions.begin() as session:
        result = import_pods(
            session, _listing("beta-ns", {"user": "a" * 64}), source="pods.json", listed_at=START, nodes=nodes
        )
    assert result.jobs == 0
    [error] = result.errors
    assert error.message == (
        "pods.json: pod beta-ns/llama-ft-0: field metadata.labels.user: longer than the 63 characters of a label value"
    )


def test_the_rest_api_shows_the_claimed_user_and_sets_the_precedence(sessions: sessionmaker[Session]) -> None:
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    now = datetime.now(UTC)
    with sessions.begin() as session:
        _rules(session)
        _import(session, _listing("beta-ns", {"team": "alpha", "user": "alice"}))
        rollup(session, pricing, to_epoch(START + timedelta(hours=1)))
        admin = create_token(session, "admin", now, actor=ACTOR)[1]
        alpha = create_token(session, "team", now, team="alpha", actor=ACTOR)[1]
    period = {"start": START.isoformat(), "end": (START + timedelta(hours=1)).isoformat()}
    with running(create_app(sessions, "ingest-only")) as url:
        admin_auth, alpha_auth = {"Authorization": f"Bearer {admin}"}, {"Authorization": f"Bearer {alpha}"}
        users = httpx.get(f"{url}/api/v1/costs", params={**period, "group_by": "user"}, headers=admin_auth).json()
        assert "claimed:alice" in {row["user"] for row in users["rows"]}
        jobs = httpx.get(f"{url}/api/v1/costs", params={**period, "group_by": "job"}, headers=alpha_auth).json()
        assert jobs["rows"] == []  # alpha's token sees nothing of beta's pod
        shown = httpx.get(f"{url}/api/v1/team-rules/precedence", headers=alpha_auth)
        assert shown.json() == {"precedence": "namespace"}
        refused = httpx.put(f"{url}/api/v1/team-rules/precedence", json={"precedence": "label"}, headers=alpha_auth)
        assert refused.status_code == 403
        bad = httpx.put(f"{url}/api/v1/team-rules/precedence", json={"precedence": "pod"}, headers=admin_auth)
        assert bad.status_code == 422
        moved = httpx.put(f"{url}/api/v1/team-rules/precedence", json={"precedence": "label"}, headers=admin_auth)
        assert moved.json() == {"jobs_moved": 1}
