"""Alert e-mails as a mail client shows them: a team named ``vcpDC`` crossing 80 % of its budget while one of its
jobs holds idle GPUs gets its messages through the real rules, dispatch and delivery (a Slack-like webhook and
aiosmtpd with STARTTLS); each e-mail's HTML is loaded in Debian's headless Chromium (through Playwright),
screenshotted under the test's tmp_path, and judged from the computed styles of its DOM."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, sync_playwright
from pydantic import SecretStr
from sqlalchemy.orm import Session, sessionmaker

from alerts.config import parse_config
from alerts.delivery import Channels
from alerts.mail import SmtpSettings
from alerts.rules.candidate import money
from alerts.service import AlertRunner, AlertService
from alerts.webhooks import WebhookPolicy
from finops.analysis.budgets import BudgetStatus, budget_status, record_budget_events, set_budget
from finops.analysis.idle import IdlePolicy
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.service import scheduler
from finops.service.scheduler import run_rollup
from tests.support import scenario
from tests.support.alert_cluster import Cluster, busy, idle
from tests.support.alert_servers import Mailbox, Webhook, starttls_smtp
from tests.support.certificates import Certificates
from tests.support.environment import debian_binary

TEAM = "vcpDC"
DASHBOARD = "https://finops.example.org/dash"
FACTS = "table:has(th):not(:has(table))"
"""The table of facts: the innermost table with row headers (the layout tables around it hold it, and no th)."""
LOCAL = WebhookPolicy(allowed_hosts=frozenset({"127.0.0.1"}), allow_private_addresses=True)


@pytest.fixture
def page() -> Iterator[Page]:
    """A Chromium page as wide as a desktop mail client's reading pane."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(debian_binary("chromium")), args=["--no-sandbox"])
        try:
            yield browser.new_page(viewport={"width": 760, "height": 600})
        finally:
            browser.close()


