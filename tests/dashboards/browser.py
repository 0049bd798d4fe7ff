"""The dashboard served as `gpu-finops dashboard` serves it, and Debian's headless Chromium to read it, for the
browser tests of this folder."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping

import httpx
from playwright.sync_api import Page, sync_playwright

from tests.support.environment import debian_binary
from tests.support.servers import free_port

START_SECONDS = 60


@contextlib.contextmanager
def served_dashboard(
    database_url: str, settings: Mapping[str, str] | None = None, port: int | None = None
) -> Iterator[str]:
    """`gpu-finops dashboard` on ``port`` (default a free one) of 127.0.0.1 over ``database_url`` (without a
    Prometheus, with the ``FINOPS_*`` ``settings`` given); yields its base URL once Streamlit answers its health
    check (within :data:`START_SECONDS`), and stops it after."""
    port = port or free_port()
    environment = {k: v for k, v in os.environ.items() if k != "FINOPS_PROMETHEUS_URL"}
    process = subprocess.Popen(
        [sys.executable, "-m", "finops.cli", "dashboard", "--port", str(port)],
        env={**environment, **(settings or {}), "FINOPS_DATABASE_URL": database_url},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_SECONDS
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


@contextlib.contextmanager
def chromium_page() -> Iterator[Page]:
    """A tab of Debian's headless Chromium at Playwright's default window (1280 × 720), downloads accepted."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(debian_binary("chromium")), args=["--no-sandbox"])
        try:
            yield browser.new_page(accept_downloads=True)
        finally:
            browser.close()
