"""From rules to the outbox: evaluation stores alert instances, dispatch decides per group and queues messages.

Two steps, each a function of the database and the time, so that a restart loses nothing and sends nothing
twice:

- :func:`evaluate` (after each ledger rollup), one transaction: take the unconsumed :mod:`finops.analysis.events`
  (:func:`finops.analysis.events.take_events`), run the rules (:mod:`alerts.rules`), store each alert under its
  fingerprint (rule + sorted labels): new ones fire, ones a rule no longer returns resolve, event alerts resolve
  when their period ends; route each firing alert to its group (first matching route, ``group_by`` labels) and
  ask for the group to be looked at now.
- :func:`dispatch` (every few seconds), one transaction per due group: mute silenced and inhibited alerts
  (:mod:`alerts.matchers`), take :func:`alerts.dispatch.decide`'s decision against the group's notification log,
  and when it says notify, write the log and one outbox row per channel target in that same transaction.

The outbox is then emptied by :mod:`alerts.delivery`. Semantics follow Alertmanager's dispatcher and its
notification pipeline (``dispatch/dispatch.go``, ``notify/notify.go``: inhibit and silence stages before the
dedup stage; ``send_resolved`` off still records the resolution in the log).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, delete, or_, select, text, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from alerts.config import RULE_NAMES, AlertConfig, RouteConfig
from alerts.dispatch import Alert, LogEntry, decide
from alerts.matchers import DEFAULT_INHIBITIONS, InhibitRule, Matcher, Silence, inhibited, parse_matcher, silenced
from alerts.models import AlertDelivery, AlertGroup, AlertInstance, AlertSilence
from alerts.render import Shown, message_to_payload, render_group
from alerts.rules.candidate import Candidate
from alerts.rules.data_quality import data_quality_candidates
from alerts.rules.idle import idle_candidates
from alerts.rules.silence import silence_candidates
from alerts.rules.spend import event_candidates
from alerts.rules.throttling import throttling_candidates
from finops.analysis.events import take_events
from finops.analysis.waste import ReasonPolicy
from finops.db.dialect import insert_ignoring_conflicts
from finops.savings.efficiency_policy import EfficiencyPolicy

log = logging.getLogger(__name__)

EVENT_RULES = frozenset({"budget-50", "budget-80", "budget-100", "budget-forecast", "spend-anomaly"})
"""Rules fed by events: their alerts end at a set time, not when a rule stops returning them."""
_BUDGET_EQUAL = ("team", "project", "month")
INHIBITIONS: tuple[InhibitRule, ...] = (
    *DEFAULT_INHIBITIONS,
    InhibitRule((Matcher("rule", "=", "budget-100"),), (Matcher("rule", "=~", "budget-50|budget-80"),), _BUDGET_EQUAL),
    InhibitRule((Matcher("rule", "=", "budget-80"),), (Matcher("rule", "=", "budget-50"),), _BUDGET_EQUAL),
)
"""A silent node's idle and throttling alerts are held back; a higher budget threshold supersedes lower ones of
the same team, project and month (crossing 50 and 80 % at once sends the 80 % message only)."""
RESOLVED_RETENTION = timedelta(days=30)
"""Resolved alerts are deleted this long after they ended."""
_EVALUATION_LOCK = 0x6770755F616C7274  # PostgreSQL advisory lock key: one evaluation at a time


def _digest(*parts: object) -> str:
    body = json.dumps(parts, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def fingerprint(rule: str, labels: Mapping[str, str]) -> str:
    """An alert's identity: 16 hex digits (64 bits, as Alertmanager's) of SHA-256 over the rule and its sorted
    labels, ``rule`` and ``severity`` left out (a severity change does not make a new alert)."""
    identity = sorted((k, v) for k, v in labels.items() if k not in ("rule", "severity"))
    return _digest(rule, identity)


def group_fingerprint(route: str, labels: Mapping[str, str]) -> str:
    """A notification group's key: 16 hex digits of SHA-256 over the route name and the ``group_by`` values."""
    return _digest("group", route, sorted(labels.items()))


@dataclass(frozen=True, slots=True)
class RuleInputs:
    """What the rules need besides the configuration: the idle policy's window and max gap (seconds) and threshold
    (utilisation ratio), the collector interval (seconds), the waste reasons' thresholds (the monthly showback's
    idle cost by reason) and the efficiency bands' and bottlenecks' (its efficiency sections)."""

    idle_window_seconds: int = 1800
    idle_max_gap_seconds: int = 150
    collector_interval_seconds: float = 10.0
    idle_threshold_ratio: float = 0.05
    reasons: ReasonPolicy = field(default_factory=ReasonPolicy)
    efficiency: EfficiencyPolicy = field(default_factory=EfficiencyPolicy)


