"""The alerts package as the service runs it: configuration from settings, and the three scheduled jobs.

:class:`AlertService` is built once from :class:`finops.settings.combined.Settings` (rules file, webhooks, SMTP,
timing); :class:`AlertRunner` binds it to a session factory and a delivery worker. The scheduler calls
:meth:`AlertRunner.evaluate` right after each ledger rollup, :meth:`AlertRunner.deliver` every
``FINOPS_ALERT_DELIVERY_POLL_SECONDS``, and :meth:`AlertRunner.showback` on the first day of each month.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session, sessionmaker

from alerts.alertmanager import queue_updates
from alerts.config import AlertConfig, load_config
from alerts.delivery import BATCH, Channels, DeliveryWorker, Outcome, smtp_context
from alerts.engine import Dispatched, Evaluation, RuleInputs, dispatch, evaluate
from alerts.mail import SmtpSettings
from alerts.showback import NotSettled, Queued, queue_month
from alerts.store import prune_deliveries
from alerts.webhooks import WebhookPolicy
from finops.timeutil import previous_month_start, utc_now

if TYPE_CHECKING:
    from finops.settings.combined import Settings

log = logging.getLogger(__name__)

SCHEDULER_ACTOR = "system:scheduler"
"""Who the scheduled jobs' changes are audited as (the monthly statements queued)."""
MAX_BATCHES = 10
"""Batches sent per delivery pass at most; a row that failed is tried again on a later pass, not this one."""


@dataclass(frozen=True)
class AlertService:
    """Everything the alert jobs need: rules and routes, rule inputs, channels, dashboard URL, delivery deadline,
    the delivery poll interval (seconds), how often the rules are evaluated (the rollup interval) and how long
    finished outbox rows are kept."""

    config: AlertConfig = field(default_factory=AlertConfig)
    inputs: RuleInputs = field(default_factory=RuleInputs)
    channels: Channels = field(default_factory=Channels)
    dashboard_url: str = "http://127.0.0.1:8501"
    deadline: timedelta = timedelta(hours=1)
    poll_seconds: float = 5.0
    evaluation_interval: timedelta = timedelta(minutes=5)
    outbox_retention: timedelta = timedelta(days=90)

    @classmethod
    def from_settings(cls, settings: Settings) -> AlertService:
        """Read the rules file and the channel settings; :class:`alerts.config.AlertConfigError` for a bad file."""
        smtp = None
        if settings.alert_smtp_host:
            password = settings.alert_smtp_password
            smtp = SmtpSettings(
                host=settings.alert_smtp_host,
                port=settings.alert_smtp_port,
                sender=settings.alert_smtp_sender,
                tls=settings.alert_smtp_tls,
                username=settings.alert_smtp_username,
                password=None if password is None else password.get_secret_value(),
                ssl_context=smtp_context(settings.alert_smtp_ca_file),
            )
        policy = WebhookPolicy(
            allowed_hosts=frozenset(settings.alert_webhook_hosts),
            allow_private_addresses=settings.alert_webhook_allow_private,
        )
        return cls(
            config=load_config(settings.alert_rules),
            inputs=RuleInputs(
                idle_window_seconds=settings.idle_window_seconds,
                idle_max_gap_seconds=settings.idle_max_gap_seconds,
                collector_interval_seconds=settings.collector_interval_seconds,
                idle_threshold_ratio=settings.idle_threshold_ratio,
                reasons=settings.reason_policy,
                efficiency=settings.efficiency_policy,
            ),
            channels=Channels(
                slack_webhooks=settings.slack_webhooks,
                policy=policy,
                smtp=smtp,
                alertmanagers=settings.alert_alertmanagers,
            ),
            dashboard_url=settings.alert_dashboard_url,
            deadline=timedelta(seconds=settings.alert_delivery_deadline_seconds),
            poll_seconds=settings.alert_delivery_poll_seconds,
            evaluation_interval=timedelta(seconds=settings.rollup_interval_seconds),
            outbox_retention=timedelta(days=settings.alert_outbox_retention_days),
        )


