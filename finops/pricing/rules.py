"""Which pricing model a node's GPUs are billed under: rules by node, Kubernetes node label or Slurm partition.

A node takes the pricing model of its first matching rule, in this order: its hostname (``node``), one of
its Kubernetes labels (``node_label`` ``key=value``, e.g. ``eks.amazonaws.com/capacityType=SPOT``), its
Slurm partition (``partition``; a node's partition is that of the newest job placed on it). A node no rule
selects is billed under the configured default (``FINOPS_PRICING_MODEL``). Changing a rule marks every ledger
hour of the affected nodes' GPUs dirty, so the ledger is re-priced on the next rollup, and is written to the audit
log (:mod:`finops.access.audit`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from finops.access import audit
from finops.db.hours import hours_between, mark_hours_repriced
from finops.db.ledger_tables import LedgerEntry
from finops.db.models import Gpu, Node, PricingRule
from finops.pricing.catalog import PricingModel
from finops.timeutil import utc_now

SELECTORS = ("node", "node_label", "partition")
"""Rule selectors, first match wins in this order."""


@dataclass(frozen=True, slots=True)
class PricingRuleView:
    """A rule as listed: selector, label key ("" unless ``node_label``), value, pricing model."""

    selector: str
    key: str
    value: str
    pricing_model: PricingModel


def _check(selector: str, key: str) -> None:
    if selector not in SELECTORS:
        raise ValueError(f"selector must be one of {', '.join(SELECTORS)}, not {selector!r}")
    if (selector == "node_label") != bool(key):
        raise ValueError("a node_label rule needs a label name (key=value); node and partition rules have none")


def set_pricing_rule(
    session: Session, selector: str, key: str, value: str, pricing_model: PricingModel, *, actor: str
) -> None:
    """Bill the GPUs of nodes matching ``selector`` ``key=value`` under ``pricing_model`` (replacing any rule
    for the same selector), and mark the ledger for re-pricing. Audited as ``pricing_rule.set`` by ``actor`` (the
    rule before, None if there was none, and after). ValueError for a bad selector or key; nothing is written then."""
    _check(selector, key)
    rule = _find(session, selector, key, value)
    before = _state(rule)
    if rule is None:
        rule = PricingRule(selector=selector, key=key, value=value, pricing_model=str(pricing_model))
        session.add(rule)
    else:
        rule.pricing_model = str(pricing_model)
    session.flush()
    _mark_ledger_dirty(session)
    audit.record(session, actor, "pricing_rule.set", _subject(selector, key, value), before, _state(rule))


def delete_pricing_rule(session: Session, selector: str, key: str, value: str, *, actor: str) -> None:
    """Remove a rule (no error if absent) and mark the ledger for re-pricing. A rule removed is audited as
    ``pricing_rule.delete`` by ``actor`` (the rule before, None after); removing none writes no entry. ValueError
    for a bad selector or key."""
    _check(selector, key)
    before = _state(_find(session, selector, key, value))
    session.execute(
        delete(PricingRule).where(PricingRule.selector == selector, PricingRule.key == key, PricingRule.value == value)
    )
    session.flush()
    _mark_ledger_dirty(session)
    if before is not None:
        audit.record(session, actor, "pricing_rule.delete", _subject(selector, key, value), before, None)


def _find(session: Session, selector: str, key: str, value: str) -> PricingRule | None:
    """The rule for ``selector`` ``key=value``, if any."""
    return session.scalars(
        select(PricingRule).where(PricingRule.selector == selector, PricingRule.key == key, PricingRule.value == value)
    ).one_or_none()


def _state(rule: PricingRule | None) -> dict[str, str] | None:
    """``rule`` as the audit log keeps it (selector, key, value, pricing_model), None for no rule."""
    if rule is None:
        return None
    return {"selector": rule.selector, "key": rule.key, "value": rule.value, "pricing_model": rule.pricing_model}


def _subject(selector: str, key: str, value: str) -> str:
    """A rule's selector as people read it: ``node gpu-a-01``, ``node_label k=v``, ``partition gpu``."""
    return f"{selector} {key}={value}" if key else f"{selector} {value}"


def list_pricing_rules(session: Session) -> list[PricingRuleView]:
    """Every rule in resolution order (node, node_label, partition), then by key and value."""
    order = {selector: i for i, selector in enumerate(SELECTORS)}
    rules = session.scalars(select(PricingRule)).all()
    views = [PricingRuleView(r.selector, r.key, r.value, PricingModel(r.pricing_model)) for r in rules]
    return sorted(views, key=lambda v: (order[v.selector], v.key, v.value))


def pricing_models_by_node(session: Session, default: PricingModel) -> dict[int, PricingModel]:
    """``{node id: pricing model}`` for every node a rule selects (others take ``default``, left out)."""
    rules = {(r.selector, r.key, r.value): PricingModel(r.pricing_model) for r in session.scalars(select(PricingRule))}
    if not rules:
        return {}
    chosen: dict[int, PricingModel] = {}
    for node in session.scalars(select(Node)):
        candidates = [("node", "", node.hostname)]
        candidates += [("node_label", k, v) for k, v in sorted((node.labels or {}).items())]
        if node.partition is not None:
            candidates.append(("partition", "", node.partition))
        model = next((rules[c] for c in candidates if c in rules), None)
        if model is not None and model != default:
            chosen[node.id] = model
    return chosen


def _mark_ledger_dirty(session: Session) -> None:
    """Queue every hour from the first in-service GPU on for rebuild, as re-priced (a rule can re-price any of them,
    and changes nothing else: :func:`finops.db.hours.mark_hours_repriced`)."""
    first = session.scalar(select(func.min(Gpu.in_service_from)))
    if first is None:
        first = session.scalar(select(func.min(LedgerEntry.hour)))
    if first is not None:
        mark_hours_repriced(session, hours_between(first, utc_now()))
