"""The service's periodic work on APScheduler 3.x: ledger rollup with idle detection, budget status and, when a
Prometheus URL is configured, the pull of dcgm-exporter telemetry
(:class:`finops.ingest.prometheus_pull.ScheduledPull`). With alerts (:class:`alerts.service.AlertRunner`): rule
evaluation right after each rollup, dispatch plus delivery of alert messages every few seconds, and the previous
month's showback statements on the first day of each month (:data:`SHOWBACK_SCHEDULE`). With nudges
(:class:`alerts.nudges.NudgeRunner`): the per-user messages about wasteful jobs queued every
``FINOPS_NUDGE_SCHEDULE_SECONDS`` (delivered by the alert delivery job).

Runs in the ``serve`` process by default (``--no-scheduler`` leaves it to another process). Each job
opens its own session and transaction; a failing run is logged by APScheduler and retried next interval.
With :class:`finops.service.leases.JobLeases` (PostgreSQL), any number of processes run the scheduler and each job
runs on the holder of its lease only, its commits fenced by the lease; the cost-metrics refresh, which fills this
process's own ``/metrics``, runs everywhere.

Logging: a run with nothing to do logs at DEBUG; a rollup that took in something new logs one INFO line
(:class:`RollupProgress` says what is new). APScheduler's own line per run is left to its loggers, which
:func:`finops.cli.base.log_to_stderr` sets to WARNING.

Shutdown (:class:`RunningJobs`): the jobs' database work is stopped at once (:class:`finops.db.stopping.StopSwitch`):
a run under way fails its next or current statement, its transaction rolls back (a rollup's whole transaction: the
ledger stays as it was before it, and its hours stay dirty for the next one), and the process waits a bounded time
for the runs to end.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from apscheduler.events import EVENT_SCHEDULER_SHUTDOWN
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger
from sqlalchemy import BigInteger, func, select, type_coerce
from sqlalchemy.orm import Session, sessionmaker

from finops.analysis.anomalies import record_anomaly_events
from finops.analysis.budgets import record_budget_events
from finops.analysis.idle import IdlePolicy, rejudge_idle
from finops.analysis.idle_carry import Settled
from finops.analysis.idle_prices import claim_repriced_hours, release_repriced_hours
from finops.db.hours import ledger_built_until
from finops.db.ledger_tables import LedgerEntry
from finops.db.stopping import StopSwitch
from finops.ingest.partitions import Pruned, create_upcoming_partitions, prune_samples
from finops.jobs.job_map import reconcile_job_map
from finops.ledger.metering_state import metered_windows
from finops.ledger.rollup import TRANSACTION_HOURS, rollup
from finops.ledger.rollup_result import RollupResult, recount
from finops.pricing.catalog import Pricing
from finops.pricing.store import pricing_in_force
from finops.service.cost_metrics import CostMetrics
from finops.service.leases import JobLeases, LeaseLost
from finops.timeutil import HOUR, from_epoch, to_epoch, utc_now

if TYPE_CHECKING:
    from alerts.nudges import NudgeRunner
    from alerts.service import AlertRunner
    from finops.ingest.prometheus_pull import ScheduledPull
    from finops.ingest.tsdb_source import TsdbTelemetry
    from finops.jobs.slurm_import import ScheduledSacct

log = logging.getLogger(__name__)

SHOWBACK_SCHEDULE: dict[str, Any] = {"day": 1, "hour": "*", "minute": 10, "misfire_grace_time": 3000}
"""When the previous month's showback statements are queued: APScheduler cron fields, every hour at :10 on the first
day of each month (UTC). Each team's statement is queued once (:mod:`alerts.showback`): the first run after the
month's last ledger hours are rolled up queues them, the later runs find them queued; a run up to 50 minutes late
(the process was busy or restarting) still runs."""


@dataclass
class RollupProgress:
    """Where the scheduler's rollups have got to, to tell a rollup that took in something new from one that only
    brought the ledger's newest hour up to now (which every rollup does: capacity accrues without readings).

    ``hour``: the newest ledger hour (epoch seconds) the previous rollup built, None before the first;
    ``metered``: the readings the ledger counted (``sample_count``) in that hour and after, once it was built.
    """

    hour: int | None = None
    metered: int = 0

    def took_in_news(self, session: Session, rebuilt: Sequence[int], built: RollupResult) -> bool:
        """Whether the rollup that just rebuilt the hours ``rebuilt`` (epoch starts) and wrote ``built`` took in
        something new: hours before the previous rollup's newest (their readings, jobs or prices changed), or more
        readings from that hour on than the previous rollup counted; the first rollup, any GPU time written. Then
        moves on to this rollup's newest hour. Reads the ledger rows of those hours (one or two, usually)."""
        newest = max(rebuilt)
        since = newest if self.hour is None else min(self.hour, newest)
        hour = type_coerce(LedgerEntry.hour, BigInteger)
        counted = dict(
            session.execute(
                select(hour, func.sum(LedgerEntry.sample_count))
                .where(LedgerEntry.hour >= from_epoch(since))
                .group_by(hour)
            ).all()
        )
        if self.hour is None:
            news = built.priced_gpu_seconds > 0 or bool(built.unpriced_gpu_seconds)
        else:
            news = min(rebuilt) < self.hour or sum(int(n) for n in counted.values()) > self.metered
        self.hour = newest
        self.metered = sum(int(n) for h, n in counted.items() if h >= newest)
        return news


