"""The audit log (:mod:`finops.access.audit`) on both databases: each change writes exactly one entry with its actor,
action, subject and state before → after, in the change's transaction (a refused change writes none), a token's
secret and hash never appear, and the listing filters by time, actor and action."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from alerts.config import RouteConfig
from alerts.engine import enqueue
from alerts.models import AlertDelivery
from alerts.store import create_silence, expire_silence, retry_deliveries
from finops.access import api_tokens, audit
from finops.analysis.budgets import BudgetError, delete_budget, set_budget
from finops.db.models import AuditEntry, Node
from finops.errors import FinopsError
from finops.ingest import node_tokens
from finops.jobs.inventory import InventoryError, set_model
from finops.jobs.teams import delete_rule, map_account, set_rule
from finops.pricing.catalog import DEFAULT_CATALOG, CatalogError, PricingModel, load_catalog
from finops.pricing.rules import delete_pricing_rule, set_pricing_rule
from finops.pricing.store import import_catalog

ACTOR = "api-token:0123456789abcdef"
NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
CATALOG = load_catalog()


def _change(sessions: sessionmaker[Session], make: Callable[[Session], object]) -> list[audit.AuditView]:
    """Run ``make`` in a transaction of its own; the entries it wrote, oldest first."""
    with sessions() as session:
        last = session.scalar(select(func.max(AuditEntry.id))) or 0
    with sessions.begin() as session:
        make(session)
    with sessions() as session:
        return [e for e in reversed(audit.list_entries(session, limit=audit.MAX_LIMIT)) if e.id > last]


def _one(sessions: sessionmaker[Session], make: Callable[[Session], object], action: str, subject: str) -> Any:
    """The one entry ``make`` wrote, checked to be ``action`` on ``subject`` by :data:`ACTOR`; (before, after)."""
    (entry,) = _change(sessions, make)
    assert (entry.actor, entry.action, entry.subject) == (ACTOR, action, subject)
    return entry.before, entry.after


def _count(sessions: sessionmaker[Session]) -> int:
    with sessions() as session:
        return session.scalar(select(func.count()).select_from(AuditEntry)) or 0


def test_budgets_and_rules(sessions: sessionmaker[Session]) -> None:
    before, after = _one(
        sessions, lambda s: set_rule(s, "account", "", "cv", "vision", actor=ACTOR), "team_rule.set", "account cv"
    )
    assert before is None
    assert after == {"kind": "account", "key": "", "value": "cv", "team": "vision", "jobs_moved": 0}
    before, after = _one(sessions, lambda s: map_account(s, "cv", "nlp", actor=ACTOR), "team_rule.set", "account cv")
    assert (before["team"], after["team"]) == ("vision", "nlp")
    before, after = _one(
        sessions, lambda s: delete_rule(s, "account", "", "cv", actor=ACTOR), "team_rule.delete", "account cv"
    )
    assert before == {"kind": "account", "key": "", "value": "cv", "team": "nlp"} and after == {"jobs_moved": 0}
    assert _change(sessions, lambda s: delete_rule(s, "account", "", "cv", actor=ACTOR)) == []  # nothing to delete

    _one(sessions, lambda s: set_rule(s, "label", "team", "nlp", "nlp", actor=ACTOR), "team_rule.set", "label team=nlp")

    def budget(amount: str, project: str = "") -> Callable[[Session], object]:
        return lambda s: set_budget(s, "nlp", amount, NOW, "USD", project, catalog=CATALOG, actor=ACTOR)

    before, after = _one(sessions, budget("1000"), "budget.set", "team nlp month 2026-11")
    assert before is None
    assert after == {"team": "nlp", "project": "", "month": "2026-11", "amount": "1000.000000", "currency": "USD"}
    before, after = _one(sessions, budget("1250.5"), "budget.set", "team nlp month 2026-11")
    assert (before["amount"], after["amount"]) == ("1000.000000", "1250.500000")
    _one(sessions, budget("40", "llm"), "budget.set", "team nlp project llm month 2026-11")
    before, after = _one(
        sessions, lambda s: delete_budget(s, "nlp", NOW, "llm", actor=ACTOR), "budget.delete",
        "team nlp project llm month 2026-11",
    )  # fmt: skip
    assert before is not None and before["amount"] == "40.000000" and after is None
    assert _change(sessions, lambda s: delete_budget(s, "nlp", NOW, "llm", actor=ACTOR)) == []


def test_prices_pricing_rules_and_node_models(sessions: sessionmaker[Session], tmp_path: Path) -> None:
    before, after = _one(
        sessions, lambda s: set_pricing_rule(s, "node", "", "gpu-a-01", PricingModel.SPOT, actor=ACTOR),
        "pricing_rule.set", "node gpu-a-01",
    )  # fmt: skip
    assert before is None and after == {"selector": "node", "key": "", "value": "gpu-a-01", "pricing_model": "spot"}
    before, after = _one(
        sessions, lambda s: set_pricing_rule(s, "node", "", "gpu-a-01", PricingModel.RESERVED, actor=ACTOR),
        "pricing_rule.set", "node gpu-a-01",
    )  # fmt: skip
    assert (before["pricing_model"], after["pricing_model"]) == ("spot", "reserved")
    before, after = _one(
        sessions, lambda s: delete_pricing_rule(s, "node", "", "gpu-a-01", actor=ACTOR), "pricing_rule.delete",
        "node gpu-a-01",
    )  # fmt: skip
    assert before["pricing_model"] == "reserved" and after is None
    assert _change(sessions, lambda s: delete_pricing_rule(s, "node", "", "gpu-a-01", actor=ACTOR)) == []

    text = DEFAULT_CATALOG.read_text(encoding="utf-8")
    rows = sum(len(model.prices) for model in CATALOG.models.values())
    before, after = _one(
        sessions, lambda s: import_catalog(s, text, "site.yaml", CATALOG, actor=ACTOR), "prices.import",
        "price catalog site.yaml",
    )  # fmt: skip
    assert before == {
        "version": None, "source": None, "sha256": None, "currency": "USD", "models": len(CATALOG.models), "rows": rows
    }  # fmt: skip
    assert after["source"] == "site.yaml" and after["repriced_from"] is None and after["rows"] == rows
    assert isinstance(after["version"], int) and len(after["sha256"]) == 64
    euro = text.replace("currency: USD", "currency: EUR")
    again, latest = _one(
        sessions, lambda s: import_catalog(s, euro, "euro.yaml", CATALOG, actor=ACTOR), "prices.import",
        "price catalog euro.yaml",
    )  # fmt: skip
    assert again == {key: value for key, value in after.items() if key != "repriced_from"}
    assert latest["currency"] == "EUR" and latest["repriced_from"] is not None and latest["sha256"] != after["sha256"]
    assert text not in orjson.dumps([again, latest]).decode()

    with sessions.begin() as session:
        session.add_all(
            [Node(hostname="gpu-a-01", partitions="legacy"), Node(hostname="gpu-a-02", partitions="legacy")]
        )
    choices = sorted(CATALOG.models)
    before, after = _one(
        sessions, lambda s: set_model(s, "h100", resolve=CATALOG.resolve, choices=choices, partition="legacy",
                                      actor=ACTOR),
        "node.set_model", "partition legacy",
    )  # fmt: skip
    key = CATALOG.resolve("h100")
    assert before == {"models": {"gpu-a-01": None, "gpu-a-02": None}}
    assert after == {"models": {"gpu-a-01": key, "gpu-a-02": key}, "gpus_changed": 0}


def test_silences_and_retries(sessions: sessionmaker[Session]) -> None:
    ends = NOW + timedelta(hours=2)
    before, after = _one(
        sessions, lambda s: create_silence(s, ['team="vision"'], ends, NOW, created_by="ops", comment="move",
                                           actor=ACTOR),
        "silence.create", "silence 1",
    )  # fmt: skip
    assert before is None
    assert after == {
        "id": 1, "matchers": ['team="vision"'], "starts_at": NOW.isoformat(), "ends_at": ends.isoformat(),
        "created_by": "ops", "comment": "move",
    }  # fmt: skip
    later = NOW + timedelta(minutes=5)
    before, after = _one(sessions, lambda s: expire_silence(s, 1, later, actor=ACTOR), "silence.expire", "silence 1")
    assert before == {**after, "ends_at": ends.isoformat()} and after["ends_at"] == later.isoformat()
    assert _change(sessions, lambda s: expire_silence(s, 1, later, actor=ACTOR)) == []  # already ended
    with sessions() as session:
        (entry,) = audit.list_entries(session, action="silence.expire")
        assert entry.at == later

    with sessions.begin() as session:
        ids = enqueue(session, RouteConfig(slack=["a", "b", "c"]), {"title": "x"}, None, NOW, timedelta(hours=1))
        session.execute(update(AlertDelivery).where(AlertDelivery.id == ids[0]).values(status="failed"))
        session.execute(update(AlertDelivery).where(AlertDelivery.id == ids[1]).values(status="refused"))
    retried = later + timedelta(hours=1)
    before, after = _one(
        sessions, lambda s: retry_deliveries(s, retried, timedelta(hours=1), actor=ACTOR), "delivery.retry",
        f"deliveries {ids[0]}, {ids[1]}",
    )  # fmt: skip
    assert before == {"failed": [ids[0]], "refused": [ids[1]]}
    assert after == {
        "pending": ids[:2], "next_attempt_at": retried.isoformat(),
        "deadline": (retried + timedelta(hours=1)).isoformat(),
    }  # fmt: skip
    assert _change(sessions, lambda s: retry_deliveries(s, retried, timedelta(hours=1), actor=ACTOR)) == []


def test_tokens_are_audited_without_their_secret(sessions: sessionmaker[Session]) -> None:
    made: list[tuple[Any, str]] = []
    entries = _change(
        sessions,
        lambda s: made.append(node_tokens.create_token(s, "gpu-a-01", NOW, timedelta(days=90), actor=ACTOR)),
    )
    (row, node_text) = made[0]
    assert [(e.action, e.subject, e.before) for e in entries] == [("node_token.create", f"node token {row.id}", None)]
    expires = (NOW + timedelta(days=90)).isoformat()
    assert entries[0].after == {"id": row.id, "node": "gpu-a-01", "expires_at": expires, "revoked_at": None}
    later = NOW + timedelta(hours=1)
    before, after = _one(
        sessions, lambda s: node_tokens.revoke_token(s, node_text, later, actor=ACTOR), "node_token.revoke",
        f"node token {row.id}",
    )  # fmt: skip
    assert before == {**after, "revoked_at": None} and after["revoked_at"] == later.isoformat()
    assert _change(sessions, lambda s: node_tokens.revoke_token(s, row.id, later, actor=ACTOR)) == []

    entries = _change(
        sessions,
        lambda s: made.append(api_tokens.create_token(s, "team", NOW, team="vision", name="ci", actor=ACTOR)),
    )
    (api_row, api_text) = made[1]
    assert [(e.action, e.subject, e.before) for e in entries] == [("api_token.create", f"api token {api_row.id}", None)]
    assert entries[0].after == {
        "id": api_row.id, "role": "team", "team": "vision", "name": "ci", "expires_at": None, "revoked_at": None
    }  # fmt: skip
    before, after = _one(
        sessions, lambda s: api_tokens.revoke_token(s, api_row.id, later, actor=ACTOR), "api_token.revoke",
        f"api token {api_row.id}",
    )  # fmt: skip
    assert before["revoked_at"] is None and after["revoked_at"] == later.isoformat()

    with sessions() as session:
        logged = orjson.dumps([e.as_dict() for e in audit.list_entries(session)]).decode()
    for token, stored in ((node_text, row.secret_sha256), (api_text, api_row.secret_sha256)):
        secret = token.split("_", 2)[2]
        assert token not in logged and secret not in logged and stored not in logged
        assert audit.os_user_actor() not in logged  # only the actor given


def test_a_refused_change_writes_no_entry(sessions: sessionmaker[Session]) -> None:
    refused: list[tuple[Callable[[Session], object], type[Exception]]] = [
        (lambda s: set_budget(s, "ghost", "100", NOW, catalog=CATALOG, actor=ACTOR), BudgetError),
        (lambda s: set_budget(s, "ghost", "100", NOW, "EUR", catalog=CATALOG, allow_unknown_team=True, actor=ACTOR),
         BudgetError),
        (lambda s: set_rule(s, "queue", "", "x", "vision", actor=ACTOR), ValueError),
        (lambda s: set_pricing_rule(s, "rack", "", "r1", PricingModel.SPOT, actor=ACTOR), ValueError),
        (lambda s: import_catalog(s, "currency: [", "bad.yaml", CATALOG, actor=ACTOR), CatalogError),
        (lambda s: set_model(s, "h100", resolve=CATALOG.resolve, choices=[], node="nowhere", actor=ACTOR),
         InventoryError),
        (lambda s: create_silence(s, ["team"], NOW + timedelta(hours=1), NOW, actor=ACTOR), ValueError),
        (lambda s: create_silence(s, ['team="x"'], NOW - timedelta(hours=1), NOW, actor=ACTOR), ValueError),
        (lambda s: node_tokens.create_token(s, " ", NOW, actor=ACTOR), FinopsError),
        (lambda s: node_tokens.revoke_token(s, "0123456789abcdef", NOW, actor=ACTOR), FinopsError),
        (lambda s: api_tokens.create_token(s, "root", NOW, actor=ACTOR), FinopsError),
        (lambda s: set_rule(s, "account", "", "cv", "vision", actor=" "), ValueError),  # nobody to answer for it
    ]  # fmt: skip
    for make, error in refused:
        with pytest.raises(error), sessions.begin() as session:
            make(session)
    assert _count(sessions) == 0


def test_an_entry_is_rolled_back_with_its_change(sessions: sessionmaker[Session]) -> None:
    with pytest.raises(RuntimeError), sessions.begin() as session:
        set_rule(session, "account", "", "cv", "vision", actor=ACTOR)
        raise RuntimeError("the caller fails after the change")
    assert _count(sessions) == 0


def test_listing_filters_and_limits(sessions: sessionmaker[Session]) -> None:
    with sessions.begin() as session:
        for hour, actor, action in [
            (1, "os-user:ann", "budget.set"), (2, "os-user:bob", "budget.set"), (3, "os-user:ann", "team_rule.set"),
            (4, ACTOR, "budget.delete"),
        ]:  # fmt: skip
            audit.record(session, actor, action, f"thing {hour}", None, {"hour": hour}, NOW + timedelta(hours=hour))
        audit.record(session, "os-user:" + "x" * 400, "budget.set", "s" * 1000, None, None, NOW)
    with sessions() as session:

        def subjects(**given: Any) -> list[str]:
            return [e.subject for e in audit.list_entries(session, **given)]

        assert subjects()[:4] == ["thing 4", "thing 3", "thing 2", "thing 1"]
        assert subjects(since=NOW + timedelta(hours=2), until=NOW + timedelta(hours=4)) == ["thing 3", "thing 2"]
        assert subjects(actor="os-user:ann") == ["thing 3", "thing 1"]
        assert subjects(action="budget.set", since=NOW + timedelta(minutes=1)) == ["thing 2", "thing 1"]
        assert subjects(limit=2) == ["thing 4", "thing 3"]
        cut = audit.list_entries(session, until=NOW + timedelta(minutes=1))[0]
        assert len(cut.actor) == audit.ACTOR_MAX_LENGTH and len(cut.subject) == audit.SUBJECT_MAX_LENGTH
        for limit in (0, audit.MAX_LIMIT + 1):
            with pytest.raises(ValueError, match="limit"):
                audit.list_entries(session, limit=limit)
