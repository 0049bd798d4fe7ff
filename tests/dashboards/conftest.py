"""Fixtures of the dashboard pages' tests: Streamlit's caches emptied around each test, an empty migrated SQLite
database the pages read, and the pages' clock stopped."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
import streamlit as st

from finops.timeutil import utc_now
from tests.dashboards.apptest import page_database, stop_clock


@pytest.fixture(autouse=True)
def _empty_caches() -> Iterator[None]:
    st.cache_data.clear()
    st.cache_resource.clear()
    yield
    st.cache_data.clear()
    st.cache_resource.clear()


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A migrated SQLite database in ``tmp_path``, the pages' ``FINOPS_DATABASE_URL`` (no Prometheus); its URL."""
    return page_database(tmp_path / "dash.sqlite", monkeypatch)


@pytest.fixture
def now(monkeypatch: pytest.MonkeyPatch) -> datetime:
    """The pages' clock stopped at the current instant, so that "now" is the same for the page and the test."""
    return stop_clock(monkeypatch, utc_now())