class AlertRunner:
    """The alert jobs on one database: evaluation and dispatch + delivery. ``clock`` is injectable for tests."""

    def __init__(
        self,
        service: AlertService,
        sessions: sessionmaker[Session],
        *,
        clock: Callable[[], datetime] = utc_now,
        worker: DeliveryWorker | None = None,
    ) -> None:
        self.service = service
        self.sessions = sessions
        self.clock = clock
        self.worker = worker or DeliveryWorker(sessions, service.channels, clock=clock)

    def evaluate(self) -> Evaluation:
        """Run the rules now, store the alerts and queue the Alertmanager updates (one transaction)."""
        now = self.clock()
        service = self.service
        with self.sessions.begin() as session:
            evaluation = evaluate(session, service.config, service.inputs, now)
            queue_updates(
                session,
                service.config,
                now,
                evaluation_interval=service.evaluation_interval,
                dashboard_url=service.dashboard_url,
                deadline=service.deadline,
            )
        return evaluation

    def dispatch(self) -> Dispatched:
        """Decide the groups due now; queue their messages."""
        return dispatch(
            self.sessions,
            self.service.config,
            self.clock(),
            dashboard_url=self.service.dashboard_url,
            deadline=self.service.deadline,
        )

    def deliver(self, ids: Sequence[int] | None = None) -> tuple[Dispatched, list[Outcome]]:
        """Dispatch due groups, then send every due message (all batches); returns both results."""
        dispatched = self.dispatch()
        outcomes: list[Outcome] = []
        for _ in range(MAX_BATCHES):
            batch = self.worker.run_once(ids)
            outcomes.extend(batch)
            if len(batch) < BATCH or ids is not None:
                break
        return dispatched, outcomes

    def prune_outbox(self) -> int:
        """Remove the outbox rows finished and queued more than ``service.outbox_retention`` ago
        (:func:`alerts.store.prune_deliveries`); returns how many, logged when any."""
        with self.sessions.begin() as session:
            removed = prune_deliveries(session, self.clock() - self.service.outbox_retention)
        if removed:
            log.info(
                "alert outbox: %d finished deliveries older than %s removed", removed, self.service.outbox_retention
            )
        return removed

    def showback(
        self, month: datetime | None = None, teams: Sequence[str] | None = None, *, actor: str = SCHEDULER_ACTOR
    ) -> list[Queued]:
        """Queue the monthly statements of ``month`` (default: the month before the clock's) for every team, or for
        ``teams``, not queued yet (:func:`alerts.showback.queue_month`); the delivery job sends them.

        Scheduled (no ``month``): a month that is not settled yet (ledger hours pending a rollup) is logged and left
        to the next run. Given a ``month``: :class:`alerts.showback.NotSettled` is raised instead."""
        now = self.clock()
        chosen = month if month is not None else previous_month_start(now)
        service = self.service
        try:
            done = queue_month(
                self.sessions, service.config, chosen, now, dashboard_url=service.dashboard_url,
                deadline=service.deadline, idle_window_seconds=service.inputs.idle_window_seconds,
                reasons=service.inputs.reasons, efficiency=service.inputs.efficiency, actor=actor, teams=teams,
            )  # fmt: skip
        except NotSettled as exc:
            if month is not None:
                raise
            log.info("showback statements not queued yet: %s", exc)
            return []
        queued = [q.team for q in done if q.queued]
        untargeted = [q.team for q in done if not q.queued and q.queued_at is None]
        log.log(
            logging.INFO if queued or untargeted else logging.DEBUG,
            "showback %s: %d statements queued (%s), %d queued before, %d teams whose route has no e-mail or Slack "
            "target (%s)",
            f"{chosen:%Y-%m}", len(queued), ", ".join(queued) or "none", len(done) - len(queued) - len(untargeted),
            len(untargeted), ", ".join(untargeted) or "none",
        )  # fmt: skip
        return done

    def close(self) -> None:
        """Close the delivery worker's HTTP client."""
        self.worker.close()
