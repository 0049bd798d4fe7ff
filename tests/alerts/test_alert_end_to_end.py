"""Alerts end to end, over real sockets, both databases: a team crossing 80 % of its budget gets one Slack message
and one e-mail with the right numbers; the demo's idle jobs give one grouped message per team; restarting the
service (a new process each time) between firing and delivery sends exactly one message, and nothing after;
the scheduler evaluates after its rollup and delivers on its own."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

from prometheus_client import CollectorRegistry
from pydantic import SecretStr
from sqlalchemy import select

from alerts.config import parse_config
from alerts.delivery import Channels
from alerts.engine import RuleInputs
from alerts.mail import SmtpSettings
from alerts.models import AlertDelivery, AlertGroup, AlertInstance
from alerts.rules.candidate import money
from alerts.service import AlertRunner, AlertService
from alerts.webhooks import WebhookPolicy
from collector.contract.wire import IngestBatch, gpu_info_dict, reading_dict
from finops.analysis.budgets import budget_status, set_budget
from finops.analysis.idle import IdlePolicy, list_episodes
from finops.demo.activity import profile_from_capture
from finops.demo.allocation import TeamSeries, derive_jobs, node_names
from finops.demo.helios import load_helios
from finops.demo.runner import H100_CAPTURE
from finops.demo.workload import JobPlan, Readings, Trace, idle_jobs, node_steps, sacct_lines
from finops.ingest.readings import Ingestor
from finops.jobs.slurm_import import import_sacct
from finops.jobs.teams import map_account
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.service import scheduler
from finops.service.cost_metrics import CostMetrics
from finops.service.scheduler import run_rollup_and_alerts, start_scheduler
from finops.timeutil import utc_now
from tests.service.job_runs import JobRuns
from tests.support.alert_cluster import Cluster, minute_floor
from tests.support.alert_servers import SECRET_PATH, Mailbox, Webhook, starttls_smtp
from tests.support.certificates import Certificates
from tests.support.scenario import seed_dashboard_database, slice_end, start_hour

PRICING = Pricing(load_catalog(), PricingModel.ON_DEMAND)
LOCAL = WebhookPolicy(allowed_hosts=frozenset({"127.0.0.1"}), allow_private_addresses=True)


class Clock:
    """The alert jobs' clock, moved by the test."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def test_a_team_crossing_80_percent_gets_one_slack_message_and_one_email(engine, sessions, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    seed_dashboard_database(engine.url.render_as_string(hide_password=False))
    now = slice_end(start_hour())  # in the slice's month, also in a month's first hours
    with sessions.begin() as session:
        (before,) = budget_status(session, now)
        set_budget(
            session,
            "alpha",
            (before.spent / Decimal("0.85")).quantize(Decimal("0.01")),
            now,
            "USD",
            actor="system:test",
        )
    webhook, mailbox, certificates = Webhook(), Mailbox(), Certificates()
    smtp = starttls_smtp(mailbox, certificates.server)
    config = parse_config(
        {
            "routes": [{"team": "alpha", "slack": ["alpha"], "email": ["alpha-lead@example.org"]}],
            "rules": {"budget-forecast": {"enabled": False}},  # forecasts have their own tests
        },
        "test",
    )
    channels = Channels(
        {"alpha": SecretStr(webhook.url)},
        LOCAL,
        SmtpSettings(
            "127.0.0.1",
            smtp.port,
            "gpu-finops@example.org",
            username="alerts",
            password="mail-secret",
            ssl_context=certificates.client,
        ),
    )
    clock = Clock(now)
    monkeypatch.setattr(scheduler, "utc_now", clock)  # the rollup's clock too
    runner = AlertRunner(AlertService(config, channels=channels), sessions, clock=clock)
    try:
        run_rollup_and_alerts(sessions, PRICING, IdlePolicy(), runner)
        assert runner.deliver()[1] == [], "group_wait"
        clock.now += timedelta(seconds=30)
        _, outcomes = runner.deliver()
        assert sorted(o.status for o in outcomes) == ["delivered", "delivered"]
        for later in (timedelta(minutes=5), timedelta(hours=4), timedelta(hours=9)):
            clock.now += later
            run_rollup_and_alerts(sessions, PRICING, IdlePolicy(), runner)
            assert runner.deliver()[1] == []
    finally:
        runner.close()
        webhook.close()
        smtp.stop()
    with sessions() as session:
        (status,) = budget_status(session, now)
    assert Decimal("80") <= status.used_percent < Decimal("100")
    spent, budget = money(status.spent, "USD"), money(status.budget, "USD")
    (slack,) = webhook.delivered
    (email,) = mailbox.messages
    assert slack["blocks"][0]["text"]["text"] == "[FIRING] Budget 80 % reached: team alpha" == email["Subject"]
    expected = f"Team alpha has spent {spent} of its {budget} budget for {now:%Y-%m} ({status.used_percent} %)."
    assert slack["blocks"][1]["text"]["text"] == expected
    facts = {f["text"].split("\n")[0].strip("*"): f["text"].split("\n")[1] for f in slack["blocks"][2]["fields"]}
    assert (facts["Spent"], facts["Budget"], facts["Used"]) == (spent, budget, f"{status.used_percent} %")
    body = email.get_body(("plain",))
    assert body is not None and expected in body.get_content() and f"Spent: {spent}" in body.get_content()
    assert email["To"] == "alpha-lead@example.org"


