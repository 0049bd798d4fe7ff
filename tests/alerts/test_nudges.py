"""Nudges as messages (both databases): what each says (jobs, cost, fix), one per user and kind every 7 days, users
without an address, the recipients file, and delivery by the scheduler through a real SMTP server (aiosmtpd with
STARTTLS) and a local Slack webhook, once."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from pydantic import SecretStr
from sqlalchemy import func, select

from alerts.config import AlertConfigError
from alerts.delivery import Channels
from alerts.mail import SmtpSettings
from alerts.models import AlertDelivery, NudgeLog
from alerts.nudges import NO_FIX, NudgeRunner, NudgeService, plan_nudges, render_nudge, send_nudges
from alerts.recipients import Recipients
from alerts.rules.candidate import money
from alerts.service import AlertRunner, AlertService
from alerts.slack import slack_payload
from alerts.webhooks import WebhookPolicy
from finops.analysis.idle import IdlePolicy
from finops.savings.bottlenecks import BOTTLENECKS, MEMORY_BOUND
from finops.savings.nudges import (
    BUSY_INEFFICIENT,
    IDLE_RUNNING,
    LOW_EFFICIENCY,
    MIG_CANDIDATE,
    NUDGE_KINDS,
    ZERO_UTILIZATION,
    NudgePolicy,
)
from finops.service.cost_metrics import CostMetrics
from finops.service.scheduler import start_scheduler
from finops.settings.combined import Settings
from finops.timeutil import utc_now
from tests.service.job_runs import JobRuns
from tests.support.alert_cluster import Cluster, minute_floor
from tests.support.alert_servers import Mailbox, Webhook, starttls_smtp
from tests.support.certificates import Certificates
from tests.support.nudge_cluster import (
    PRICING,
    busy_inefficient_users,
    idle_running_users,
    low_efficiency_users,
    mig_users,
    roll_up,
    zero_util_users,
)

LOCAL = WebhookPolicy(allowed_hosts=frozenset({"127.0.0.1"}), allow_private_addresses=True)
DOMAIN = Recipients(domain="example.org")


def test_messages_name_the_jobs_their_cost_and_the_fix(sessions) -> None:  # type: ignore[no-untyped-def]
    now = minute_floor(utc_now())
    cluster = Cluster(sessions)
    for build in (zero_util_users, low_efficiency_users, mig_users, idle_running_users):
        build(cluster, now)
    roll_up(sessions, now)
    service = NudgeService(recipients=DOMAIN, dashboard_url="http://127.0.0.1:8501")
    with sessions() as session:
        planned = {(p.nudge.user, p.nudge.kind): p for p in plan_nudges(session, service, now + timedelta(seconds=30))}
    assert sorted(planned) == [
        ("ida", IDLE_RUNNING),
        ("lou", LOW_EFFICIENCY),
        ("mia", MIG_CANDIDATE),
        ("zed", ZERO_UTILIZATION),
    ]
    assert {p.status for p in planned.values()} == {"due"}
    assert planned["zed", ZERO_UTILIZATION].targets == (("email", "zed@example.org"),)

    zero = planned["zed", ZERO_UTILIZATION]
    cost = money(zero.nudge.cost or 0, "USD")
    assert zero.message.title == "30 GPU-hours at 0 % utilisation in 7 days: user zed"
    assert f"costing {cost}" in zero.message.summary and zero.message.severity == "warning"
    fields = dict(zero.message.fields)
    assert (fields["User"], fields["Team"], fields["Cost"]) == ("zed", "vision", cost)
    assert fields["GPU-hours at 0 %"] == "30.0"
    assert fields["Job 7101 (job-7101)"] == (
        f"8 GPUs (NVIDIA H100 80GB HBM3), 6 at 0 %: 30.0 GPU-hours at 0 %, {cost}. Fix: #SBATCH --gres=gpu:h100:2"
    )
    assert zero.message.link == ("Open in gpu-finops", "http://127.0.0.1:8501/idle")

    low = planned["lou", LOW_EFFICIENCY]
    assert low.message.title == "GPU utilisation 20 % over 56 GPU-hours in 7 days: user lou"
    job = dict(low.message.fields)["Job 7201 (job-7201)"]
    assert f"idle cost {money(low.nudge.cost or 0, 'USD')}" in job and job.endswith(f"Fix: {NO_FIX}")

    mig = planned["mia", MIG_CANDIDATE]
    (found,) = mig.nudge.jobs
    job = dict(mig.message.fields)["Job 7301 (job-7301)"]
    assert "memory peak 4.0 GiB" in job and job.endswith("Fix: #SBATCH --gres=gpu:1g.10gb:1")
    assert f"on a 1g.10gb slice {money(found.saving or 0, 'USD')} less" in job
    assert dict(mig.message.fields)["Saving on MIG"] == money(found.saving or 0, "USD")

    idle = planned["ida", IDLE_RUNNING]
    assert idle.message.title == "Running 1 job with idle GPUs: user ida"
    job = dict(idle.message.fields)["Job 7401 (job-7401)"]
    assert job.startswith("2 of 2 GPUs (NVIDIA H100 80GB HBM3) idle since ") and job.endswith("Fix: scancel 7401")
    assert f"{money(idle.nudge.cost or 0, 'USD')} so far" in job

    many = render_nudge(replace(zero.nudge, jobs=zero.nudge.jobs * 12), NudgePolicy(), "")
    assert many.fields[-1] == ("More", "2 more jobs") and many.link is None


def test_one_message_per_user_and_kind_every_seven_days(sessions) -> None:  # type: ignore[no-untyped-def]
    now = minute_floor(utc_now())
    zero_util_users(Cluster(sessions), now)
    roll_up(sessions, now)
    # A period of 30 days keeps the same jobs in view for the whole test.
    service = NudgeService(NudgePolicy(period=timedelta(days=30)), DOMAIN, repeat=timedelta(days=7))

    def send(at):  # type: ignore[no-untyped-def]
        with sessions.begin() as session:
            return [(p.nudge.user, p.status, len(p.deliveries)) for p in send_nudges(session, service, at)]

    def outbox() -> int:
        with sessions() as session:
            return int(session.scalar(select(func.count()).select_from(AlertDelivery)) or 0)

    assert send(now) == [("zed", "sent", 1)]
    assert send(now + timedelta(minutes=5)) == [("zed", "suppressed", 0)]
    assert send(now + timedelta(days=6, hours=23, minutes=59)) == [("zed", "suppressed", 0)]
    with sessions() as session:
        (row,) = session.scalars(select(NudgeLog))
        assert (row.user, row.kind, row.sent_at, row.jobs) == ("zed", ZERO_UTILIZATION, now, ["7101"])
    assert outbox() == 1
    assert send(now + timedelta(days=7)) == [("zed", "sent", 1)], "seven days on, told again"
    assert send(now + timedelta(days=8)) == [("zed", "suppressed", 0)]
    with sessions() as session:
        assert session.scalar(select(NudgeLog.sent_at)) == now + timedelta(days=7)
    assert outbox() == 2
    # With the default period of 7 days, those jobs are out of it by then: nothing is due.
    with sessions.begin() as session:
        assert send_nudges(session, NudgeService(recipients=DOMAIN), now + timedelta(days=14)) == []


def test_a_user_without_an_address_is_sent_nothing_until_one_exists(sessions) -> None:  # type: ignore[no-untyped-def]
    now = minute_floor(utc_now())
    zero_util_users(Cluster(sessions), now)
    roll_up(sessions, now)
    with sessions.begin() as session:
        (planned,) = send_nudges(session, NudgeService(recipients=Recipients()), now)
    assert (planned.status, planned.targets, planned.deliveries) == ("no-address", (), ())
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(NudgeLog)) == 0, "not claimed: nobody was told"
    with sessions.begin() as session:
        (planned,) = send_nudges(session, NudgeService(recipients=DOMAIN), now + timedelta(minutes=1))
    assert planned.status == "sent"


def test_the_recipients_file(tmp_path: Path) -> None:
    path = tmp_path / "recipients.yaml"
    path.write_text(
        "users:\n"
        "  alice: {email: alice.smith@lab.example.org}\n"
        "  bob: {slack: ml-team, slack_member: U012AB3CD}\n"
        "  dave: {}\n"
        "copy:\n  email: [hpc-admins@example.org, ops@example.org]\n  slack: hpc-ops\n"
    )
    recipients = Recipients.load(path, "@example.edu")
    assert recipients.targets("alice") == [
        ("email", "alice.smith@lab.example.org"),
        ("email", "hpc-admins@example.org, ops@example.org"),
        ("slack", "hpc-ops"),
    ]
    assert recipients.targets("bob")[0] == ("slack", "ml-team") and recipients.mentions("bob") == ("U012AB3CD",)
    assert recipients.targets("carol")[0] == ("email", "carol@example.edu"), "the domain for users not listed"
    copies = [("email", "hpc-admins@example.org, ops@example.org"), ("slack", "hpc-ops")]
    assert recipients.targets("dave") == copies, "no address of their own: the copies only"
    assert recipients.targets("a b") == copies, "a login that is not one gets no address from the domain"
    for text, problem in (
        ("users: {alice: {email: alice}}", "users.alice.email: Value error, 'alice' is not an e-mail address"),
        ("users: {bob: {slack_member: bob}}", "users.bob.slack_member: Value error, 'bob' is not a Slack member ID"),
        ("users: {bob: {phone: 1}}", "users.bob.phone: Extra inputs are not permitted"),
        ("users: [", "line 1 not valid YAML"),
    ):
        path.write_text(text)
        with pytest.raises(AlertConfigError, match=f"{path}: ?.*{problem}"):
            Recipients.load(path, "")
    with pytest.raises(ValueError, match="not a domain name"):
        Recipients.load(None, "example")


def test_the_settings_make_the_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FINOPS_NUDGE_KINDS", "zero-util-gpu-hours, mig-candidate")
    monkeypatch.setenv("FINOPS_NUDGE_MIG_MAX_MEMORY_GIB", "20")
    monkeypatch.setenv("FINOPS_NUDGE_EMAIL_DOMAIN", "@example.edu")
    monkeypatch.setenv("FINOPS_ROLLUP_INTERVAL_SECONDS", "60")
    service = NudgeService.from_settings(Settings())
    assert service.policy.kinds == {ZERO_UTILIZATION, MIG_CANDIDATE}
    assert service.policy.mig_max_memory_bytes == 20 * 2**30
    assert service.policy.idle_fresh == timedelta(seconds=60 + 150)
    assert service.recipients.targets("u123") == [("email", "u123@example.edu")]
    assert (service.policy.zero_util_gpu_hours, service.policy.low_efficiency_ratio) == (24, 0.25)
    monkeypatch.delenv("FINOPS_NUDGE_KINDS")
    monkeypatch.setenv("FINOPS_NUDGE_INEFFICIENT_GPU_HOURS", "48")
    monkeypatch.setenv("FINOPS_EFFICIENCY_INEFFECTIVE_RATIO", "0.4")
    service = NudgeService.from_settings(Settings())
    assert service.policy.kinds == set(NUDGE_KINDS) and BUSY_INEFFICIENT in service.policy.kinds, "on by default"
    assert service.policy.inefficient_gpu_hours == 48 and service.policy.efficiency.ineffective_ratio == 0.4
    monkeypatch.setenv("FINOPS_NUDGE_KINDS", "idle")
    with pytest.raises(ValueError, match="'idle' is not a kind of nudge"):
        Settings()


def test_slack_messages_mention_the_user() -> None:
    from alerts.message import Message

    payload = slack_payload(Message("t", "a < b", mentions=("U012AB3CD", "<!channel>")))
    assert payload["blocks"][1]["text"]["text"] == "<@U012AB3CD> a &lt; b", "member IDs only, the rest escaped"
    assert payload["text"].startswith("<@U012AB3CD> t")


def test_the_scheduler_sends_each_nudge_once_by_email_and_slack(sessions, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    now = minute_floor(utc_now())
    cluster = Cluster(sessions)
    zero_util_users(cluster, now)
    idle_running_users(cluster, now)
    roll_up(sessions, now)
    path = tmp_path / "recipients.yaml"
    path.write_text("users:\n  ida: {slack: ida, slack_member: U0IDA}\n")
    mailbox, webhook, certificates = Mailbox(), Webhook(), Certificates()
    smtp = starttls_smtp(mailbox, certificates.server)
    channels = Channels(
        {"ida": SecretStr(webhook.url)},
        LOCAL,
        SmtpSettings("127.0.0.1", smtp.port, "gpu-finops@example.org", username="alerts", password="mail-secret",
                     ssl_context=certificates.client),
    )  # fmt: skip
    alerts = AlertRunner(AlertService(channels=channels, poll_seconds=0.2), sessions)
    service = NudgeService(recipients=Recipients.load(path, "example.org"), interval_seconds=1)
    nudges = NudgeRunner(service, sessions)
    scheduler = start_scheduler(
        sessions, PRICING, IdlePolicy(), CostMetrics(CollectorRegistry()), 3600, alerts=alerts, nudges=nudges
    )
    try:
        runs = JobRuns(scheduler)
        deadline = time.monotonic() + 60
        while not (mailbox.messages and webhook.delivered):
            assert time.monotonic() < deadline, "a nudge by e-mail and one to Slack within 60 s"
            time.sleep(0.1)
        runs.wait("nudges", 2)
        runs.wait("alert_delivery", 2)
    finally:
        scheduler.shutdown(wait=True)
        alerts.close()
        webhook.close()
        smtp.stop()
    (email,) = mailbox.messages
    assert email["To"] == "zed@example.org"
    assert email["Subject"] == "30 GPU-hours at 0 % utilisation in 7 days: user zed"
    body = email.get_body(("plain",))
    assert body is not None and "Fix: #SBATCH --gres=gpu:h100:2" in body.get_content()
    (slack,) = webhook.delivered
    assert slack["blocks"][0]["text"]["text"] == "Running 1 job with idle GPUs: user ida"
    assert slack["blocks"][1]["text"]["text"].startswith("<@U0IDA> 1 running job of user ida (team vision)")
    facts = [f["text"] for block in slack["blocks"][2:] for f in block.get("fields", [])]
    assert any(f.startswith("*Job 7401 (job-7401)*") and f.endswith("Fix: scancel 7401") for f in facts)


def test_busy_but_inefficient_messages_say_the_bottleneck_and_repeat_weekly(sessions) -> None:  # type: ignore[no-untyped-def]
    """pia's message: her job's utilisation and SM activity, cost and inactive cost, probable bottleneck with its
    evidence and the rule's usual fix; then the nudge log's once-a-week rule, as for the other kinds."""
    now = minute_floor(utc_now())
    busy_inefficient_users(Cluster(sessions), now)
    roll_up(sessions, now)
    service = NudgeService(recipients=DOMAIN, dashboard_url="http://127.0.0.1:8501")
    with sessions() as session:
        (planned,) = plan_nudges(session, service, now)
    nudge, message = planned.nudge, planned.message
    assert (nudge.user, nudge.kind, planned.status) == ("pia", BUSY_INEFFICIENT, "due")
    cost, inactive = money(nudge.cost or 0, "USD"), money(nudge.inactive_cost or 0, "USD")
    assert message.title == "1 job busy but inefficient in 7 days: user pia" and message.severity == "info"
    assert message.summary.startswith(
        "Over the last 7 days, 1 job of user pia (team vision) kept its GPUs running kernels (80 % utilisation or "
        "more) while SM activity stayed below 50 %"
    )
    assert f"They cost {cost}, {inactive} of it for empty SMs." in message.summary
    fields = dict(message.fields)
    assert (fields["GPU-hours"], fields["Cost"], fields["Inactive cost"]) == ("28.0", cost, inactive)
    assert fields["Job 7501 (job-7501)"] == (
        f"4 GPUs (NVIDIA H100 80GB HBM3), 95 % utilisation but 20 % SM activity over 28.0 GPU-hours, {cost} "
        f"({inactive} of it for empty SMs). Probable bottleneck: memory-bound (DRAM active 0.75, SM active 0.20, "
        f"tensor active 0.00). Fix: {BOTTLENECKS[MEMORY_BOUND].fix}"
    )
    assert message.link == ("Open in gpu-finops", "http://127.0.0.1:8501/savings")

    def send(at):  # type: ignore[no-untyped-def]
        with sessions.begin() as session:
            return [(p.nudge.user, p.nudge.kind, p.status) for p in send_nudges(session, service, at)]

    assert send(now) == [("pia", BUSY_INEFFICIENT, "sent")]
    assert send(now + timedelta(hours=1)) == [("pia", BUSY_INEFFICIENT, "suppressed")]
    with sessions() as session:
        (row,) = session.scalars(select(NudgeLog))
        assert (row.user, row.kind, row.jobs) == ("pia", BUSY_INEFFICIENT, ["7501"])
