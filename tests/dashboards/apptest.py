"""Running one dashboard page in Streamlit's AppTest, as every page test does, on a database of the test's own."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dashboards import filters
from finops import timeutil
from finops.db.engine import make_engine, upgrade

APP = str(Path(__file__).resolve().parents[2] / "dashboards" / "app.py")
"""The dashboard's entry point (the ``st.navigation`` router)."""


def run_page(page: str, timeout: float = 60, **params: str) -> AppTest:
    """The dashboard run once on ``page`` (a path under ``dashboards/``, e.g. ``views/overview.py``) with the query
    ``params``, within ``timeout`` seconds; fails the test when the page raised."""
    app = AppTest.from_file(APP, default_timeout=timeout)
    for name, value in params.items():
        app.query_params[name] = value
    app.switch_page(page)
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    return app


def page_database(path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A migrated SQLite database at ``path`` made the pages' ``FINOPS_DATABASE_URL`` (no Prometheus); its URL."""
    url = f"sqlite:///{path}"
    monkeypatch.setenv("FINOPS_DATABASE_URL", url)
    monkeypatch.delenv("FINOPS_PROMETHEUS_URL", raising=False)
    upgrade(make_engine(url))
    return url


def stop_clock(monkeypatch: pytest.MonkeyPatch, at: datetime) -> datetime:
    """The pages' clock stopped at ``at``, so that "now" is the same for the page and the test; returns ``at``."""
    monkeypatch.setattr(timeutil, "utc_now", lambda: at)
    monkeypatch.setattr(filters, "utc_now", lambda: at)
    return at