def test_the_demo_idle_jobs_give_one_grouped_message_per_team(sessions, shared_data: Path) -> None:  # type: ignore[no-untyped-def]
    minutes = 120
    series = [
        TeamSeries(s.team, s.quota, s.running[:minutes])
        for s in load_helios(shared_data / "helios-earth-vc-allocation")
    ]
    jobs = derive_jobs(series)
    idle = idle_jobs(jobs)
    end = minute_floor(utc_now())
    # The drawn idle jobs idle plainly (no derived wait), no job's activity measured: only utilisation matters here.
    plans = {job.job_number: JobPlan(job.job_number not in idle, None, {}) for job in jobs}
    trace = Trace(jobs, node_names(series), end - timedelta(minutes=minutes), minutes, plans)
    readings = Readings(profile_from_capture(shared_data / H100_CAPTURE), {})
    ingestor = Ingestor()
    for node in trace.nodes:
        samples = [s for step in node_steps(trace, node, readings) for s in step]
        inventory = [gpu_info_dict(s) for s in samples[:8]]
        batch = IngestBatch.model_validate(
            {"node": node, "gpus": inventory, "samples": [reading_dict(s) for s in samples]}
        )
        with sessions.begin() as session:
            ingestor.store(session, batch)
    with sessions.begin() as session:
        for team in series:
            map_account(session, team.team, team.team, actor="system:test")
        assert import_sacct(session, sacct_lines(trace), source="demo").errors == []
    # Idle from the start and still running, with grace (10 min) + window (30 min) inside the trace's last reading.
    expected: dict[str, dict[str, int]] = {}
    for job in jobs:
        if job.job_number in idle and job.end is None and job.start + 10 + 30 <= minutes - 1:
            expected.setdefault(job.team, {})[str(job.job_number)] = job.gpu_count
    assert any(len(team_jobs) > 1 for team_jobs in expected.values()), "the slice has a team with two idle jobs"

    webhook = Webhook()
    config = parse_config({"routes": [{"match": ['rule="idle-gpu"'], "slack": ["idle"]}]}, "test")
    service = AlertService(
        config, RuleInputs(collector_interval_seconds=60), Channels({"idle": SecretStr(webhook.url)}, LOCAL)
    )
    clock = Clock(trace.end)
    runner = AlertRunner(service, sessions, clock=clock)
    try:
        run_rollup_and_alerts(sessions, PRICING, IdlePolicy(), runner)
        clock.now += timedelta(seconds=30)
        runner.deliver()
    finally:
        runner.close()
        webhook.close()
    with sessions() as session:
        alerts = session.scalars(select(AlertInstance).where(AlertInstance.rule == "idle-gpu")).all()
        episodes = list_episodes(session, trace.start, trace.end + timedelta(minutes=1))
    assert {(a.labels["team"], a.labels["job"]): len(a.figures["gpus"]) for a in alerts} == {
        (team, job): gpus for team, team_jobs in expected.items() for job, gpus in team_jobs.items()
    }, "one alert per idle job, with all its GPUs"
    messages = {body["blocks"][0]["text"]["text"]: body for body in webhook.delivered}
    assert len(webhook.delivered) == len(expected), "one message per team"
    for team, team_jobs in expected.items():
        if len(team_jobs) == 1:
            ((job, gpus),) = team_jobs.items()
            body = messages[f"[FIRING] Idle GPUs: job {job}, team {team}"]
            cost = sum((e.cost for e in episodes if e.job_id == job), Decimal(0))
            assert f"{gpus} GPU{'s' if gpus > 1 else ''} of job {job}" in body["text"]
            assert f"costing {money(cost, 'USD')} so far" in body["text"]
        else:
            body = messages[f"[FIRING:{len(team_jobs)}] Idle GPUs: team {team}"]
            listed = [f["text"].split("\n")[0].strip("*") for f in body["blocks"][2]["fields"]]
            assert sorted(listed) == sorted(f"job {job}" for job in team_jobs)


def _cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "finops.cli", *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert SECRET_PATH not in done.stdout + done.stderr and "s3cr3t" not in done.stdout + done.stderr
    return done.stdout.strip()