def _deliver_alerts(
    sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> tuple[list[EmailMessage], list[dict[str, Any]], BudgetStatus]:
    """Team vcpDC: job 5101 busy on 2 GPUs and job 5102 idle on 4 GPUs for 2 hours, a budget at 85 % of its spend;
    rules evaluated, then dispatched and delivered (no group_wait), at the newest reading: the scenario slice's end
    (:func:`tests.support.scenario.slice_end`), the two hours before it in one month, the rollup's clock stopped
    there. Returns (e-mails, Slack bodies, budget status)."""
    now = scenario.slice_end(scenario.start_hour())
    monkeypatch.setattr(scheduler, "utc_now", lambda: now)
    start = now - timedelta(hours=2)
    cluster = Cluster(sessions)
    cluster.readings("gpu-v-01", [0, 1], start, now + timedelta(seconds=1), values=busy, job="5101")
    cluster.readings("gpu-v-01", [2, 3, 4, 5], start, now + timedelta(seconds=1), values=idle, job="5102")
    cluster.job("5101", "vcp", "mei", "gpu-v-01", 2, start, team=TEAM)
    cluster.job("5102", "vcp", "lars", "gpu-v-01", 4, start, team=TEAM)
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    run_rollup(sessions, pricing, IdlePolicy())
    with sessions.begin() as session:
        set_budget(
            session, TEAM, Decimal(1), now, "USD", actor="system:test"
        )  # a budget, for its status to tell the spend
        (before,) = budget_status(session, now)
        set_budget(
            session, TEAM, (before.spent / Decimal("0.85")).quantize(Decimal("0.01")), now, "USD", actor="system:test"
        )
        record_budget_events(session, now)
        (status,) = budget_status(session, now)
    webhook, mailbox, certificates = Webhook(), Mailbox(), Certificates()
    smtp = starttls_smtp(mailbox, certificates.server)
    config = parse_config(
        {
            "routes": [{"team": TEAM, "slack": ["vcp"], "email": ["vcp-lead@example.org"]}],
            "rules": {"budget-forecast": {"enabled": False}},  # forecasts have their own tests
            "timers": {"group_wait": "0s"},
        },
        "test",
    )
    channels = Channels(
        {"vcp": SecretStr(webhook.url)},
        LOCAL,
        SmtpSettings("127.0.0.1", smtp.port, "gpu-finops@example.org", username="alerts", password="mail-secret",
                     ssl_context=certificates.client),
    )  # fmt: skip
    service = AlertService(config, channels=channels, dashboard_url=DASHBOARD)
    runner = AlertRunner(service, sessions, clock=lambda: now)  # at the newest reading, however long the test took
    try:
        runner.evaluate()
        _, outcomes = runner.deliver()
    finally:
        runner.close()
        webhook.close()
        smtp.stop()
    assert sorted(o.status for o in outcomes) == ["delivered"] * 4, outcomes
    return mailbox.messages, webhook.delivered, status


def _style(page: Page, selector: str, prop: str) -> str:
    return str(page.eval_on_selector(selector, f"e => getComputedStyle(e).{prop}"))


def _cell_style(page: Page, text: str, prop: str) -> str:
    """A computed style of the table cell whose text is exactly ``text``."""
    return str(
        page.evaluate(
            "([text, prop]) => getComputedStyle([...document.querySelectorAll('td, th')]"
            ".find(c => c.textContent === text))[prop]",
            [text, prop],
        )
    )


def test_alert_emails_read_well_and_keep_the_team_name(sessions, page: Page, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    emails, slack, status = _deliver_alerts(sessions, monkeypatch)
    by_subject = {str(email["Subject"]): email for email in emails}
    budget_title = f"[FIRING] Budget 80 % reached: team {TEAM}"
    idle_title = f"[FIRING] Idle GPUs: job 5102, team {TEAM}"
    assert sorted(by_subject) == [budget_title, idle_title]
    spent, budget = money(status.spent, "USD"), money(status.budget, "USD")

    # The name as stored, in Slack and e-mail alike: never re-cased.
    for body in slack:
        assert TEAM in body["text"] and TEAM.lower() not in body["text"]
    (budget_slack,) = [body for body in slack if body["blocks"][0]["text"]["text"] == budget_title]
    assert budget_slack["blocks"][1]["text"]["text"].startswith(f"Team {TEAM} has spent {spent} of its {budget}")
    for email in emails:
        text_part, html_part = email.get_body(("plain",)), email.get_body(("html",))
        assert text_part is not None and html_part is not None, "a plain-text alternative beside the HTML"
        assert TEAM in text_part.get_content() and TEAM.lower() not in text_part.get_content()

    facts = {
        str(f["text"].split("\n")[0].strip("*")): str(f["text"].split("\n")[1])
        for body in slack
        for f in body["blocks"][2]["fields"]
    }
    cases = [
        ("budget", budget_title, "teams", [spent, budget, f"{status.used_percent} %"], [f"{status.month:%Y-%m}"]),
        ("idle", idle_title, "idle", [facts["Cost so far"]], ["5102", "lars", facts["Memory held"]]),
    ]
    for name, title, page_name, amounts, texts in cases:
        html_part = by_subject[title].get_body(("html",))
        assert html_part is not None
        page.set_content(html_part.get_content())
        screenshot = tmp_path / f"alert-email-{name}.png"
        page.screenshot(path=str(screenshot), full_page=True)
        assert screenshot.stat().st_size > 0

        # Nothing a mail client strips is relied upon: no <style> block, no stylesheet.
        assert page.locator("style, link[rel=stylesheet]").count() == 0
        body_text = page.inner_text("body")
        assert f"team {TEAM}" in body_text and TEAM.lower() not in body_text
        families = page.evaluate(
            "[...document.body.querySelectorAll('*')].filter(e => [...e.childNodes].some("
            "n => n.nodeType === Node.TEXT_NODE && n.textContent.trim())).map(e => getComputedStyle(e).fontFamily)"
        )
        assert families and all(f.endswith("sans-serif") and not f.startswith(("serif", '"Times')) for f in families)
        assert page.locator(f"{FACTS}").count() == 1, "one table of facts, with row headers"
        assert _style(page, f"{FACTS}", "borderTopStyle") == "solid"
        assert _style(page, f"{FACTS}", "borderCollapse") == "collapse"
        assert _style(page, f"{FACTS} th", "borderBottomWidth") == "1px"
        rows = page.locator(f"{FACTS} tr")
        colours = [rows.nth(i).evaluate("r => getComputedStyle(r).backgroundColor") for i in range(2)]
        assert colours[0] != colours[1], "zebra rows"
        for value in amounts:
            assert _cell_style(page, value, "textAlign") == "right", value
            assert _cell_style(page, value, "fontVariantNumeric") == "tabular-nums", value
        for value in [TEAM, *texts]:
            assert _cell_style(page, value, "textAlign") == "left", value
        button = page.locator(f'a[href="{DASHBOARD}/{page_name}"]')
        assert button.inner_text() == "Open in gpu-finops"
        assert button.evaluate("a => getComputedStyle(a).display") == "inline-block"
        assert button.evaluate("a => getComputedStyle(a.parentElement).backgroundColor") == "rgb(9, 105, 218)"
