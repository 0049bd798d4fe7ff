"""Monthly showback statements through the scheduler, the alerts outbox and real servers, both databases: the
scheduled job run twice queues one statement per team and month, the delivery job sends it to aiosmtpd (STARTTLS)
and a Slack-like webhook, and the e-mail's text part, HTML part and CSV attachment carry the hand-computed figures
of :mod:`tests.support.showback_scenario`. Two runs at once queue each statement once too."""

from __future__ import annotations

import csv
import io
import threading
from datetime import timedelta
from decimal import Decimal
from email.message import EmailMessage
from html.parser import HTMLParser
from typing import Any

from prometheus_client import CollectorRegistry
from pydantic import SecretStr
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from alerts.config import parse_config
from alerts.delivery import Channels
from alerts.mail import SmtpSettings
from alerts.models import AlertDelivery, ShowbackStatement
from alerts.service import AlertRunner, AlertService
from alerts.showback import Queued, queue_month, statement_email
from alerts.webhooks import WebhookPolicy
from finops.analysis.idle import IdlePolicy
from finops.db.models import AuditEntry
from finops.ledger.costmodel import CENT, quantize
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.savings.showback import build_statement
from finops.service.cost_metrics import CostMetrics
from finops.service.scheduler import start_scheduler
from finops.timeutil import utc_now
from tests.service.job_runs import JobRuns
from tests.support import showback_scenario as scenario
from tests.support.alert_servers import Mailbox, Webhook, starttls_smtp
from tests.support.certificates import Certificates

DASHBOARD = "https://finops.example.org/dash"
LOCAL = WebhookPolicy(allowed_hosts=frozenset({"127.0.0.1"}), allow_private_addresses=True)
QUIET = {
    name: {"enabled": False} for name in ("idle-gpu", "throttling", "collector-silent", "gpu-lost", "data-quality")
}
ROUTES = {
    "routes": [
        {"team": "vision", "email": ["vision-lead@example.org"], "slack": ["vision"]},
        # A route for warnings and worse still takes the team's statements: a statement is not an alert.
        {"team": "nlp", "min_severity": "critical", "email": ["nlp-lead@example.org"]},
    ],
    "rules": QUIET,
}


