"""``gpu-finops nudges``: --dry-run prints what would be sent and records nothing; a run sends through a real SMTP
server once, then holds the nudge back; --user narrows; a user without an address is said to have none (both
databases)."""

from __future__ import annotations

from aiosmtpd.controller import Controller
from sqlalchemy import func, select

from alerts.models import AlertDelivery, NudgeLog
from finops.cli import app
from finops.timeutil import utc_now
from tests.support.alert_cluster import Cluster, minute_floor
from tests.support.alert_servers import Mailbox
from tests.support.nudge_cluster import roll_up, zero_util_users
from tests.support.servers import free_port


def _counts(sessions) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    with sessions() as session:
        return (
            int(session.scalar(select(func.count()).select_from(NudgeLog)) or 0),
            int(session.scalar(select(func.count()).select_from(AlertDelivery)) or 0),
        )


def test_dry_run_then_send_then_held_back(cli_env, sessions, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    now = minute_floor(utc_now())
    zero_util_users(Cluster(sessions), now)
    roll_up(sessions, now)

    unaddressed = cli_env.invoke(app, ["nudges", "--dry-run"])
    assert unaddressed.exit_code == 0, unaddressed.output
    assert unaddressed.stdout.splitlines() == [
        "zed  zero-util-gpu-hours  no address: set FINOPS_NUDGE_EMAIL_DOMAIN or add zed to FINOPS_NUDGE_RECIPIENTS",
        "1 nudges: 0 to send, 0 held back, 1 without an address",
    ]

    mailbox = Mailbox()
    smtp = Controller(mailbox, hostname="127.0.0.1", port=free_port())
    smtp.start()
    monkeypatch.setenv("FINOPS_NUDGE_EMAIL_DOMAIN", "example.org")
    monkeypatch.setenv("FINOPS_ALERT_SMTP_HOST", "127.0.0.1")
    monkeypatch.setenv("FINOPS_ALERT_SMTP_PORT", str(smtp.port))
    monkeypatch.setenv("FINOPS_ALERT_SMTP_TLS", "none")
    try:
        dry = cli_env.invoke(app, ["nudges", "--dry-run"])
        assert dry.exit_code == 0, dry.output
        lines = dry.stdout.splitlines()
        assert lines[0] == "zed  zero-util-gpu-hours  would go to email zed@example.org"
        assert lines[1] == "    30 GPU-hours at 0 % utilisation in 7 days: user zed"
        assert any(line.strip().startswith("Job 7101 (job-7101): 8 GPUs") for line in lines)
        assert any(line.endswith("Fix: #SBATCH --gres=gpu:h100:2") for line in lines)
        assert lines[-1] == "1 nudges: 1 to send, 0 held back, 0 without an address"
        assert _counts(sessions) == (0, 0), "a dry run records and queues nothing"
        assert mailbox.messages == []

        assert cli_env.invoke(app, ["nudges", "--dry-run", "--user", "yan"]).stdout.splitlines() == [
            "0 nudges: 0 to send, 0 held back, 0 without an address"
        ]

        sent = cli_env.invoke(app, ["nudges"])
        assert sent.exit_code == 0, sent.output
        lines = sent.stdout.splitlines()
        assert lines[0] == "zed  zero-util-gpu-hours  queued for email zed@example.org"
        assert lines[-2] == "1 nudges: 1 queued, 0 held back, 0 without an address"
        assert lines[-1].startswith("delivery ") and lines[-1].endswith("(email → zed@example.org): delivered")
        (email,) = mailbox.messages
        assert email["To"] == "zed@example.org" and email["Subject"] == lines[1].strip()
        assert _counts(sessions) == (1, 1)

        again = cli_env.invoke(app, ["nudges"])
        assert again.exit_code == 0, again.output
        assert again.stdout.splitlines()[0].startswith("zed  zero-util-gpu-hours  held back: sent ")
        assert again.stdout.splitlines()[-1] == "1 nudges: 0 queued, 1 held back, 0 without an address"
        assert len(mailbox.messages) == 1 and _counts(sessions) == (1, 1)
    finally:
        smtp.stop()