@dataclass(frozen=True, slots=True)
class Evaluation:
    """What one evaluation did: events taken, alerts firing after it, alerts that started and resolved, rules
    that failed (their alerts were left as they were)."""

    events: int
    firing: int
    started: int
    resolved: int
    failed_rules: tuple[str, ...] = ()


def _condition_rules(
    session: Session, config: AlertConfig, inputs: RuleInputs, now: datetime
) -> list[tuple[tuple[str, ...], Callable[[], dict[str, list[Candidate]]]]]:
    rules = config.rules

    def silence() -> dict[str, list[Candidate]]:
        nodes, gpus = silence_candidates(
            session, now, inputs.collector_interval_seconds, rules.collector_silent, rules.gpu_lost
        )
        return {"collector-silent": nodes, "gpu-lost": gpus}

    return [
        (
            ("idle-gpu",),
            lambda: {
                "idle-gpu": idle_candidates(session, now, inputs.idle_window_seconds, inputs.idle_max_gap_seconds)
            },
        ),
        (
            ("throttling",),
            lambda: {
                "throttling": throttling_candidates(
                    session, now, rules.throttling, rules.collector_silent.intervals * inputs.collector_interval_seconds
                )
            },
        ),
        (("collector-silent", "gpu-lost"), silence),
        (
            ("data-quality",),
            lambda: {
                "data-quality": data_quality_candidates(session, now, rules.data_quality, inputs.idle_threshold_ratio)
            },
        ),
    ]


def _enabled(config: AlertConfig, rule: str) -> bool:
    try:
        return config.rules.get(rule).enabled
    except KeyError:
        return False


def evaluate(session: Session, config: AlertConfig, inputs: RuleInputs, now: datetime) -> Evaluation:
    """Run every enabled rule at ``now`` and store the result in the caller's transaction (module docstring).

    Events are consumed here, so committing this transaction is what makes them alerts; a rule that raises is
    logged and its alerts are left as they were (savepoint), the others go on. Logs one line: at INFO when events
    were taken, alerts started or resolved, or a rule failed; else at DEBUG.
    """
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _EVALUATION_LOCK})
    events = take_events(session, now)
    found: list[Candidate] = [c for c in event_candidates(events) if _enabled(config, c.rule)]
    judged: set[str] = {rule for rule in RULE_NAMES if rule not in EVENT_RULES}
    failed: list[str] = []
    for names, run in _condition_rules(session, config, inputs, now):
        if not any(_enabled(config, name) for name in names):
            continue
        try:
            with session.begin_nested():
                produced = run()
        except Exception:
            log.exception("alert rule %s failed; its alerts are left as they were", " / ".join(names))
            failed.extend(names)
            judged.difference_update(names)
            continue
        for name in names:
            if _enabled(config, name):
                found.extend(produced.get(name, []))

    wanted: dict[str, tuple[Candidate, dict[str, str]]] = {}
    for candidate in found:
        labels = {**candidate.labels, "rule": candidate.rule, "severity": config.rules.get(candidate.rule).severity}
        wanted[fingerprint(candidate.rule, labels)] = (candidate, labels)
    query = select(AlertInstance).where(
        or_(AlertInstance.state == "firing", AlertInstance.fingerprint.in_(list(wanted)))
    )
    instances = {instance.fingerprint: instance for instance in session.scalars(query)}
    started = resolved = 0
    for key, (candidate, labels) in wanted.items():
        instance = instances.get(key)
        if instance is None:
            instance = AlertInstance(fingerprint=key, rule=candidate.rule, group_key="")
            session.add(instance)
            instances[key] = instance
        if instance.state != "firing":  # new, or resolved and true again
            instance.state, instance.starts_at, instance.ends_at = "firing", candidate.starts_at, candidate.ends_at
            started += 1
        instance.labels, instance.severity = labels, labels["severity"]
        instance.annotations, instance.figures = candidate.annotations, candidate.figures
        instance.last_evaluated_at = now

    touched: set[str] = set()
    for key, instance in instances.items():
        if instance.state != "firing":
            continue
        ends = key not in wanted and (instance.rule in judged or not _enabled(config, instance.rule))
        if instance.rule in EVENT_RULES:
            ends = (instance.ends_at is not None and instance.ends_at <= now) or not _enabled(config, instance.rule)
        if ends:
            instance.state = "resolved"
            instance.ends_at = min(instance.ends_at, now) if instance.ends_at is not None else now
            resolved += 1
            if instance.group_key:
                touched.add(instance.group_key)
    touched |= _route(session, config, [i for i in instances.values() if i.state == "firing"], now)
    if touched:
        session.execute(
            update(AlertGroup)
            .where(
                AlertGroup.key.in_(sorted(touched)),
                or_(AlertGroup.next_check_at.is_(None), AlertGroup.next_check_at > now),
            )
            .values(next_check_at=now, version=AlertGroup.version + 1)
        )
    session.execute(
        delete(AlertInstance).where(AlertInstance.state == "resolved", AlertInstance.ends_at < now - RESOLVED_RETENTION)
    )
    session.flush()
    firing = sum(1 for i in instances.values() if i.state == "firing")
    log.log(
        logging.INFO if events or started or resolved or failed else logging.DEBUG,
        "alerts: %d events taken, %d firing, %d started, %d resolved%s",
        len(events),
        firing,
        started,
        resolved,
        f"; rules failed: {', '.join(failed)}" if failed else "",
    )
    return Evaluation(len(events), firing, started, resolved, tuple(failed))


