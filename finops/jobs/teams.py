"""Teams and the rules that give a job its team. Unmatched jobs land in ``__unmapped__``, never dropped.

A rule maps a Slurm ``account``, a Kubernetes ``namespace`` or a Kubernetes ``label`` (``key=value``, e.g.
``team=vision``) to a team. A job takes the team of its first matching rule in the order of the site's team rule
precedence (:data:`finops.db.models.TEAM_RULE_PRECEDENCES`, kept in the database so that every process applies the
same): by default ``namespace`` (namespace, account, label: a pod's own labels, which whoever creates the pod
writes, never override a rule the site set for its namespace), or ``label`` (label, namespace, account: the order
Kubecost's team allocation uses, for clusters where only trusted pipelines label pods). Changing a rule or the
precedence re-homes the jobs it decides and marks their ledger hours dirty, and is written to the audit log
(:mod:`finops.access.audit`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import bindparam, delete, select, update
from sqlalchemy.orm import Session

from finops.access import audit
from finops.db.hours import HourMarks
from finops.db.models import (
    DEFAULT_TEAM_RULE_PRECEDENCE,
    TEAM_RULE_KINDS,
    TEAM_RULE_PRECEDENCES,
    UNMAPPED_TEAM,
    Job,
    SiteOption,
    Team,
    TeamRule,
)
from finops.db.rows import get_or_create

REHOME_BATCH = 10_000
"""Jobs read per round trip when re-homing (:func:`rehome_jobs`)."""
PRECEDENCE_OPTION = "team_rule_precedence"
"""The :class:`finops.db.models.SiteOption` holding the team rule precedence."""


def team_by_name(session: Session, name: str) -> Team:
    """The team called ``name``, created if new."""
    return get_or_create(session, Team, name=name)


def team_ids_by_name(session: Session) -> dict[str, int]:
    """``{team name: id}`` of every team."""
    return {name: team_id for name, team_id in session.execute(select(Team.name, Team.id))}


@dataclass(frozen=True, slots=True)
class RuleView:
    """A team rule as shown and edited: ``kind`` (label|namespace|account), ``key`` (label name or ""),
    ``value`` and the team's name."""

    kind: str
    key: str
    value: str
    team: str


def precedence(session: Session) -> str:
    """The site's team rule precedence: a key of :data:`TEAM_RULE_PRECEDENCES` (``namespace`` unless set)."""
    value = session.get(SiteOption, PRECEDENCE_OPTION)
    return DEFAULT_TEAM_RULE_PRECEDENCE if value is None else value.value


def set_precedence(session: Session, name: str, *, actor: str) -> int:
    """Make ``name`` (a key of :data:`TEAM_RULE_PRECEDENCES`) the team rule precedence and re-home every job whose
    team changes. Returns how many jobs moved.

    Audited as ``team_rule.precedence`` by ``actor`` (before and after the name, and ``jobs_moved``) when it changes;
    setting the precedence in force re-homes (a no-op when the jobs agree) and writes no entry. Raises ValueError
    for an unknown name; nothing is written then."""
    if name not in TEAM_RULE_PRECEDENCES:
        raise ValueError(f"team rule precedence must be one of {', '.join(TEAM_RULE_PRECEDENCES)}, not {name!r}")
    before = precedence(session)
    option = session.get(SiteOption, PRECEDENCE_OPTION)
    if option is None:
        session.add(SiteOption(name=PRECEDENCE_OPTION, value=name))
    else:
        option.value = name
    session.flush()
    moved = rehome_jobs(session)
    if before != name:
        after = {"precedence": name, "jobs_moved": moved}
        audit.record(session, actor, "team_rule.precedence", "team rules", {"precedence": before}, after)
    return moved


class TeamRules:
    """All team rules and the site's precedence, loaded once, to resolve many jobs without a query each."""

    def __init__(self, session: Session) -> None:
        rows = session.execute(select(TeamRule.kind, TeamRule.key, TeamRule.value, TeamRule.team_id)).all()
        self._rules = {(kind, key, value): team_id for kind, key, value, team_id in rows}
        self.order = TEAM_RULE_PRECEDENCES[precedence(session)]
        """Rule kinds in the order they are tried."""
        self._unmapped: int | None = None
        self._session = session

    def team_id(self, account: str, namespace: str | None = None, labels: dict[str, str] | None = None) -> int:
        """The team id for a job with this Slurm ``account`` (for a pod: its namespace), Kubernetes
        ``namespace`` and ``labels``: the first rule matching in :attr:`order`, else ``__unmapped__``'s id.
        Several labels with rules: the first by label name decides."""
        for kind in self.order:
            team = self._match(kind, account, namespace, labels)
            if team is not None:
                return team
        if self._unmapped is None:
            self._unmapped = team_by_name(self._session, UNMAPPED_TEAM).id
        return self._unmapped

    def _match(self, kind: str, account: str, namespace: str | None, labels: dict[str, str] | None) -> int | None:
        if kind == "label":
            return next(
                (
                    self._rules[r]
                    for r in sorted(("label", k, v) for k, v in (labels or {}).items())
                    if r in self._rules
                ),
                None,
            )
        value = account if kind == "account" else namespace
        return None if value is None else self._rules.get((kind, "", value))


def team_for_job(session: Session, job: Job) -> int:
    """The team id ``job`` belongs to under the current rules."""
    return TeamRules(session).team_id(job.account, job.namespace, job.labels)


def _check_rule(kind: str, key: str) -> None:
    if kind not in TEAM_RULE_KINDS:
        raise ValueError(f"rule kind must be one of {', '.join(TEAM_RULE_KINDS)}, not {kind!r}")
    if (kind == "label") != bool(key):
        raise ValueError("a label rule needs a label name (key=value); account and namespace rules have none")


