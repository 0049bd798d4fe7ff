"""Alert tables: alert instances, notification groups, silences, the delivery outbox, the nudge log and the monthly
statements queued.

They share the service's declarative base (:class:`finops.db.models.Base`) and so its metadata and Alembic
naming convention; the schema changes only through a migration in ``migrations/``.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, CheckConstraint, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from finops.db.models import Base
from finops.db.sqltypes import EpochSeconds

ALERT_STATES = ("firing", "resolved")
DELIVERY_STATUSES = ("pending", "delivered", "failed", "refused")


class AlertInstance(Base):
    """One alert: a rule's condition for one label set (Alertmanager's alert), firing or resolved.

    ``fingerprint`` identifies rule + labels (:func:`alerts.engine.fingerprint`); ``labels`` identify it and
    route it (team, rule, severity, job, node, …); ``annotations`` are what a message shows (summary, fields,
    dashboard page); ``figures`` the numbers behind them (money as decimal strings). [starts_at, ends_at): the
    condition held; ``ends_at`` NULL while firing, or the instant an event alert stops (month end for a budget).
    ``group_key`` is the notification group it was last routed to (:class:`AlertGroup`).
    """

    __tablename__ = "alert_instances"
    __table_args__ = (CheckConstraint("state IN ('firing', 'resolved')", name="state"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(16), unique=True)
    rule: Mapped[str] = mapped_column(String(64), index=True)
    labels: Mapped[dict[str, str]] = mapped_column(JSON)
    annotations: Mapped[dict[str, object]] = mapped_column(JSON)
    figures: Mapped[dict[str, object]] = mapped_column(JSON)
    severity: Mapped[str] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(16), index=True)
    starts_at: Mapped[datetime] = mapped_column(EpochSeconds)
    ends_at: Mapped[datetime | None] = mapped_column(EpochSeconds)
    last_evaluated_at: Mapped[datetime] = mapped_column(EpochSeconds)
    group_key: Mapped[str] = mapped_column(String(16), index=True)


class AlertGroup(Base):
    """A notification group (route + group labels) and its notification log: what was last sent and when.

    ``created_at`` starts ``group_wait``; ``notified_at`` / ``notified_firing`` / ``notified_resolved`` are the
    last notification (fingerprints), NULL/empty before the first; ``next_check_at`` is when the dispatcher
    looks at the group again (NULL: nothing left to do). ``version`` grows with every dispatch decision, so two
    dispatchers cannot both act on one state.
    """

    __tablename__ = "alert_groups"
    key: Mapped[str] = mapped_column(String(16), primary_key=True)
    route: Mapped[str] = mapped_column(String(128))
    labels: Mapped[dict[str, str]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(EpochSeconds)
    next_check_at: Mapped[datetime | None] = mapped_column(EpochSeconds, index=True)
    notified_at: Mapped[datetime | None] = mapped_column(EpochSeconds)
    notified_firing: Mapped[list[str]] = mapped_column(JSON)
    notified_resolved: Mapped[list[str]] = mapped_column(JSON)
    version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class AlertSilence(Base):
    """Mutes the alerts all of whose labels match every matcher (``team="vision"``) over [starts_at, ends_at)."""

    __tablename__ = "alert_silences"
    id: Mapped[int] = mapped_column(primary_key=True)
    matchers: Mapped[list[str]] = mapped_column(JSON)
    starts_at: Mapped[datetime] = mapped_column(EpochSeconds)
    ends_at: Mapped[datetime] = mapped_column(EpochSeconds, index=True)
    created_by: Mapped[str] = mapped_column(String(128))
    comment: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(EpochSeconds)


class AlertDelivery(Base):
    """The outbox: one message to one channel target, sent by the delivery worker.

    ``channel`` ``slack`` (``target``: the name of a configured webhook, never its URL), ``email``
    (``target``: the comma-separated recipients) or ``alertmanager`` (``target``: the name of a configured
    Alertmanager). ``payload`` is the rendered message (title, summary, fields, link, severity), or for Alertmanager
    ``{"alerts": [...]}``, the ``postableAlerts`` sent (:mod:`alerts.alertmanager`). ``status``: pending →
    delivered, refused (final answer, not retried) or failed (deadline passed); ``last_error`` is redacted.
    """

    __tablename__ = "alert_deliveries"
    __table_args__ = (
        Index("ix_alert_deliveries_status_next", "status", "next_attempt_at"),
        CheckConstraint("status IN ('pending', 'delivered', 'failed', 'refused')", name="status"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    group_key: Mapped[str | None] = mapped_column(String(16))
    channel: Mapped[str] = mapped_column(String(16))
    target: Mapped[str] = mapped_column(String(1024))
    title: Mapped[str] = mapped_column(String(255))
    payload: Mapped[dict[str, object]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(EpochSeconds)
    next_attempt_at: Mapped[datetime] = mapped_column(EpochSeconds)
    deadline: Mapped[datetime] = mapped_column(EpochSeconds)
    last_attempt_at: Mapped[datetime | None] = mapped_column(EpochSeconds)
    delivered_at: Mapped[datetime | None] = mapped_column(EpochSeconds)
    last_error: Mapped[str | None] = mapped_column(Text)


class NudgeLog(Base):
    """When a user was last sent a nudge of a kind (:mod:`alerts.nudges`, migration 0018): a user gets at most one
    message per kind every ``FINOPS_NUDGE_REPEAT_DAYS``. ``sent_at``: when the message was queued in the outbox;
    ``jobs``: the job ids it listed."""

    __tablename__ = "nudge_log"
    user: Mapped[str] = mapped_column(String(128), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32), primary_key=True)
    sent_at: Mapped[datetime] = mapped_column(EpochSeconds)
    jobs: Mapped[list[str]] = mapped_column(JSON)


class ShowbackStatement(Base):
    """A team's monthly showback statement, queued once (:mod:`alerts.showback`): the primary key (team, month) is
    what makes a second run queue nothing. ``month`` is the month's first instant; ``queued_at`` when its messages
    were put in the outbox, through ``route`` (a route name), as the outbox rows ``deliveries`` (ids)."""

    __tablename__ = "showback_statements"
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"), primary_key=True)
    month: Mapped[datetime] = mapped_column(EpochSeconds, primary_key=True)
    queued_at: Mapped[datetime] = mapped_column(EpochSeconds)
    route: Mapped[str] = mapped_column(String(128))
    deliveries: Mapped[list[int]] = mapped_column(JSON)