def _route(session: Session, config: AlertConfig, firing: Sequence[AlertInstance], now: datetime) -> set[str]:
    """Give each firing alert its group (creating missing groups); returns the keys of their groups."""
    groups: dict[str, dict[str, Any]] = {}
    for instance in firing:
        name, route = config.route_for(instance.labels)
        group_labels = {label: instance.labels.get(label, "") for label in route.group_by}
        key = group_fingerprint(name, group_labels)
        instance.group_key = key
        groups.setdefault(key, {"key": key, "route": name, "labels": group_labels})
    insert_ignoring_conflicts(
        session,
        AlertGroup.__table__,  # type: ignore[arg-type]
        [
            {
                **group,
                "created_at": now,
                "next_check_at": now,
                "notified_firing": [],
                "notified_resolved": [],
                "version": 0,
            }
            for group in groups.values()
        ],
    )
    return set(groups)


# --- dispatch -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Dispatched:
    """What one dispatch pass did: groups decided, notifications made, outbox rows queued (their ids)."""

    groups: int = 0
    notifications: int = 0
    deliveries: list[int] = field(default_factory=list)


class _Conflict(RuntimeError):
    """Another dispatcher changed the group first."""


def inhibition_views(instance: AlertInstance) -> list[dict[str, str]]:
    """The label sets an alert is judged by for inhibition: an idle-GPU alert (one per job) once per node its
    GPUs are on, any other alert by its labels."""
    nodes = instance.figures.get("nodes") if isinstance(instance.figures, dict) else None
    if isinstance(nodes, list) and nodes:
        return [{**instance.labels, "node": str(node)} for node in nodes]
    return [dict(instance.labels)]


def is_muted(
    instance: AlertInstance, silences: Iterable[Silence], firing: Sequence[Mapping[str, str]], now: datetime
) -> bool:
    """Whether an alert is silenced at ``now`` or inhibited by one of the ``firing`` alerts' label sets."""
    if silenced(instance.labels, silences, now):
        return True
    return any(inhibited(view, firing, INHIBITIONS) for view in inhibition_views(instance))


def active_silences(session: Session, now: datetime) -> list[Silence]:
    """The silences in force at ``now``."""
    rows = session.scalars(select(AlertSilence).where(AlertSilence.starts_at <= now, AlertSilence.ends_at > now)).all()
    return [
        Silence(tuple(parse_matcher(m) for m in row.matchers), row.starts_at, row.ends_at, row.comment) for row in rows
    ]


def dispatch(
    sessions: sessionmaker[Session], config: AlertConfig, now: datetime, *, dashboard_url: str, deadline: timedelta
) -> Dispatched:
    """Decide every group due at ``now`` (module docstring); each in its own transaction, skipped when another
    dispatcher holds or changed it. Queued messages get ``deadline`` to be delivered."""
    with sessions() as session:
        due = session.scalars(
            select(AlertGroup.key).where(AlertGroup.next_check_at <= now).order_by(AlertGroup.next_check_at)
        ).all()
        if not due:
            return Dispatched()
        silences = active_silences(session, now)
        firing = [
            dict(labels)
            for labels in session.scalars(select(AlertInstance.labels).where(AlertInstance.state == "firing"))
        ]
    done = Dispatched()
    for key in due:
        try:
            with sessions.begin() as session:
                queued = _dispatch_group(session, key, config, now, silences, firing, dashboard_url, deadline)
        except _Conflict:
            log.info("alert group %s was decided by another dispatcher", key)
            continue
        except OperationalError as exc:  # SQLite: another writer committed first; decided again next pass
            log.info("alert group %s not decided now (%s); it is looked at again next pass", key, exc.orig)
            continue
        if queued is None:
            continue
        done = Dispatched(done.groups + 1, done.notifications + (1 if queued else 0), [*done.deliveries, *queued])
    return done


