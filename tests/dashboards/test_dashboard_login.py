"""The dashboard's log-in, end to end: `gpu-finops dashboard` configured with a real OpenID Connect provider
(``oidc-provider`` on Node.js), driven by Debian's headless Chromium. A team lead logs in and every page shows their
team only (the fleet's pages are not offered, a ``?team=`` of another team is refused); they log out and see the log-in
button again; a viewer sees every team; someone whose groups give no role is told which would."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from finops.db.engine import make_engine, upgrade
from tests.dashboards.browser import chromium_page, served_dashboard
from tests.support.oidc_provider import oidc_provider
from tests.support.servers import free_port
from tests.support.two_clusters import seed_two_clusters

CLIENT_ID = "gpu-finops-dashboard"
CLIENT_SECRET = "test-client-secret"
ACCOUNTS = {
    "lead-alpha": {"name": "Ada Alpha", "email": "ada@example.org", "groups": ["staff", "team:alpha"]},
    "finance": {"name": "Fin Ance", "email": "fin@example.org", "groups": ["staff", "finops-viewers"]},
    "stranger": {"name": "Sam Stranger", "groups": ["staff"]},
}
WAIT_MS = 60_000
TEAM_PAGES = [  # path, a text the page shows once its data is there
    ("", "GPU capacity cost"),
    ("teams", "Budget burn-down"),
    ("jobs", "Cost of jobs"),
    ("idle", "Idle-episode cost"),
    ("savings", "Idle cost, all reasons"),
    ("alerts", "Resolved alerts"),  # alpha's idle-gpu alert; none of alpha fires
    ("prices", "Per GPU-hour, in USD"),
    ("planning", "Inference: weights + KV cache"),
]


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[str]:
    """The dashboard on the seeded two-cluster database (teams alpha, gamma and __unmapped__), logging people in
    with the provider: viewers are the group ``finops-viewers``, a team's members ``team:<team>``."""
    url = f"sqlite:///{tmp_path / 'dash.sqlite'}"
    upgrade(make_engine(url))
    seed_two_clusters(url)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with oidc_provider(tmp_path, CLIENT_ID, CLIENT_SECRET, f"{base}/oauth2callback", ACCOUNTS) as issuer:
        settings = {
            "FINOPS_DASHBOARD_URL": base,
            "FINOPS_DASHBOARD_OIDC_METADATA_URL": f"{issuer}/.well-known/openid-configuration",
            "FINOPS_DASHBOARD_OIDC_CLIENT_ID": CLIENT_ID,
            "FINOPS_DASHBOARD_OIDC_CLIENT_SECRET": CLIENT_SECRET,
            "FINOPS_DASHBOARD_OIDC_SCOPES": "openid email profile groups",
            "FINOPS_DASHBOARD_OIDC_PROMPT": "login",
            "FINOPS_DASHBOARD_VIEWER_GROUPS": "finops-viewers",
        }
        with served_dashboard(url, settings, port) as served:
            yield served


@pytest.fixture
def page() -> Iterator[Page]:
    with chromium_page() as tab:
        yield tab


def _finished(page: Page) -> None:
    """Wait for the page's script to have run to its end."""
    page.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]', timeout=WAIT_MS)


def _log_in(page: Page, base: str, account: str) -> None:
    """From the dashboard's log-in button through the provider's log-in form (any password) back to the dashboard."""
    page.goto(base)
    page.get_by_role("button", name="Log in").click(timeout=WAIT_MS)
    page.locator('input[name="login"]').fill(account, timeout=WAIT_MS)
    page.locator('input[name="password"]').fill("any password")
    page.get_by_role("button", name="Sign-in").click()
    page.wait_for_url(f"{base}/**", timeout=WAIT_MS)
    _finished(page)


def _csv_column(page: Page, column: str) -> set[str]:
    """The values of ``column`` in the CSV of the page's first "Download CSV" button."""
    with page.expect_download(timeout=WAIT_MS) as download:
        page.get_by_role("button", name="Download CSV").first.click()
    return {row[column] for row in csv.DictReader(io.StringIO(Path(download.value.path()).read_text()))}


