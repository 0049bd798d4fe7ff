"""`gpu-finops dashboard` on 127.0.0.1 driven by Debian's headless Chromium (through Playwright): every page
renders its key elements and no Streamlit exception box."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect, sync_playwright

from finops.db import make_engine, upgrade
from tests import scenario
from tests.conftest import debian_binary
from tests.servers import free_port

PAGES = [
    ("", "GPU capacity cost"),  # Overview, the default page
    ("teams", "Cost by team"),
    ("jobs", "Cost of jobs"),
    ("idle", "Cost of idle episodes"),  # shown only when the scenario's idle episode is found
    ("quality", "GPU-hours held by a job"),
    ("prices", "Per GPU-hour, in USD"),
    ("planning", "Inference: weights + KV cache"),
]


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[str]:
    """The dashboard on the seeded scenario database; yields its URL once Streamlit answers its health check."""
    url = f"sqlite:///{tmp_path / 'dash.sqlite'}"
    upgrade(make_engine(url))
    scenario.seed_dashboard_database(url)
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "finops.cli", "dashboard", "--port", str(port)],
        env={**os.environ, "FINOPS_DATABASE_URL": url},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{base}/_stcore/health").status_code == 200:
                    break
            assert time.monotonic() < deadline and process.poll() is None, "the dashboard did not start"
            time.sleep(0.3)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture
def page() -> Iterator[Page]:
    chromium = debian_binary("chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium), args=["--no-sandbox"])
        try:
            yield browser.new_page()
        finally:
            browser.close()


@pytest.mark.parametrize(("path", "key_text"), PAGES)
def test_every_page_renders_in_a_real_browser(dashboard: str, page: Page, path: str, key_text: str) -> None:
    page.goto(f"{dashboard}/{path}")
    page.wait_for_selector('[data-testid="stSidebarNav"]', timeout=60_000)
    page.get_by_text(key_text).first.wait_for(timeout=60_000)
    page.locator('[data-testid="stDataFrame"]').first.wait_for(timeout=60_000)  # the page's table (a canvas grid)
    navigation = page.locator('[data-testid="stSidebarNav"]')
    for title in ("Overview", "Teams", "Jobs", "Idle GPUs", "Data quality", "Prices", "Planning"):
        expect(navigation).to_contain_text(title)
    assert page.locator('[data-testid="stException"]').count() == 0