def set_rule(session: Session, kind: str, key: str, value: str, team_name: str, *, actor: str) -> int:
    """Map ``kind`` ``key=value`` (or ``value``) to ``team_name`` (created if new), replacing any rule for the
    same selector, and re-home every job whose team changes. Returns how many jobs moved.

    Audited as ``team_rule.set`` by ``actor``: before the rule (kind, key, value, team; None: no rule), after the
    rule and ``jobs_moved``. Raises ValueError for an unknown kind, a label rule without a key, or an
    account/namespace rule with one; nothing is written then.
    """
    _check_rule(kind, key)
    before = find_rule(session, kind, key, value)
    team = team_by_name(session, team_name)
    rule = session.scalars(
        select(TeamRule).where(TeamRule.kind == kind, TeamRule.key == key, TeamRule.value == value)
    ).one_or_none()
    if rule is None:
        session.add(TeamRule(kind=kind, key=key, value=value, team_id=team.id))
    else:
        rule.team_id = team.id
    session.flush()
    moved = rehome_jobs(session)
    after = {**asdict(RuleView(kind, key, value, team_name)), "jobs_moved": moved}
    audit.record(session, actor, "team_rule.set", rule_subject(kind, key, value), _state(before), after)
    return moved


def delete_rule(session: Session, kind: str, key: str, value: str, *, actor: str) -> int:
    """Remove a rule (no error if absent) and re-home the jobs it decided. Returns how many jobs moved.

    A rule removed is audited as ``team_rule.delete`` by ``actor``: before the rule (kind, key, value, team), after
    ``jobs_moved`` only. Removing no rule writes no entry. ValueError as :func:`set_rule`."""
    _check_rule(kind, key)
    before = find_rule(session, kind, key, value)
    session.execute(delete(TeamRule).where(TeamRule.kind == kind, TeamRule.key == key, TeamRule.value == value))
    session.flush()
    moved = rehome_jobs(session)
    if before is not None:
        subject = rule_subject(kind, key, value)
        audit.record(session, actor, "team_rule.delete", subject, _state(before), {"jobs_moved": moved})
    return moved


def rule_subject(kind: str, key: str, value: str) -> str:
    """A rule's selector as people read it: ``label team=nlp``, ``account cv``, ``namespace ml-train``."""
    return f"label {key}={value}" if kind == "label" else f"{kind} {value}"


def _state(rule: RuleView | None) -> dict[str, str] | None:
    """``rule`` as the audit log keeps it (kind, key, value, team), None for no rule."""
    return None if rule is None else asdict(rule)


def list_rules(session: Session) -> list[RuleView]:
    """Every rule, in resolution order (the kinds in the site's precedence) and then by key and value."""
    rows = session.execute(
        select(TeamRule.kind, TeamRule.key, TeamRule.value, Team.name).join(Team, Team.id == TeamRule.team_id)
    ).all()
    order = {kind: i for i, kind in enumerate(TEAM_RULE_PRECEDENCES[precedence(session)])}
    return sorted((RuleView(*row) for row in rows), key=lambda r: (order[r.kind], r.key, r.value))


def find_rule(session: Session, kind: str, key: str, value: str) -> RuleView | None:
    """The rule for ``kind`` ``key=value`` (or ``value``), if there is one.

    Raises ValueError like :func:`set_rule` for an unknown kind or a key where none belongs (or is missing).
    """
    _check_rule(kind, key)
    row = session.execute(
        select(TeamRule.kind, TeamRule.key, TeamRule.value, Team.name)
        .join(Team, Team.id == TeamRule.team_id)
        .where(TeamRule.kind == kind, TeamRule.key == key, TeamRule.value == value)
    ).one_or_none()
    return None if row is None else RuleView(*row)


def rehome_jobs(session: Session) -> int:
    """Give every job the team the rules now say, marking the ledger hours of moved jobs dirty.
    Returns how many jobs moved.

    Reads only the columns the rules and the hours need, in batches of :data:`REHOME_BATCH` rows, then updates
    the moved jobs in one executemany and marks the union of their hours in one insert: no ORM object per job,
    so a site with millions of jobs re-homes in memory proportional to the moved jobs. Moved jobs loaded in the
    session have their ``team_id`` expired, so they read the new team.
    """
    session.flush()
    rules = TeamRules(session)
    jobs: Any = Job.__table__
    query = select(jobs.c.id, jobs.c.account, jobs.c.namespace, jobs.c.labels, jobs.c.team_id, jobs.c.start,
                   jobs.c.end).execution_options(yield_per=REHOME_BATCH)  # fmt: skip
    moved: list[dict[str, int]] = []
    marks = HourMarks()
    for job in session.execute(query):
        team_id = rules.team_id(job.account, job.namespace, job.labels)
        if job.team_id != team_id:
            moved.append({"job": job.id, "team": team_id})
            marks.add_run(job.start, job.end)
    if moved:
        session.execute(update(jobs).where(jobs.c.id == bindparam("job")).values(team_id=bindparam("team")), moved)
        marks.mark(session)
        ids = {row["job"] for row in moved}
        for loaded in list(session.identity_map.values()):
            if isinstance(loaded, Job) and loaded.id in ids:
                session.expire(loaded, ["team_id"])
    return len(moved)


def map_account(session: Session, account: str, team_name: str, *, actor: str) -> int:
    """Map Slurm ``account`` to ``team_name``: :func:`set_rule` with kind ``account`` (audited as ``actor``'s)."""
    return set_rule(session, "account", "", account, team_name, actor=actor)
