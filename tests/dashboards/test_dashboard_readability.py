"""Every dashboard page read as a person sees it, in Debian's headless Chromium at the default 1280 × 720 window, on
the demo's database (the first two hours of the real Helios week: 512 GPUs, six teams, budgets of hundreds of
thousands of dollars): no headline figure is cut off, its exact value is in its tooltip, table headers are human
words with units (no raw field names), the two idle measures are named and explained, and a screenshot of each
whole page is saved under the test's tmp_path."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from dashboards.measures import EPISODE_COST, UNUSED_COST
from tests.dashboards.browser import chromium_page, served_dashboard

DEMO_MINUTES = 120
TIMEOUT_MS = 60_000
THOUSANDS = re.compile(r"\d{1,3}(,\d{3})+\.\d{2} USD")
"""An exact money figure of at least 1,000 with its thousands separators: ``1,902,183.00 USD``."""


PAGES = [
    # path, text the page shows once its data is in, headers its first tables show, the metric whose tooltip holds
    # a figure of thousands, the idle measure it explains
    ("", "GPU capacity cost", {"Team", "Budget (USD)", "Forecast month-end (USD)"}, "Budgets this month", UNUSED_COST),
    ("teams", "Cost by team", {"Team", "Allocated cost (USD)", "Unused cost (USD)"}, None, UNUSED_COST),
    ("teams?team=vc6YE", "Budget burn-down", {"Day (UTC)", "Cumulative spend (USD)"}, "Budget", UNUSED_COST),
    ("jobs", "Cost of jobs", {"Job", "Allocated GPU-hours", "Utilisation"}, "Cost of jobs", UNUSED_COST),
    ("gpus", "Utilisation by node", {"Node", "Readings", "GPU idle (% of readings)"}, None, None),
    ("idle", EPISODE_COST, {"Duration (hours)", "Memory held", "Episode cost (USD)"}, None, EPISODE_COST),
    ("savings", "Idle cost, all reasons", {"Probable reason", "Cost (USD)", "GPUs to commit"}, None, None),
    ("alerts", "Silences", set(), None, None),
    ("quality", "GPU-hours held by a job", {"Node", "Newest reading (UTC)"}, None, None),
    ("prices", "Per GPU-hour, in USD", {"GPU model", "Pricing model", "Per GPU-hour (USD)"}, None, None),
    ("planning", "Inference: weights + KV cache", {"ZeRO stage", "Training state per GPU (GB)"}, None, None),
]
WITHOUT_FIGURES = {"teams", "gpus", "alerts", "prices"}
"""Pages with no headline figure on the demo's data (Teams shows its figures once a team is chosen; no alert fires)."""
POINTERS = {UNUSED_COST: EPISODE_COST.lower(), EPISODE_COST: UNUSED_COST.lower()}
"""Each measure's caption names the other one."""


def _name(path: str) -> str:
    """A page's name for its test and screenshot: ``overview``, ``teams-team-vc6YE``."""
    return path.replace("?", "-").replace("=", "-") or "overview"


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Iterator[str]:
    """The dashboard on the demo's database; yields its URL once Streamlit answers its health check."""
    folder = tmp_path_factory.mktemp("readability")
    url = f"sqlite:///{folder / 'demo.sqlite'}"
    trace = f"helios:{shared_data / 'helios-earth-vc-allocation'}"
    demo = [sys.executable, "-m", "finops.cli", "demo", "--headless", "--database-url", url, "--trace", trace]
    subprocess.run([*demo, "--minutes", str(DEMO_MINUTES)], check=True, capture_output=True, timeout=600)
    with served_dashboard(url) as base:
        yield base


@pytest.fixture(scope="module")
def browser_page() -> Iterator[Page]:
    """One Chromium tab at the default window, reused page after page."""
    with chromium_page() as tab:
        yield tab


def _drawn(page: Page) -> None:
    """Wait until the script has run to its end and every visible table and chart is drawn (the tables' headers
    are in their accessible grid, which the grid fills after drawing, and the charts have their marks); tables in
    a closed expander or another tab are not drawn, and not waited for."""
    page.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]', timeout=TIMEOUT_MS)
    page.wait_for_function(
        """() => {
            const visible = (e) => e.checkVisibility({checkOpacity: true, checkVisibilityCSS: true});
            const tables = [...document.querySelectorAll('[data-testid="stDataFrame"]')].filter(visible);
            const charts = [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')].filter(visible);
            const named = (t) => [...t.querySelectorAll('th[role="columnheader"]')].some((h) => h.textContent.trim());
            return tables.every(named)
                && charts.every((c) => c.querySelector('svg.marks, canvas.marks'));
        }""",
        timeout=TIMEOUT_MS,
    )


