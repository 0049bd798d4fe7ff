"""`gpu-finops dashboard` on 127.0.0.1 driven by Debian's headless Chromium (through Playwright): every page
renders its key elements and no Streamlit exception box, and says it has no log-in; filters given in the URL are
applied and follow the viewer to other pages; a table's "Download CSV" button downloads its rows."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Locator, Page, expect

from finops.db.engine import make_engine, upgrade
from tests.dashboards.browser import chromium_page, served_dashboard
from tests.support.two_clusters import seed_two_clusters

PAGES = [
    ("", "GPU capacity cost"),  # Overview, the default page
    ("teams", "Cost by team"),
    ("jobs", "Cost of jobs"),
    ("gpus", "Utilisation by node"),
    ("idle", "Idle-episode cost"),  # shown only when the scenario's idle episode is found
    ("savings", "Idle cost, all reasons"),
    ("alerts", "Firing alerts"),  # shown only when the seeded firing alerts are found
    ("quality", "GPU-hours held by a job"),
    ("prices", "Per GPU-hour, in USD"),
    ("planning", "Inference: weights + KV cache"),
]
TITLES = (
    "Overview",
    "Teams",
    "Jobs",
    "GPUs & nodes",
    "Idle GPUs",
    "Savings",
    "Alerts",
    "Data quality",
    "Prices",
    "Planning",
)


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[str]:
    """The dashboard on the seeded two-cluster database."""
    url = f"sqlite:///{tmp_path / 'dash.sqlite'}"
    upgrade(make_engine(url))
    seed_two_clusters(url)
    with served_dashboard(url) as base:
        yield base


@pytest.fixture
def page() -> Iterator[Page]:
    with chromium_page() as tab:
        yield tab


def _finished(page: Page) -> None:
    """Wait for the page's script to have run to its end."""
    page.wait_for_selector('[data-testid="stSidebarNav"]', timeout=60_000)
    page.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]', timeout=60_000)


def _sidebar_select(page: Page, label: str) -> Locator:
    """The sidebar selectbox labelled ``label`` (its input holds the shown value)."""
    return page.locator('[data-testid="stSidebar"]').get_by_role("combobox", name=label)


@pytest.mark.parametrize(("path", "key_text"), PAGES)
def test_every_page_renders_in_a_real_browser(dashboard: str, page: Page, path: str, key_text: str) -> None:
    page.goto(f"{dashboard}/{path}?period=7d")
    page.get_by_text(key_text).first.wait_for(timeout=60_000)
    page.locator('[data-testid="stDataFrame"]').first.wait_for(timeout=60_000)  # the page's table (a canvas grid)
    _finished(page)
    navigation = page.locator('[data-testid="stSidebarNav"]')
    for title in TITLES:
        expect(navigation).to_contain_text(title)
    expect(page.locator('[data-testid="stSidebar"]')).to_contain_text("Unauthenticated: listening on 127.0.0.1 only")
    assert page.locator('[data-testid="stException"]').count() == 0


def test_a_filtered_url_shows_the_filtered_view_and_keeps_it_across_pages(dashboard: str, page: Page) -> None:
    page.goto(f"{dashboard}/teams?period=7d&team=alpha")
    page.get_by_text("Budget burn-down").wait_for(timeout=60_000)
    _finished(page)
    expect(_sidebar_select(page, "Team")).to_have_value("alpha")
    expect(_sidebar_select(page, "Period")).to_have_value("Last 7 days")
    expect(page.get_by_text("Spent in ")).to_be_visible()  # the burn-down of the chosen team
    expect(page.get_by_text("1.00k USD").first).to_be_visible()  # alpha's budget
    expect(page.get_by_text("Choose a team in the sidebar")).to_have_count(0)
    page.locator('[data-testid="stSidebarNav"]').get_by_text("GPUs & nodes").click()
    page.get_by_text("Utilisation by node").wait_for(timeout=60_000)
    _finished(page)
    assert "team=" not in page.url, "the hardware page has no team filter"
    page.goto(f"{dashboard}/gpus?cluster=vega")
    page.get_by_text("Utilisation by node").wait_for(timeout=60_000)
    _finished(page)
    expect(page.get_by_text("Mean GPU utilisation of each node over 1 hour, 1 node.")).to_be_visible()
    page.locator('[data-testid="stSidebarNav"]').get_by_text("Jobs").click()
    page.get_by_text("Cost of jobs").wait_for(timeout=60_000)
    _finished(page)
    expect(_sidebar_select(page, "Cluster")).to_have_value("vega")
    assert "cluster=vega" in page.url, "the filter follows to the next page and into its URL"
    assert page.locator('[data-testid="stException"]').count() == 0


def test_download_csv_gives_the_tables_rows(dashboard: str, page: Page) -> None:
    page.goto(f"{dashboard}/jobs?period=7d")
    page.get_by_text("Cost of jobs").wait_for(timeout=60_000)
    _finished(page)
    with page.expect_download(timeout=60_000) as download:
        page.get_by_role("button", name="Download CSV").first.click()
    assert download.value.suggested_filename == "cost-by-job.csv"
    rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    assert sorted(row["Job"] for row in rows) == ["501", "502", "601"], "the headers the table shows"
    assert {row["Team"] for row in rows} == {"alpha", "__unmapped__", "gamma"}
    assert all(row["Allocated cost (USD)"].replace(".", "", 1).isdigit() for row in rows), (
        "plain decimals, currency in the header"
    )
