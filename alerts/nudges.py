"""Nudges sent: each user's findings (:mod:`finops.savings.nudges`) as one message per kind, through the alert
outbox, at most once per user and kind every ``FINOPS_NUDGE_REPEAT_DAYS`` (Job Defense Shield's rule: one e-mail
per user and alert every ``--days``, 7 by default).

One pass (:func:`send_nudges`, one transaction): find the nudges due now, render each (:func:`render_nudge`: the
jobs, their cost, the exact fix), address it (:class:`alerts.recipients.Recipients`), claim it in the nudge log
(:class:`alerts.models.NudgeLog`: the claim is a conditional update of the (user, kind) row, or its insert, so two
passes at once send one message) and queue one outbox row per target. The delivery worker (:mod:`alerts.delivery`)
sends them with its retries and its at-least-once, one-idempotency-key guarantee; a nudge claimed is not sent
again within the repeat interval even when its delivery fails (``gpu-finops alerts retry`` sends it again).
A nudge with no target is left unclaimed: it is sent once an address exists.

The scheduler runs :meth:`NudgeRunner.run` every ``FINOPS_NUDGE_SCHEDULE_SECONDS`` under its lease ``nudges``;
``gpu-finops nudges`` runs one pass on demand, or with ``--dry-run`` only says what it would send
(:func:`plan_nudges`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Literal

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from alerts.engine import queue
from alerts.message import Message
from alerts.models import NudgeLog
from alerts.recipients import Recipients
from alerts.render import dashboard_link, message_to_payload
from alerts.rules.candidate import duration_text, money
from finops.pricing.catalog import GIB, PriceCatalog, load_catalog
from finops.pricing.store import catalog_in_force
from finops.savings.nudges import (
    BUSY_INEFFICIENT,
    IDLE_RUNNING,
    LOW_EFFICIENCY,
    MIG_CANDIDATE,
    ZERO_UTILIZATION,
    Nudge,
    NudgeJob,
    NudgePolicy,
    find_nudges,
)
from finops.timeutil import utc_now

if TYPE_CHECKING:
    from finops.settings.combined import Settings

log = logging.getLogger(__name__)

MAX_JOBS = 10
"""Jobs a message lists at most (the costliest); then how many more."""
SEVERITY = {IDLE_RUNNING: "warning", ZERO_UTILIZATION: "warning", LOW_EFFICIENCY: "info", MIG_CANDIDATE: "info",
            BUSY_INEFFICIENT: "info"}  # fmt: skip
PAGE = {IDLE_RUNNING: "idle", ZERO_UTILIZATION: "idle", LOW_EFFICIENCY: "jobs", MIG_CANDIDATE: "jobs",
        BUSY_INEFFICIENT: "savings"}  # fmt: skip
"""The dashboard page each kind links to."""
NO_FIX = "make the job use its GPUs (is data loading or CPU work starving them?), or use fewer"
"""What a low-efficiency job is told when no request line fixes it."""

Status = Literal["due", "sent", "suppressed", "no-address"]


@dataclass(frozen=True)
class NudgeService:
    """What a nudge pass needs: the thresholds, the users' addresses, the repeat interval, the schedule (seconds;
    0: not scheduled), the dashboard URL of the links, the outbox deadline and the configured price catalog, whose
    MIG profiles the slices are chosen from unless a catalog was imported
    (:func:`finops.pricing.store.catalog_in_force`)."""

    policy: NudgePolicy = field(default_factory=NudgePolicy)
    recipients: Recipients = field(default_factory=Recipients)
    repeat: timedelta = timedelta(days=7)
    interval_seconds: int = 3600
    dashboard_url: str = ""
    deadline: timedelta = timedelta(hours=1)
    catalog: PriceCatalog = field(default_factory=load_catalog)

    @classmethod
    def from_settings(cls, settings: Settings) -> NudgeService:
        """From the ``FINOPS_NUDGE_*`` settings (an idle episode counts as open while its end is at most a rollup
        interval and the idle max gap old). AlertConfigError (a FinopsError) for a recipients file that cannot be
        read or is invalid; CatalogError for a price catalog file (``FINOPS_PRICE_CATALOG``) that cannot be."""
        policy = NudgePolicy(
            period=timedelta(days=settings.nudge_period_days),
            idle_running=timedelta(minutes=settings.nudge_idle_running_minutes),
            idle_fresh=timedelta(seconds=settings.rollup_interval_seconds + settings.idle_max_gap_seconds),
            zero_util_gpu_hours=settings.nudge_zero_util_gpu_hours,
            low_efficiency_ratio=settings.nudge_low_efficiency_ratio,
            low_efficiency_gpu_hours=settings.nudge_low_efficiency_gpu_hours,
            mig_max_utilization_ratio=settings.nudge_mig_max_utilization_ratio,
            mig_max_memory_bytes=int(settings.nudge_mig_max_memory_gib * GIB),
            inefficient_gpu_hours=settings.nudge_inefficient_gpu_hours,
            efficiency=settings.efficiency_policy,
            kinds=frozenset(settings.nudge_kinds),
        )
        return cls(
            policy=policy,
            recipients=Recipients.load(settings.nudge_recipients, settings.nudge_email_domain),
            repeat=timedelta(days=settings.nudge_repeat_days),
            interval_seconds=settings.nudge_schedule_seconds,
            dashboard_url=settings.alert_dashboard_url,
            deadline=timedelta(seconds=settings.alert_delivery_deadline_seconds),
            catalog=load_catalog(settings.price_catalog),
        )


@dataclass(frozen=True, slots=True)
class Planned:
    """A nudge found and what becomes of it: its ``message``, its ``targets`` ((channel, target) pairs), and its
    ``status``: ``due`` (would be sent), ``sent`` (queued as the outbox rows ``deliveries``), ``suppressed`` (the
    user was sent this kind at ``last_sent``, less than the repeat interval ago) or ``no-address``."""

    nudge: Nudge
    message: Message
    targets: tuple[tuple[str, str], ...]
    status: Status
    last_sent: datetime | None = None
    deliveries: tuple[int, ...] = ()


def plan_nudges(session: Session, service: NudgeService, now: datetime, *, user: str | None = None) -> list[Planned]:
    """The nudges due at ``now`` (``user``'s only when given), rendered and addressed, each ``due``,
    ``suppressed`` or ``no-address``; nothing is written."""
    found = find_nudges(session, now, service.policy, catalog=catalog_in_force(session, service.catalog), user=user)
    last = {
        (row.user, row.kind): row.sent_at
        for row in session.scalars(select(NudgeLog).where(NudgeLog.user.in_(sorted({n.user for n in found}))))
    }
    planned = []
    for nudge in found:
        targets = tuple(service.recipients.targets(nudge.user))
        sent = last.get((nudge.user, nudge.kind))
        status: Status = "due"
        if not targets:
            status = "no-address"
        elif sent is not None and now - sent < service.repeat:
            status = "suppressed"
        message = render_nudge(nudge, service.policy, service.dashboard_url, service.recipients.mentions(nudge.user))
        planned.append(Planned(nudge, message, targets, status, sent))
    return planned


def send_nudges(session: Session, service: NudgeService, now: datetime, *, user: str | None = None) -> list[Planned]:
    """:func:`plan_nudges`, then each due nudge claimed in the nudge log and queued in the outbox (module
    docstring), in the caller's transaction; one claimed meanwhile by another pass is returned ``suppressed``.
    Logs one line: at INFO when something was queued, else at DEBUG."""
    done = []
    for planned in plan_nudges(session, service, now, user=user):
        if planned.status == "due":
            jobs = [job.job_id for job in planned.nudge.jobs]
            if _claim(session, planned.nudge.user, planned.nudge.kind, jobs, now, service.repeat):
                payload = message_to_payload(planned.message)
                ids = queue(session, planned.targets, payload, planned.message.title, None, now, service.deadline)
                planned = replace(planned, status="sent", deliveries=tuple(ids))
            else:
                planned = replace(planned, status="suppressed")
        done.append(planned)
    counts = {status: sum(1 for p in done if p.status == status) for status in ("sent", "suppressed", "no-address")}
    log.log(
        logging.INFO if counts["sent"] else logging.DEBUG,
        "nudges: %d queued, %d held back (sent within %s), %d without an address",
        counts["sent"], counts["suppressed"], duration_text(service.repeat.total_seconds()), counts["no-address"],
    )  # fmt: skip
    return done


def _claim(session: Session, user: str, kind: str, jobs: list[str], now: datetime, repeat: timedelta) -> bool:
    """Record that ``user`` is sent ``kind`` at ``now``, unless they were less than ``repeat`` ago; True when this
    call recorded it. A conditional update (the row's lock makes a second pass wait, then find it recent) or, for a
    first message, an insert in a savepoint (a second pass's insert fails on the key)."""
    moved = session.execute(
        update(NudgeLog)
        .where(NudgeLog.user == user, NudgeLog.kind == kind, NudgeLog.sent_at <= now - repeat)
        .values(sent_at=now, jobs=jobs)
        .execution_options(synchronize_session=False)
    )
    if moved.rowcount:  # type: ignore[attr-defined]
        return True
    if session.execute(select(NudgeLog.user).where(NudgeLog.user == user, NudgeLog.kind == kind)).first():
        return False
    try:
        with session.begin_nested():
            session.add(NudgeLog(user=user, kind=kind, sent_at=now, jobs=jobs))
    except IntegrityError:
        return False
    return True


class NudgeRunner:
    """The scheduled nudge pass on one database (``clock`` injectable for tests)."""

    def __init__(
        self, service: NudgeService, sessions: sessionmaker[Session], *, clock: Callable[[], datetime] = utc_now
    ) -> None:
        self.service = service
        self.sessions = sessions
        self.clock = clock

    def run(self) -> list[Planned]:
        """Send the nudges due now (:func:`send_nudges`) in one transaction."""
        with self.sessions.begin() as session:
            return send_nudges(session, self.service, self.clock())


# --- the message ----------------------------------------------------------------------------------------------


def cost_text(cost: Decimal | None, unpriced_gpu_seconds: float, currency: str) -> str:
    """``"412.35 USD"``, ``"412.35 USD + 3.0 unpriced GPU-hours"``, or ``"unpriced"`` when nothing has a price."""
    if cost is None:
        return "unpriced"
    unpriced = f" + {unpriced_gpu_seconds / 3600:,.1f} unpriced GPU-hours" if unpriced_gpu_seconds > 0 else ""
    return money(cost, currency) + unpriced


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _percent(ratio: float | None) -> str:
    return "no reading" if ratio is None else f"{ratio * 100:.0f} %"


def _job_line(nudge: Nudge, job: NudgeJob) -> str:
    """What a message says of one job: its GPUs, the figure of the nudge, its cost, the fix."""
    cost = cost_text(job.cost, job.unpriced_gpu_seconds, job.currency)
    gpus = f"{_plural(job.gpus, 'GPU')} ({job.gpu_model})"
    if nudge.kind == IDLE_RUNNING:
        since = job.since or nudge.start
        idle_for = duration_text((nudge.end - since).total_seconds())
        what = f"{job.gpus_at_zero} of {gpus} idle since {since:%Y-%m-%d %H:%M} UTC ({idle_for}), {cost} so far"
    elif nudge.kind == ZERO_UTILIZATION:
        what = f"{gpus}, {job.gpus_at_zero} at 0 %: {job.gpu_seconds / 3600:,.1f} GPU-hours at 0 %, {cost}"
    elif nudge.kind == LOW_EFFICIENCY:
        hours = job.gpu_seconds / 3600
        what = f"{gpus}, {_percent(job.utilization)} mean utilisation over {hours:,.1f} GPU-hours, idle cost {cost}"
    elif nudge.kind == BUSY_INEFFICIENT:
        inactive = cost_text(job.inactive_cost, 0, job.currency)
        what = (
            f"{gpus}, {_percent(job.utilization)} utilisation but {_percent(job.sm_active)} SM activity over "
            f"{job.gpu_seconds / 3600:,.1f} GPU-hours, {cost} ({inactive} of it for empty SMs). Probable "
            f"bottleneck: {job.bottleneck} ({job.evidence})"
        )
    else:
        peak = (job.peak_memory_bytes or 0) / GIB
        saving = "" if job.saving is None else f"; on a {job.profile} slice {money(job.saving, job.currency)} less"
        what = (
            f"{gpus}, {_percent(job.utilization)} mean utilisation, memory peak {peak:,.1f} GiB, "
            f"{job.gpu_seconds / 3600:,.1f} GPU-hours, {cost}{saving}"
        )
    fix = job.fix or (NO_FIX if nudge.kind == LOW_EFFICIENCY else None)
    return f"{what}. Fix: {fix}" if fix else f"{what}."


def render_nudge(nudge: Nudge, policy: NudgePolicy, dashboard_url: str, mentions: Sequence[str] = ()) -> Message:
    """The message of ``nudge``: a title, a summary with its totals, facts (user, team, period, totals) and one field
    per job (:data:`MAX_JOBS` at most, costliest first, then how many more) with its fix; a link to the dashboard
    page of its kind under ``dashboard_url`` (none when empty); ``mentions`` for Slack."""
    user, teams = nudge.user, ", ".join(nudge.teams)
    who = f"user {user}" + (f" (team {teams})" if teams else "")
    days = f"{policy.period.total_seconds() / 86400:g} days"
    cost = cost_text(nudge.cost, nudge.unpriced_gpu_seconds, nudge.currency)
    count = len(nudge.jobs)
    period = f"{nudge.start:%Y-%m-%d %H:%M} – {nudge.end:%Y-%m-%d %H:%M} UTC"
    facts: list[tuple[str, str]] = [("User", user), ("Team", teams or "-")]
    if nudge.kind == IDLE_RUNNING:
        idle = sum(j.gpus_at_zero for j in nudge.jobs)
        title = f"Running {_plural(count, 'job')} with idle GPUs: user {user}"
        summary = (
            f"{_plural(count, 'running job')} of {who} {'has' if count == 1 else 'have'} kept "
            f"{_plural(idle, 'GPU')} idle for more than {duration_text(policy.idle_running.total_seconds())}, "
            f"costing {cost} so far. End what does not need them or make it use them: the site may end jobs whose "
            "GPUs stay idle."
        )
        facts += [("Idle GPUs", str(idle)), ("Cost so far", cost)]
    elif nudge.kind == ZERO_UTILIZATION:
        title = f"{nudge.gpu_hours:,.0f} GPU-hours at 0 % utilisation in {days}: user {user}"
        summary = (
            f"Over the last {days}, {nudge.gpu_hours:,.1f} GPU-hours of the GPUs held by jobs of {who} were at 0 % "
            f"utilisation, costing {cost}. Please fix this before submitting more jobs: each job below says the "
            "request that asks only for the GPUs it used."
        )
        facts += [("Period", period), ("GPU-hours at 0 %", f"{nudge.gpu_hours:,.1f}"), ("Cost", cost)]
    elif nudge.kind == LOW_EFFICIENCY:
        allocated = (nudge.allocated_gpu_seconds or 0) / 3600
        spent = cost_text(nudge.allocated_cost, 0, nudge.currency)
        title = f"GPU utilisation {_percent(nudge.utilization)} over {allocated:,.0f} GPU-hours in {days}: user {user}"
        summary = (
            f"Over the last {days}, the jobs of {who} used their GPUs at {_percent(nudge.utilization)} on average "
            f"over {allocated:,.1f} GPU-hours ({spent}); the idle part cost {cost}. Each job below says what would "
            "help."
        )
        facts += [
            ("Period", period),
            ("Mean GPU utilisation", _percent(nudge.utilization)),
            ("GPU-hours", f"{allocated:,.1f}"),
            ("Cost", spent),
            ("Idle cost", cost),
        ]
    elif nudge.kind == BUSY_INEFFICIENT:
        efficiency = policy.efficiency
        inactive = cost_text(nudge.inactive_cost, 0, nudge.currency)
        title = f"{_plural(count, 'job')} busy but inefficient in {days}: user {user}"
        summary = (
            f"Over the last {days}, {_plural(count, 'job')} of {who} kept {'its' if count == 1 else 'their'} GPUs "
            f"running kernels ({efficiency.busy_utilization_ratio * 100:.0f} % utilisation or more) while SM activity "
            f"stayed below {efficiency.ineffective_ratio * 100:.0f} %: most of the SMs sat empty. They cost {cost}, "
            f"{inactive} of it for empty SMs. Each job below says its probable bottleneck, the evidence and what "
            "usually fixes it."
        )
        facts += [("Period", period), ("GPU-hours", f"{nudge.gpu_hours:,.1f}"), ("Cost", cost),
                  ("Inactive cost", inactive)]  # fmt: skip
    else:
        saving = "" if nudge.saving is None else f", {money(nudge.saving, nudge.currency)} less on MIG slices"
        title = f"{_plural(count, 'job')} a MIG slice would serve: user {user}"
        summary = (
            f"Over the last {days}, {_plural(count, 'job')} of {who} used at most "
            f"{policy.mig_max_utilization_ratio * 100:.0f} % of a GPU and at most "
            f"{policy.mig_max_memory_bytes / GIB:g} GiB of its memory: a MIG slice of a GPU serves such a job at a "
            f"fraction of the cost. They cost {cost}{saving}. Each job below says the slice to ask for."
        )
        facts += [("Period", period), ("Cost", cost)]
        if nudge.saving is not None:
            facts.append(("Saving on MIG", money(nudge.saving, nudge.currency)))
    jobs = [(f"Job {job.job_id}" + (f" ({job.name})" if job.name else ""), _job_line(nudge, job)) for job in nudge.jobs]
    if len(jobs) > MAX_JOBS:
        jobs = [*jobs[:MAX_JOBS], ("More", f"{len(jobs) - MAX_JOBS} more jobs")]
    url = dashboard_link(dashboard_url, {"page": PAGE[nudge.kind]})
    return Message(
        title=title,
        summary=summary,
        fields=[*facts, *jobs],
        link=None if url is None else ("Open in gpu-finops", url),
        severity=SEVERITY[nudge.kind],
        mentions=tuple(mentions),
    )