def run_rollup(
    sessions: sessionmaker[Session],
    pricing: Pricing,
    policy: IdlePolicy,
    progress: RollupProgress | None = None,
    tsdb: TsdbTelemetry | None = None,
) -> tuple[RollupResult, int]:
    """With the price catalog in force (the newest imported, else ``pricing``'s): rebuild dirty ledger hours up to now
    (at most :data:`~finops.ledger.rollup.TRANSACTION_HOURS` a transaction, each committed with the idle episodes
    of its hours, so that a rollup stopped or killed keeps what it finished), move jobs onto the GPUs the samples
    it metered as new name (:func:`finops.jobs.job_map.reconcile_job_map` over
    :func:`finops.ledger.metering_state.metered_windows`; when one moves, its hours are rebuilt again in the same
    transaction), re-judge the idle episodes of the
    hours rebuilt (:func:`finops.analysis.idle.rejudge_idle`: readings that
    arrived late, a spool after an outage or a backfill, get their episodes too; the hours only a price change
    marked, :func:`finops.analysis.idle_prices.claim_repriced_hours`, have theirs re-priced), and record budget
    threshold and spend anomaly events (each once).

    Logs what it did in one line: at INFO, unless ``progress`` (the scheduler's) says it took in nothing new and
    it stored no idle episode, then at DEBUG.

    With ``tsdb`` (``FINOPS_TELEMETRY_SOURCE=tsdb``), the GPUs with readings in the TSDB are registered first
    (:meth:`finops.ingest.tsdb_source.TsdbTelemetry.discover`), and the hours are metered and idle episodes judged
    from that TSDB by PromQL (:attr:`~finops.ingest.tsdb_source.TsdbTelemetry.meter`,
    :meth:`~finops.ingest.tsdb_source.TsdbTelemetry.idle_readings`) instead of ``gpu_samples``, the rebuilt hours'
    node fabric and storage rates read from the collectors' counters there first
    (:meth:`~finops.ingest.tsdb_source.TsdbTelemetry.store_node_rates`).

    Returns (what the rollup rebuilt: hours, GPU-seconds priced and unpriced; idle episodes stored).
    """
    now = utc_now()
    until = to_epoch(now)
    with sessions.begin() as session:
        pricing = pricing_in_force(session, pricing)
        if tsdb is not None:
            tsdb.discover(session, until)
    build = functools.partial(
        rollup, pricing=pricing, until=until, meter=None if tsdb is None else tsdb.meter, most_hours=TRANSACTION_HOURS
    )
    built: RollupResult | None = None
    rebuilt_all: list[int] = []
    episodes = 0
    while built is None or built.pending_hours:
        rebuilt: list[int] = []
        with sessions.begin() as session:
            repriced = claim_repriced_hours(session, until)
            previous = ledger_built_until(session)
            cursors: dict[int, int] = {}
            part = build(session, rebuilt=rebuilt, cursors_before=cursors)
            found = dict(cursors)
            if rebuilt and reconcile_job_map(session, metered_windows(session, cursors, min(rebuilt))):
                # The moved jobs' hours, marked dirty, rebuilt with their new placement; not past this transaction's
                # last hour (the readings of a backlog's next hours are metered, and reconciled, by the next one).
                again: list[int] = []
                cursors = {}
                second = build(session, rebuilt=again, cursors_before=cursors, before=max(rebuilt) + HOUR)
                rebuilt.extend(sorted(set(again) - set(rebuilt)))
                part = recount(
                    session, rebuilt, part.readings_metered + second.readings_metered,
                    part.late_gpus + second.late_gpus, second.pending_hours,
                )  # fmt: skip
                # Readings committed since the first rollup that the second metered as new: a job they move has its
                # hours marked dirty again, for the next rollup to rebuild.
                reconcile_job_map(session, metered_windows(session, cursors, min(rebuilt)))
                found |= {gpu: min(cursor, found.get(gpu, cursor)) for gpu, cursor in cursors.items()}
            release_repriced_hours(session, repriced - set(rebuilt))
            if tsdb is not None:
                tsdb.store_node_rates(session, rebuilt)
            settled = Settled(until, None if previous is None else to_epoch(previous), found)
            episodes += rejudge_idle(session, rebuilt, policy, pricing, tsdb, repriced & set(rebuilt), settled)
        stalled = built is not None and part.pending_hours >= built.pending_hours
        built = part if built is None else built.then(part)
        rebuilt_all.extend(rebuilt)
        if stalled:
            break  # writers keep marking hours faster than they are rebuilt: the next rollup goes on
    with sessions.begin() as session:
        record_budget_events(session, now)
        record_anomaly_events(session, now)
        news = progress is None or progress.took_in_news(session, rebuilt_all, built)
    log.log(
        logging.INFO if news or episodes else logging.DEBUG,
        "rollup: %d ledger hours rebuilt (%.2f GPU-hours priced, %.2f unpriced; %d readings metered, late readings "
        "of %d GPUs), %d idle episodes",
        built.hours, built.priced_gpu_hours, built.unpriced_gpu_hours, built.readings_metered, built.late_gpus,
        episodes,
    )  # fmt: skip
    return built, episodes