def test_a_team_lead_sees_only_their_team_then_logs_out(dashboard: str, page: Page) -> None:
    page.goto(dashboard)
    expect(page.get_by_role("button", name="Log in")).to_be_visible(timeout=WAIT_MS)
    assert page.locator('[data-testid="stSidebarNav"]').count() == 0, "nothing but the log-in before it"
    _log_in(page, dashboard, "lead-alpha")
    sidebar = page.locator('[data-testid="stSidebar"]')
    expect(sidebar).to_contain_text("Logged in as Ada Alpha", timeout=WAIT_MS)
    expect(sidebar).to_contain_text("role: team alpha")
    navigation = page.locator('[data-testid="stSidebarNav"]')
    expect(navigation).to_contain_text("Teams")
    for fleet_page in ("GPUs & nodes", "Data quality"):
        expect(navigation).not_to_contain_text(fleet_page)
    for path, key_text in TEAM_PAGES:
        page.goto(f"{dashboard}/{path}?period=7d")
        page.get_by_text(key_text).first.wait_for(timeout=WAIT_MS)
        _finished(page)
        assert page.locator('[data-testid="stException"]').count() == 0, path
        assert "gamma" not in page.inner_text("body"), f"/{path} names another team"
        assert "__unmapped__" not in page.inner_text("body"), f"/{path} names another team"
    page.goto(f"{dashboard}/jobs?period=7d")
    page.get_by_text("Cost of jobs").wait_for(timeout=WAIT_MS)
    _finished(page)
    assert _csv_column(page, "Team") == {"alpha"}, "the jobs of the lead's team only"
    page.goto(f"{dashboard}/teams?period=7d&team=gamma")
    expect(sidebar).to_contain_text("team='gamma' in the URL is ignored: you see team alpha only", timeout=WAIT_MS)
    _finished(page)
    expect(page.get_by_text("1.00k USD").first).to_be_visible()  # alpha's budget, not gamma's (none)
    assert _csv_column(page, "Team") == {"alpha"}
    assert "team=gamma" not in page.url
    sidebar.get_by_role("button", name="Log out").click()
    page.get_by_role("button", name="Yes, sign me out").click(timeout=WAIT_MS)  # the provider's end of session
    expect(page.get_by_role("button", name="Log in")).to_be_visible(timeout=WAIT_MS)
    page.goto(f"{dashboard}/jobs?period=7d")
    expect(page.get_by_role("button", name="Log in")).to_be_visible(timeout=WAIT_MS)
    assert "Cost of jobs" not in page.inner_text("body")


def test_a_viewer_sees_every_team(dashboard: str, page: Page) -> None:
    _log_in(page, dashboard, "finance")
    expect(page.locator('[data-testid="stSidebar"]')).to_contain_text("role: viewer", timeout=WAIT_MS)
    navigation = page.locator('[data-testid="stSidebarNav"]')
    expect(navigation).to_contain_text("GPUs & nodes")
    expect(navigation).to_contain_text("Data quality")
    page.goto(f"{dashboard}/jobs?period=7d")
    page.get_by_text("Cost of jobs").wait_for(timeout=WAIT_MS)
    _finished(page)
    assert _csv_column(page, "Team") == {"alpha", "__unmapped__", "gamma"}


def test_someone_whose_groups_give_no_role_is_told_which_would(dashboard: str, page: Page) -> None:
    _log_in(page, dashboard, "stranger")
    expect(page.get_by_text("Not authorised")).to_be_visible(timeout=WAIT_MS)
    expect(page.get_by_text("a viewer group (finops-viewers)")).to_be_visible()
    expect(page.get_by_text("team:<team>")).to_be_visible()
    assert page.locator('[data-testid="stSidebarNav"]').count() == 0
    expect(page.get_by_role("button", name="Log out")).to_be_visible()
