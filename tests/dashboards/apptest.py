"""Running one dashboard page in Streamlit's AppTest, as every page test does."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

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