def run_rollup_and_alerts(
    sessions: sessionmaker[Session],
    pricing: Pricing,
    policy: IdlePolicy,
    alerts: AlertRunner,
    progress: RollupProgress | None = None,
    tsdb: TsdbTelemetry | None = None,
) -> tuple[RollupResult, int]:
    """:func:`run_rollup` (from ``tsdb`` when given), then the alert rules on what it built (in a transaction of
    their own: a failing evaluation is logged and leaves the rollup done; :class:`~finops.service.leases.LeaseLost`
    is raised on).
    Returns what :func:`run_rollup` returns."""
    done = run_rollup(sessions, pricing, policy, progress, tsdb)
    try:
        alerts.evaluate()
    except LeaseLost:
        raise
    except Exception:
        log.exception("alert evaluation failed; it runs again after the next rollup")
    return done


def run_sample_maintenance(sessions: sessionmaker[Session], retention_days: int) -> Pruned:
    """Upkeep of raw samples, hourly: make today's and the next two days' partitions (PostgreSQL) that do not exist
    yet, then drop the samples older than ``retention_days`` (:func:`finops.ingest.partitions.prune_samples`). One
    transaction each.

    Returns what was pruned.
    """
    now = utc_now()
    with sessions.begin() as session:
        create_upcoming_partitions(session, now)
    with sessions.begin() as session:
        pruned = prune_samples(session, retention_days, now)
    log.debug("sample retention: samples before %s removed", pruned.before.isoformat())  # prune_samples logs what went
    return pruned


class RunningJobs:
    """The runs of scheduled jobs under way, and the :class:`StopSwitch` of the engine they work on, which stops
    them when the process shuts down (:meth:`stop`)."""

    def __init__(self, switch: StopSwitch) -> None:
        self.switch = switch
        self._runs = 0
        self._changed = threading.Condition()

    def run(self, job_id: str, function: Callable[..., object], *args: object) -> None:
        """Run ``function(*args)`` as job ``job_id``, counted while it runs. Once the switch is stopped, an error it
        raises (a statement refused or interrupted) is logged at INFO as the shutdown's doing, not raised."""
        with self._changed:
            self._runs += 1
        try:
            function(*args)
        except Exception as exc:
            if not self.switch.stopped:
                raise
            log.info("%s stopped by the shutdown, its transaction rolled back: %s", job_id, str(exc).splitlines()[0])
        finally:
            with self._changed:
                self._runs -= 1
                self._changed.notify_all()

    def stop(self, timeout_seconds: float) -> bool:
        """Stop the runs' database work (:meth:`StopSwitch.stop`) and wait at most ``timeout_seconds`` for the runs
        to end; True when none is left. The switch is thrown again every half second meanwhile, for a statement
        that started just as it was. Call after the scheduler's ``shutdown(wait=False)``, so that no run starts."""
        deadline = time.monotonic() + timeout_seconds
        with self._changed:
            while self._runs:
                self.switch.stop()
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.5))
        return True


def _run_now(scheduler: BackgroundScheduler, job_id: str) -> None:
    """Move job ``job_id``'s next run to now if it runs at an interval and the scheduler has started (a job whose
    lease this process has just taken over; a cron job such as ``showback`` keeps its day, and before the start every
    interval job's first run is now already)."""
    job = scheduler.get_job(job_id)
    if scheduler.running and job is not None and isinstance(job.trigger, IntervalTrigger):
        job.modify(next_run_time=utc_now())
        log.info("%s: run now, its lease just taken", job_id)