class _Cells(HTMLParser):
    """The text of every table row of an HTML document, one list of cell texts per ``<tr>`` without nested rows."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.rows.append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _runner(
    sessions: sessionmaker[Session], smtp_port: int, certificates: Certificates, webhook: Webhook
) -> AlertRunner:
    channels = Channels(
        {"vision": SecretStr(webhook.url)},
        LOCAL,
        SmtpSettings("127.0.0.1", smtp_port, "gpu-finops@example.org", username="alerts", password="mail-secret",
                     ssl_context=certificates.client),
    )  # fmt: skip
    service = AlertService(parse_config(ROUTES, "test"), channels=channels, dashboard_url=DASHBOARD, poll_seconds=0.2)
    return AlertRunner(service, sessions, clock=lambda: scenario.NOW)


def _money(amount: Decimal) -> str:
    return f"{amount:,.2f}"


def test_the_scheduled_job_run_twice_emails_each_statement_once(sessions: sessionmaker[Session]) -> None:
    scenario.seed(sessions)
    want = scenario.expected()
    webhook, mailbox, certificates = Webhook(), Mailbox(), Certificates()
    smtp = starttls_smtp(mailbox, certificates.server)
    runner = _runner(sessions, smtp.port, certificates, webhook)
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    scheduler = start_scheduler(sessions, pricing, IdlePolicy(), CostMetrics(CollectorRegistry()), 3600, alerts=runner)
    try:
        job = scheduler.get_job("showback")
        assert str(job.trigger) == "cron[day='1', hour='*', minute='10']"
        assert job.trigger.get_next_fire_time(None, scenario.MONTH + timedelta(days=14)) == scenario.NOW
        runs = JobRuns(scheduler)
        for _ in range(2):  # the job as the 00:10 and 01:10 runs of November's first day would run it
            scheduler.modify_job("showback", next_run_time=utc_now())
            runs.wait("showback", 0)
            runs.wait("alert_delivery", 1)
    finally:
        scheduler.shutdown(wait=True)
        runner.close()
        webhook.close()
        smtp.stop()

    with sessions() as session:
        statements = session.scalars(select(ShowbackStatement)).all()
        assert len(statements) == 2 and {s.month for s in statements} == {scenario.MONTH}
        deliveries = session.scalars(select(AlertDelivery).order_by(AlertDelivery.id)).all()
        assert sorted(d.id for d in deliveries) == sorted(i for s in statements for i in s.deliveries)
        assert [(d.channel, d.target, d.status) for d in deliveries] == [
            ("email", "nlp-lead@example.org", "delivered"),
            ("email", "vision-lead@example.org", "delivered"),
            ("slack", "vision", "delivered"),
        ]
        audited = session.execute(
            select(AuditEntry.actor, func.count())
            .where(AuditEntry.action == "showback.queue")
            .group_by(AuditEntry.actor)
        ).all()
        assert audited == [("system:scheduler", 2)]

    by_recipient: dict[str, EmailMessage] = {str(m["To"]): m for m in mailbox.messages}  # type: ignore[misc]
    assert len(mailbox.messages) == 2 and sorted(by_recipient) == ["nlp-lead@example.org", "vision-lead@example.org"]
    email = by_recipient["vision-lead@example.org"]
    assert email["Subject"] == "GPU showback October 2026: team vision"

    text_part, html_part = email.get_body(("plain",)), email.get_body(("html",))
    assert text_part is not None and html_part is not None
    text = text_part.get_content().replace("\r\n", "\n")  # lines end in CRLF on the wire
    assert text.startswith("GPU showback October 2026: team vision\n")
    assert f"Team vision spent {_money(want.spend)} USD on GPUs in October 2026" in text
    assert "unexplained" in text and "idle share of busy jobs" in text and "#SBATCH --gres=gpu:1" in text

    parser = _Cells()
    parser.feed(html_part.get_content())
    rows = [row for row in parser.rows if row]
    assert ["Job", "Name", "User", "GPU-hours", "Cost", "Idle"] in rows
    for job_id, hours, cost, idle in want.jobs:
        assert [job_id, f"job-{job_id}", "lars" if job_id == "7002" else "mei", f"{hours:,.2f}", _money(cost),
                _money(idle)] in rows  # fmt: skip
    assert ["Total", "", "", f"{want.gpu_hours:,.2f}", _money(want.spend), _money(want.idle)] in rows
    for title, hours, cost in want.reasons:
        assert [title, f"{hours:,.2f}", _money(cost)] in rows
    assert ["Spend (allocated cost)", f"{_money(want.spend)} USD"] in rows
    assert ["Used", f"{want.budget_used_percent} %"] in rows
    assert "#SBATCH --gres=gpu:1" in html_part.get_content()

    (attachment,) = list(email.iter_attachments())
    assert attachment.get_content_type() == "text/csv"
    assert attachment.get_filename() == "showback-2026-10-vision.csv"
    table = list(csv.DictReader(io.StringIO(attachment.get_content())))
    jobs = [
        (r["job"], Decimal(r["allocated_cost"]), Decimal(r["idle_cost"])) for r in table if r["section"] == "top_jobs"
    ]
    assert jobs == [(job_id, cost, idle) for job_id, _, cost, idle in want.jobs]
    (spend,) = [r for r in table if r["section"] == "spend"]
    assert (Decimal(spend["allocated_cost"]), Decimal(spend["idle_cost"])) == (want.spend, want.idle)

    (chat,) = webhook.delivered
    header, summary, facts, actions = chat["blocks"]
    assert header["text"]["text"] == "GPU showback October 2026: team vision"
    assert summary["text"]["text"].startswith(f"Team vision spent {_money(want.spend)} USD on GPUs in October 2026")
    assert summary["text"]["text"].endswith("was e-mailed to the team's recipients.")
    assert f"*Idle cost*\n{_money(want.idle)} USD" in [f["text"] for f in facts["fields"]]
    link = f"{DASHBOARD}/teams?period=custom&from=2026-10-01&to=2026-10-31&team=vision"
    assert actions["elements"][0]["url"] == link


def test_two_runs_at_once_queue_each_statement_once(sessions: sessionmaker[Session]) -> None:
    scenario.seed(sessions)
    config = parse_config(ROUTES, "test")
    barrier = threading.Barrier(2)
    results: list[list[Queued]] = []
    errors: list[BaseException] = []

    def run(actor: str) -> None:
        try:
            barrier.wait(timeout=30)
            done = queue_month(
                sessions, config, scenario.MONTH, scenario.NOW, dashboard_url=DASHBOARD,
                deadline=timedelta(hours=1), idle_window_seconds=1800, actor=actor,
            )  # fmt: skip
            results.append(done)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(f"system:test-{n}",)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    queued = sorted(q.team for done in results for q in done if q.queued)
    assert queued == ["nlp", "vision"], results
    earlier: list[Any] = [q for done in results for q in done if not q.queued]
    with sessions() as session:
        rows = {s.team_id: s.deliveries for s in session.scalars(select(ShowbackStatement))}
        assert session.scalar(select(func.count()).select_from(AlertDelivery)) == 3
    assert len(rows) == 2
    for q in earlier:  # the run that came second reports the first's deliveries
        assert q.queued_at == scenario.NOW and list(q.deliveries) in rows.values()


def test_a_route_without_a_target_records_nothing_until_it_has_one(sessions: sessionmaker[Session]) -> None:
    scenario.seed(sessions)
    silent = AlertService(parse_config({"routes": [{"match": ['rule="showback"']}], "rules": QUIET}, "test"))
    done = AlertRunner(silent, sessions, clock=lambda: scenario.NOW).showback()
    assert [(q.team, q.queued, q.queued_at, q.route) for q in done] == [
        ("nlp", False, None, "route-0"), ("vision", False, None, "route-0"),
    ]  # fmt: skip
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(ShowbackStatement)) == 0
    later = AlertService(parse_config({"default_route": {"email": ["gpu-ops@example.org"]}, "rules": QUIET}, "test"))
    done = AlertRunner(later, sessions, clock=lambda: scenario.NOW).showback()
    assert [(q.team, q.queued, q.route) for q in done] == [("nlp", True, "default"), ("vision", True, "default")]


def test_the_email_carries_the_efficiency_sections(sessions: sessionmaker[Session]) -> None:
    """A profiled month (:data:`tests.support.showback_scenario.PROFILED`): the e-mail's text, HTML and CSV give
    vision's SM activity and band and its busy-but-inefficient job with its bottleneck and inactive cost; nlp's
    says not measured, with the fix."""
    scenario.seed(sessions, profiled=True)
    r = scenario.rate()
    with sessions() as session:
        vision = build_statement(session, "vision", scenario.MONTH, scenario.NOW)
        nlp = build_statement(session, "nlp", scenario.MONTH, scenario.NOW)
    document = statement_email(vision, DASHBOARD).document
    assert document is not None
    inactive, allocated = (_money(quantize(share * r, CENT)) for share in (Decimal(3), Decimal(4)))
    assert "Busy but inefficient jobs" in document.text and "memory-bound" in document.text
    parser = _Cells()
    parser.feed(document.html)
    rows = [row for row in parser.rows if row]
    assert ["SM activity", "17.0 %"] in rows and ["Band", "ineffective"] in rows
    assert ["Profiled GPU-hours", "100.0 %"] in rows
    assert ["Inactive cost", f"{_money(quantize(Decimal('9.125') * r, CENT))} USD"] in rows
    assert ["Job", "User", "Probable bottleneck", "Utilisation", "SM activity", "Cost", "Inactive"] in rows
    assert ["7001", "mei", "memory-bound", "95.0 %", "25.0 %", allocated, inactive] in rows
    (attachment,) = document.attachments
    (job,) = [r for r in csv.DictReader(io.StringIO(attachment.content)) if r["section"] == "inefficient_jobs"]
    assert (job["job"], job["bottleneck"], job["inactive_cost"]) == ("7001", "memory-bound", inactive.replace(",", ""))

    unmeasured = statement_email(nlp, DASHBOARD).document
    assert unmeasured is not None
    assert "SM activity: not measured" in unmeasured.html and "docs/collector.md#hardware-activity" in unmeasured.html
