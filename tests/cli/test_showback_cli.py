"""``gpu-finops showback`` on both databases: the statements printed, the e-mail's HTML and CSV written, refusals as
one ``error: …`` line and exit code 2, and ``--send`` delivering each team's statement once to a real SMTP server
and a Slack-like webhook through the alerts outbox."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import select
from typer.testing import CliRunner, Result

from finops.cli import app
from finops.db.models import AuditEntry
from finops.savings.showback import build_statement
from finops.savings.showback_render import statement_csv
from finops.timeutil import utc_now
from tests.support import showback_scenario as scenario
from tests.support.alert_servers import Mailbox, Webhook, starttls_smtp
from tests.support.certificates import Certificates


def _showback(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(app, ["showback", *args], env=env)


def _said(result: Result) -> str:
    """The command's output as one line of words, out of the box Click draws around usage errors."""
    return " ".join(result.output.replace("│", " ").split())


def test_statements_printed_and_written(sessions, database_url: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    scenario.seed(sessions)
    env = {"FINOPS_DATABASE_URL": database_url}
    printed = _showback(env, "--month", "2026-10")
    assert printed.exit_code == 0, printed.output
    assert "GPU showback October 2026: team nlp\n" in printed.stdout
    assert "GPU showback October 2026: team vision\n" in printed.stdout
    assert "unexplained" in printed.stdout and "idle share of busy jobs" in printed.stdout
    assert "#SBATCH --gres=gpu:1" in printed.stdout

    html, table = tmp_path / "vision.html", tmp_path / "vision.csv"
    assert _showback(env, "--month", "2026-10", "--team", "vision", "--html", str(html)).stdout == f"wrote {html}\n"
    page = html.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "<style" not in page and "Team vision" in page
    assert _showback(env, "--month", "2026-10", "--team", "vision", "--csv", str(table)).exit_code == 0
    with sessions() as session:
        statement = build_statement(session, "vision", scenario.MONTH, utc_now())
    assert table.read_text(encoding="utf-8") == statement_csv(statement)

    refusals = [
        (["--month", "2026-10", "--html", str(html)], "--html and --csv write one team's statement: give --team"),
        (["--month", "2026-10", "--team", "vision", "--send", "--csv", str(table)], "give one of --send, --html"),
        (["--month", "2026-13"], "month '2026-13' is not a month as YYYY-MM"),
        (["--month", "2026-10", "--team", "nobody"], "error: team nobody has no jobs or rules yet; known teams:"),
        (["--month", f"{utc_now():%Y-%m}", "--send"], f"error: month {utc_now():%Y-%m} has not ended"),
    ]
    for args, message in refusals:
        result = _showback(env, *args)
        assert result.exit_code == 2 and message in _said(result), (args, result.output)


def test_send_delivers_each_statement_once(sessions, database_url: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    scenario.seed(sessions)
    webhook, mailbox, certificates = Webhook(), Mailbox(), Certificates()
    smtp = starttls_smtp(mailbox, certificates.server)
    ca, secret, rules = tmp_path / "ca.pem", tmp_path / "smtp-password", tmp_path / "alerts.yaml"
    ca.write_bytes(certificates.ca_pem)
    secret.write_text("mail-secret\n")
    rules.write_text(
        "routes:\n"
        "  - {team: vision, email: [vision-lead@example.org], slack: [vision]}\n"
        "default_route:\n  email: [gpu-ops@example.org]\n"
    )
    env = {
        "FINOPS_DATABASE_URL": database_url,
        "FINOPS_ALERT_RULES": str(rules),
        "FINOPS_ALERT_SLACK_WEBHOOKS": json.dumps({"vision": webhook.url}),
        "FINOPS_ALERT_WEBHOOK_HOSTS": '["127.0.0.1"]',
        "FINOPS_ALERT_WEBHOOK_ALLOW_PRIVATE": "true",
        "FINOPS_ALERT_SMTP_HOST": "127.0.0.1",
        "FINOPS_ALERT_SMTP_PORT": str(smtp.port),
        "FINOPS_ALERT_SMTP_SENDER": "gpu-finops@example.org",
        "FINOPS_ALERT_SMTP_USERNAME": "alerts",
        "FINOPS_ALERT_SMTP_PASSWORD_FILE": str(secret),
        "FINOPS_ALERT_SMTP_CA_FILE": str(ca),
    }
    try:
        first = _showback(env, "--month", "2026-10", "--send")
        again = _showback(env, "--month", "2026-10", "--send", "--team", "vision")
    finally:
        webhook.close()
        smtp.stop()
    assert first.exit_code == 0, first.output
    lines = first.stdout.splitlines()
    assert len(lines) == 3 and all(line.endswith(": delivered") for line in lines), lines
    assert [line.split(":")[0] for line in lines] == ["team nlp", "team vision", "team vision"]
    assert "(email → gpu-ops@example.org)" in lines[0] and "(slack → vision)" in lines[2]
    assert again.exit_code == 0 and again.stdout.startswith("team vision: already queued on ")
    assert again.stdout.rstrip().endswith("not sent again")
    assert sorted(str(m["To"]) for m in mailbox.messages) == ["gpu-ops@example.org", "vision-lead@example.org"]
    assert len(webhook.delivered) == 1
    with sessions() as session:
        actors = session.scalars(select(AuditEntry.actor).where(AuditEntry.action == "showback.queue")).all()
    assert len(actors) == 2 and all(actor.startswith("os-user:") for actor in actors)