def _cut_off(page: Page) -> list[str]:
    """The texts of headline figures (label, value, delta and its description) wider than their box, which the
    page ends with an ellipsis; every figure the page shows is looked at (it fails without any)."""
    texts = page.locator('[data-testid="stMetric"] .stMarkdownEllipsis')
    expect(texts.first).to_be_attached(timeout=TIMEOUT_MS)
    cut: list[str] = texts.evaluate_all(
        "(texts) => texts.filter((e) => e.scrollWidth > e.clientWidth).map((e) => e.innerText)"
    )
    return cut


HEADERS = """() => [...document.querySelectorAll('[data-testid="stDataFrame"] th[role="columnheader"]')]
    .map((h) => h.textContent)"""


def _headers(page: Page, expected: set[str]) -> set[str]:
    """The column headers the page's tables show, once all of ``expected`` are among them (a rerun may draw a grid
    anew, which fills its headers again), else when the timeout is up (the caller's assertion then says what was
    shown)."""
    with contextlib.suppress(PlaywrightTimeoutError):
        page.wait_for_function(
            f"(expected) => expected.every((h) => ({HEADERS})().includes(h))",
            arg=sorted(expected),
            timeout=TIMEOUT_MS,
        )
    return set(page.evaluate(HEADERS))


def _screenshot(page: Page, path: Path) -> None:
    """The whole page (Streamlit scrolls inside its main area, so the window is made as tall as that area) as a
    PNG at ``path``; the window is set back to 1280 × 720 after."""
    height = page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
    page.set_viewport_size({"width": 1280, "height": min(max(height, 720), 8000)})
    try:
        page.wait_for_function(
            "() => document.querySelector('[data-testid=\"stMain\"]').scrollHeight <= window.innerHeight + 1",
            timeout=TIMEOUT_MS,
        )
        _drawn(page)
        page.screenshot(path=str(path))
    finally:
        page.set_viewport_size({"width": 1280, "height": 720})


@pytest.mark.parametrize(("path", "ready", "headers", "tooltip", "measure"), PAGES, ids=[_name(p[0]) for p in PAGES])
def test_page_reads_well_at_the_default_width(
    dashboard: str,
    browser_page: Page,
    tmp_path: Path,
    path: str,
    ready: str,
    headers: set[str],
    tooltip: str | None,
    measure: str | None,
) -> None:
    page = browser_page
    separator = "&" if "?" in path else "?"
    page.goto(f"{dashboard}/{path}{separator}period=7d")
    page.get_by_text(ready).first.wait_for(timeout=TIMEOUT_MS)
    _drawn(page)
    assert page.locator('[data-testid="stException"]').count() == 0
    assert page.viewport_size == {"width": 1280, "height": 720}

    if path not in WITHOUT_FIGURES:
        assert _cut_off(page) == [], "headline figures fit their columns"
    shown = _headers(page, headers)
    assert headers <= shown, f"human headers: {sorted(shown)}"
    assert not [h for h in shown if "_" in h], f"no raw field names among {sorted(shown)}"

    if tooltip is not None:
        metric = page.locator('[data-testid="stMetric"]').filter(
            has=page.locator('[data-testid="stMetricLabel"]').get_by_text(tooltip, exact=True)
        )
        value = metric.locator('[data-testid="stMetricValue"]').inner_text()
        assert re.fullmatch(r"-?\d{1,3}(\.\d{1,2})?[kMBT]? USD", value), f"{tooltip} is compact: {value!r}"
        metric.locator('[data-testid="stTooltipHoverTarget"]').hover()
        help_text = page.locator('[data-testid="stTooltipContent"]')
        expect(help_text).to_contain_text(THOUSANDS, timeout=TIMEOUT_MS)
        assert help_text.inner_text().startswith("Exact: ")
        page.mouse.move(0, 0)
        expect(help_text).to_be_hidden(timeout=TIMEOUT_MS)  # not in the screenshot

    if measure is not None:
        caption = page.locator('[data-testid="stCaptionContainer"]').filter(has_text=f"{measure}:")
        expect(caption).to_have_count(1)
        expect(caption).to_contain_text(POINTERS[measure])

    picture = tmp_path / f"{_name(path)}.png"
    _screenshot(page, picture)
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if path not in WITHOUT_FIGURES:
        assert _cut_off(page) == [], "nothing was cut off either once the window is tall"