def test_restarts_between_firing_and_delivery_send_exactly_one_message(tmp_path: Path, database_url, sessions) -> None:  # type: ignore[no-untyped-def]
    now = minute_floor(utc_now())
    Cluster(sessions).readings("gpu-r-01", [0], now - timedelta(minutes=10), now - timedelta(minutes=5))
    webhook = Webhook((503, {}))
    rules = tmp_path / "alerts.yaml"
    rules.write_text("timers: {group_wait: 3s}\ndefault_route: {slack: [ops]}\n")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("FINOPS_")},
        "FINOPS_DATABASE_URL": database_url,
        "FINOPS_ALERT_RULES": str(rules),
        "FINOPS_ALERT_SLACK_WEBHOOKS": json.dumps({"ops": webhook.url}),
        "FINOPS_ALERT_WEBHOOK_HOSTS": '["127.0.0.1"]',
        "FINOPS_ALERT_WEBHOOK_ALLOW_PRIVATE": "true",
    }
    try:
        first = _cli(env, "alerts", "evaluate")  # fires; the group waits 3 s
        assert first.endswith("0 notifications queued; 0 of 0 deliveries sent"), first
        with sessions() as session:
            (group,) = session.scalars(select(AlertGroup)).all()
        assert group.next_check_at is not None
        while utc_now() < group.next_check_at:  # the stored group_wait, as the next process reads it
            time.sleep(0.1)
        second = _cli(env, "alerts", "evaluate")  # a new process: queues once, the webhook answers 503
        assert second.endswith("1 notifications queued; 0 of 1 deliveries sent"), second
        with sessions() as session:
            (row,) = session.scalars(select(AlertDelivery)).all()
        while utc_now() < row.next_attempt_at + timedelta(seconds=1):
            time.sleep(0.2)
        third = _cli(env, "alerts", "evaluate")  # another process: sends the queued message, queues nothing
        assert third.endswith("0 notifications queued; 1 of 1 deliveries sent"), third
        fourth = _cli(env, "alerts", "evaluate")
        assert fourth.endswith("0 notifications queued; 0 of 0 deliveries sent"), fourth
    finally:
        webhook.close()
    assert webhook.answered == [503, 200]
    (message,) = webhook.delivered
    assert message["blocks"][0]["text"]["text"] == "[FIRING] Collector silent: gpu-r-01"


def test_the_scheduler_evaluates_after_its_rollup_and_delivers(sessions) -> None:  # type: ignore[no-untyped-def]
    now = minute_floor(utc_now())
    Cluster(sessions).readings(
        "gpu-r-02", [0], now - timedelta(minutes=10), now - timedelta(minutes=5)
    )  # busy, and no job imported: a job the service does not know
    webhook = Webhook()
    # The no-reading part is off: where the hour turned after the last reading, the current hour up to the rollup is
    # in-service GPU time without readings (true, but a matter of the clock), and only the unknown jobs are judged.
    config = parse_config(
        {
            "timers": {"group_wait": "1s"},
            "default_route": {"slack": ["ops"]},
            "rules": {"data-quality": {"max_no_reading_share": 1}},
        },
        "test",
    )
    service = AlertService(config, channels=Channels({"ops": SecretStr(webhook.url)}, LOCAL), poll_seconds=0.2)
    runner = AlertRunner(service, sessions)
    scheduler = start_scheduler(sessions, PRICING, IdlePolicy(), CostMetrics(CollectorRegistry()), 1, alerts=runner)
    try:
        runs = JobRuns(scheduler)
        deadline = time.monotonic() + 60
        while len(webhook.delivered) < 2:  # the collector-silent and data-quality messages
            assert time.monotonic() < deadline, f"delivered in 60 s: {webhook.delivered}"
            time.sleep(0.1)
        # More evaluations after rollups, then delivery passes after them: nothing more is sent.
        runs.wait("rollup", 2)
        runs.wait("alert_delivery", 2)
    finally:
        scheduler.shutdown(wait=True)
        runner.close()
        webhook.close()
    # The data-quality alert needs the ledger the rollup built: no job held the GPU while its readings show it busy,
    # so a job the service does not know ran on it: the message says what to check.
    # Its share is all the GPU time when the readings and the rollup share an hour, less when the hour turned between.
    by_title = {body["blocks"][0]["text"]["text"]: body for body in webhook.delivered}
    assert len(webhook.delivered) == 2
    silent = "[FIRING] Collector silent: gpu-r-02"
    (quality,) = set(by_title) - {silent}
    assert silent in by_title
    assert re.fullmatch(r"\[FIRING\] Data quality: (100|[1-9][0-9]?)% of GPU time ran unknown jobs", quality), quality
    assert "Check that the job import (sacct or Kubernetes) runs" in by_title[quality]["text"]