def start_scheduler(
    sessions: sessionmaker[Session],
    pricing: Pricing,
    policy: IdlePolicy,
    metrics: CostMetrics,
    rollup_interval_seconds: int,
    prometheus: ScheduledPull | None = None,
    sacct: ScheduledSacct | None = None,
    sample_retention_days: int | None = None,
    alerts: AlertRunner | None = None,
    leases: JobLeases | None = None,
    running: RunningJobs | None = None,
    tsdb: TsdbTelemetry | None = None,
    nudges: NudgeRunner | None = None,
) -> BackgroundScheduler:
    """Start the background scheduler with the rollup and cost-metrics jobs (and the Prometheus pull, if given, at the
    same interval; and the sacct import, if given, at its own); the caller shuts it down. With ``running``, each
    run goes through :meth:`RunningJobs.run`, so that :meth:`RunningJobs.stop` can stop them at shutdown (their
    sessions must be on the engine its switch watches).

    With ``sample_retention_days``, also :func:`run_sample_maintenance` at start and then every hour (a run that
    timed out waiting for a lock behind a long rollup is tried again within the hour, not the next day). With
    ``alerts``, the rollup job evaluates the alert rules after each rollup (:func:`run_rollup_and_alerts`) and a
    delivery job dispatches and sends alert messages every ``alerts.service.poll_seconds``. With ``nudges`` and its
    interval not 0, the nudge pass every ``nudges.service.interval_seconds`` (its messages go out with the alert
    delivery job).

    With ``alerts``, also the monthly showback statements (:meth:`alerts.service.AlertRunner.showback`) on the
    schedule :data:`SHOWBACK_SCHEDULE`, and the alert outbox's finished rows removed hourly once older than
    ``alerts.service.outbox_retention`` (:meth:`alerts.service.AlertRunner.prune_outbox`).

    With ``leases``, every job but the cost-metrics refresh runs under its lease (named by its job id:
    ``rollup``, ``alert_delivery``, ``showback``, ``alert_outbox``, ``sample_maintenance``, ``sacct_import``,
    ``prometheus_pull``, ``nudges``): the leases are taken before the scheduler starts and released when it shuts down;
    an interval job whose lease this process takes from another runs at once, not at its next interval.

    With ``tsdb`` (``FINOPS_TELEMETRY_SOURCE=tsdb``), the rollup reads telemetry from that TSDB (:func:`run_rollup`);
    the caller passes no ``prometheus`` pull then."""
    scheduler = BackgroundScheduler(timezone="UTC")

    def add(
        job_id: str, function: Callable[..., object], args: list[object], trigger: str, leased: bool, **fields: Any
    ) -> None:
        """Run ``function(*args)`` on APScheduler's ``trigger`` with ``fields`` (under the lease ``job_id`` when
        there are leases and ``leased``); a run still going when the next is due is not doubled, and missed runs
        coalesce."""
        if leases is not None and leased:
            function = leases.leased(job_id, function)
        scheduler.add_job(
            function if running is None else running.run,
            trigger,
            args=args if running is None else [job_id, function, *args],
            id=job_id,
            max_instances=1,
            coalesce=True,
            **fields,
        )

    def every(
        job_id: str, function: Callable[..., object], args: list[object], leased: bool = True, **interval: float
    ) -> None:
        """Run ``function(*args)`` now and then at ``interval`` (:func:`add`)."""
        add(job_id, function, args, "interval", leased, next_run_time=utc_now(), **interval)

    if alerts is not None:
        every("alert_delivery", alerts.deliver, [], seconds=alerts.service.poll_seconds)
        add("showback", alerts.showback, [], "cron", True, **SHOWBACK_SCHEDULE)
        every("alert_outbox", alerts.prune_outbox, [], hours=1)
    if nudges is not None and nudges.service.interval_seconds:
        every("nudges", nudges.run, [], seconds=nudges.service.interval_seconds)
    if sample_retention_days is not None:
        every("sample_maintenance", run_sample_maintenance, [sessions, sample_retention_days], hours=1)
    if sacct is not None:
        every("sacct_import", sacct.run, [sessions], seconds=sacct.interval_seconds)
    if prometheus is not None:
        every("prometheus_pull", prometheus.run, [sessions], seconds=rollup_interval_seconds)
    progress = RollupProgress()
    if alerts is None:
        every("rollup", run_rollup, [sessions, pricing, policy, progress, tsdb], seconds=rollup_interval_seconds)
    else:
        arguments = [sessions, pricing, policy, alerts, progress, tsdb]
        every("rollup", run_rollup_and_alerts, arguments, seconds=rollup_interval_seconds)
    every("cost_metrics", metrics.refresh, [sessions], leased=False, seconds=rollup_interval_seconds)
    if leases is not None:
        leases.when_taken(lambda name: _run_now(scheduler, name))
        leases.start()
        scheduler.add_listener(lambda _event: leases.release(), EVENT_SCHEDULER_SHUTDOWN)
    scheduler.start()
    return scheduler