def _dispatch_group(
    session: Session,
    key: str,
    config: AlertConfig,
    now: datetime,
    silences: list[Silence],
    firing: list[dict[str, str]],
    dashboard_url: str,
    deadline: timedelta,
) -> list[int] | None:
    group = session.execute(
        select(AlertGroup)
        .where(AlertGroup.key == key, AlertGroup.next_check_at <= now)
        .with_for_update(skip_locked=True)
    ).scalar_one_or_none()
    if group is None:
        return None
    version = group.version
    notified = list(group.notified_firing)
    members = [
        m
        for m in session.scalars(
            select(AlertInstance).where(
                or_(
                    and_(AlertInstance.group_key == key, AlertInstance.state == "firing"),
                    AlertInstance.fingerprint.in_(notified),
                )
            )
        )
        if m.group_key == key or m.state == "resolved"
    ]
    visible = [m for m in members if not is_muted(m, silences, firing, now)]
    rules = {m.rule for m in members}
    route = config.route_named(group.route)
    timers = config.timers_for(route, next(iter(rules))) if len(rules) == 1 else route.timers(config.timers)
    last = LogEntry(group.notified_at, frozenset(notified)) if group.notified_at is not None else None
    alerts = [Alert(m.fingerprint, m.labels, m.state, m.starts_at, m.ends_at) for m in visible]  # type: ignore[arg-type]
    decision = decide(alerts, last, group.created_at, now, timers)
    queued: list[int] = []
    values: dict[str, Any] = {}
    if decision.notify:
        by_key = {m.fingerprint: m for m in visible}
        shown_firing = sorted((by_key[f] for f in decision.firing), key=lambda m: (m.starts_at, m.fingerprint))
        shown_resolved = [by_key[f] for f in sorted(decision.resolved) if _send_resolved(config, by_key[f].rule)]
        if (shown_firing or shown_resolved) and (route.slack or route.email):  # an Alertmanager route has no messages
            message = render_group(
                [Shown(m.rule, m.severity, m.annotations) for m in shown_firing],
                [Shown(m.rule, m.severity, m.annotations) for m in shown_resolved],
                group.labels,
                dashboard_url,
            )
            queued = enqueue(session, route, message_to_payload(message), key, now, deadline)
            log.info("alert group %s (%s): notification queued for %d targets", key, group.route, len(queued))
        values = {
            "notified_at": now,
            "notified_firing": sorted(decision.firing),
            "notified_resolved": sorted(decision.resolved),
        }
    next_check = decision.next_check
    still_firing = any(m.state == "firing" for m in members)
    if next_check is None and still_firing:  # all muted: look again when a silence may have ended
        next_check = now + timers.group_interval
    if next_check is None:
        result = session.execute(delete(AlertGroup).where(AlertGroup.key == key, AlertGroup.version == version))
    else:
        result = session.execute(
            update(AlertGroup)
            .where(AlertGroup.key == key, AlertGroup.version == version)
            .values(**values, next_check_at=next_check, version=version + 1)
        )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise _Conflict(key)
    return queued


def _send_resolved(config: AlertConfig, rule: str) -> bool:
    try:
        return config.rules.get(rule).send_resolved
    except KeyError:
        return True


def enqueue(
    session: Session,
    route: RouteConfig,
    payload: dict[str, Any],
    group_key: str | None,
    now: datetime,
    deadline: timedelta,
) -> list[int]:
    """Queue ``payload`` (a rendered message) for each of the route's Slack webhooks and, if it lists
    recipients, one e-mail to all of them; returns the new outbox ids (none for a route without targets)."""
    targets = [("slack", name) for name in route.slack]
    if route.email:
        targets.append(("email", ", ".join(route.email)))
    return queue(session, targets, payload, str(payload["title"]), group_key, now, deadline)


def queue(
    session: Session,
    targets: Sequence[tuple[str, str]],
    payload: dict[str, Any],
    title: str,
    group_key: str | None,
    now: datetime,
    deadline: timedelta,
) -> list[int]:
    """One pending outbox row per (channel, target), due now and carrying ``payload`` until ``now + deadline``;
    returns their ids."""
    rows = [
        AlertDelivery(
            group_key=group_key,
            channel=channel,
            target=target,
            title=title[:255],
            payload=payload,
            status="pending",
            attempts=0,
            created_at=now,
            next_attempt_at=now,
            deadline=now + deadline,
        )
        for channel, target in targets
    ]
    session.add_all(rows)
    session.flush()
    return [row.id for row in rows]
