"""The showback e-mail's HTML as a mail client shows it: the statement of :mod:`tests.support.showback_scenario` is
rendered by the e-mail path (:func:`alerts.showback.statement_email`), loaded in Debian's headless Chromium (through
Playwright) at a desktop reading pane's width and a phone's, screenshotted under the test's tmp_path, and judged from
its DOM's computed styles and from the screenshot's pixels."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image
from playwright.sync_api import Browser, Page, sync_playwright

from alerts.showback import statement_email
from finops.db.engine import make_engine, session_factory, upgrade
from finops.savings.showback import build_statement
from tests.support import showback_scenario as scenario
from tests.support.environment import debian_binary

DASHBOARD = "https://finops.example.org/dash"
JOBS = "table:has(th:text-is('Job')):has(th:text-is('Idle')):not(:has(table))"
"""The top jobs table: the innermost table with the column headers ``Job`` and ``Idle``."""


@pytest.fixture
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(debian_binary("chromium")), args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def email_html(tmp_path: Path) -> str:
    """The HTML part of team vision's October e-mail, from the scenario on an SQLite file of the test's own."""
    engine = make_engine(f"sqlite:///{tmp_path / 'showback.sqlite'}")
    upgrade(engine)
    sessions = session_factory(engine)
    scenario.seed(sessions)
    with sessions() as session:
        statement = build_statement(session, "vision", scenario.MONTH, scenario.NOW)
    engine.dispose()
    document = statement_email(statement, DASHBOARD).document
    assert document is not None
    return document.html


def _shot(browser: Browser, html: str, width: int, path: Path) -> Page:
    page = browser.new_page(viewport={"width": width, "height": 700})
    page.set_content(html)
    page.screenshot(path=str(path), full_page=True)
    return page


def _dark_share(picture: Image.Image, box: dict[str, float]) -> float:
    """The share of the pixels inside ``box`` (CSS pixels, device scale 1) darker than mid-grey: text and rules."""
    crop = picture.convert("L").crop((int(box["x"]), int(box["y"]), int(box["x"] + box["width"]),
                                      int(box["y"] + box["height"])))  # fmt: skip
    histogram = crop.histogram()
    return sum(histogram[:128]) / max(sum(histogram), 1)


def test_the_statement_email_renders_as_tables_in_chromium(browser: Browser, email_html: str, tmp_path: Path) -> None:
    want = scenario.expected()
    desktop = tmp_path / "showback-desktop.png"
    page = _shot(browser, email_html, 760, desktop)

    # Nothing a mail client strips or blocks is relied upon.
    assert page.locator("style, link, script, img, [class]").count() == 0
    texts = (
        "[...document.body.querySelectorAll('*')]"
        ".filter(e => [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim()))"
    )
    assert page.evaluate(f"{texts}.every(e => e.hasAttribute('style'))"), "every element with text styles itself inline"
    families = page.evaluate(f"{texts}.map(e => getComputedStyle(e).fontFamily)")
    assert families and all(f.endswith("sans-serif") for f in families)

    # The top jobs table: header, three jobs, a bold total; amounts right-aligned in tabular figures.
    jobs = page.locator(JOBS)
    assert jobs.count() == 1
    rows = jobs.locator("tr")
    assert rows.count() == 1 + len(want.jobs) + 1
    assert rows.nth(0).locator("th").all_inner_texts() == ["Job", "Name", "User", "GPU-hours", "Cost", "Idle"]
    first = rows.nth(1).locator("td")
    assert first.all_inner_texts()[:3] == ["7002", "job-7002", "lars"]
    assert first.nth(4).inner_text() == f"{want.jobs[0][2]:,.2f}"
    assert first.nth(4).evaluate("c => [getComputedStyle(c).textAlign, getComputedStyle(c).fontVariantNumeric]") == [
        "right", "tabular-nums",
    ]  # fmt: skip
    assert first.nth(0).evaluate("c => getComputedStyle(c).textAlign") == "left"
    total = rows.nth(len(want.jobs) + 1).locator("td")
    assert total.nth(0).inner_text() == "Total" and total.nth(4).inner_text() == f"{want.spend:,.2f}"
    assert int(total.nth(4).evaluate("c => getComputedStyle(c).fontWeight")) >= 600
    colours = [rows.nth(i).evaluate("r => getComputedStyle(r.cells[0]).backgroundColor + getComputedStyle(r)"
                                    ".backgroundColor") for i in range(3)]  # fmt: skip
    assert len(set(colours)) == 3, "a shaded header row above zebra rows"
    assert page.get_by_text("#SBATCH --gres=gpu:1").is_visible()
    assert page.get_by_text("unexplained", exact=True).is_visible()
    assert page.get_by_text("idle share of busy jobs", exact=True).is_visible()

    # The screenshot: the whole page, a white card on grey with text in it, the jobs table drawn where the DOM says.
    height = page.evaluate("document.documentElement.scrollHeight")
    box = jobs.bounding_box()
    assert box is not None and box["width"] > 500 and box["height"] > 4 * 25
    with Image.open(desktop) as picture:
        assert picture.size == (760, height) and height > 1200
        assert len(picture.convert("RGB").getcolors(maxcolors=1 << 16) or range(1 << 16)) > 50, "antialiased text"
        assert picture.convert("RGB").getpixel((5, 5)) == (243, 244, 246), "the grey background"
        assert 0.03 < _dark_share(picture, box) < 0.5, "the table's text and rules, on white"
    page.close()

    # On a phone 360 CSS pixels wide the card and its tables shrink to the screen: nothing to scroll sideways.
    phone = tmp_path / "showback-phone.png"
    page = _shot(browser, email_html, 360, phone)
    assert page.evaluate("document.documentElement.scrollWidth") <= 360
    box = page.locator(JOBS).bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 360
    with Image.open(phone) as picture:
        assert picture.size[0] == 360 and _dark_share(picture, box) > 0.03
    page.close()
