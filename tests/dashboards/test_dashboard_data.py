"""The dashboard's cached queries (dashboards/data.py): every filter is part of the key of every cached result."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from dashboards import data
from finops.analysis.dashboard_queries import LedgerCube, MonthOverview
from finops.analysis.filters import Scope
from finops.db.engine import make_engine, upgrade

START = datetime(2026, 11, 1, tzinfo=UTC)
END = datetime(2026, 11, 8, tzinfo=UTC)
SCOPES = [
    Scope(),
    Scope(cluster="orion"),
    Scope(team="orion"),
    Scope(partition="orion"),
    Scope(cluster="orion", team="alpha"),
    Scope(team="alpha", partition="orion"),
    Scope(cluster="vega", team="alpha", partition="gpu"),
]


@pytest.fixture
def url(tmp_path: Path) -> str:
    database = f"sqlite:///{tmp_path / 'data.sqlite'}"
    upgrade(make_engine(database))
    return database


def test_each_scope_reads_the_ledger_once_and_only_for_itself(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[dict[str, Any]] = []

    def ledger_cube(session: Session, start: datetime, end: datetime, **filters: Any) -> LedgerCube:
        read.append(filters)
        return LedgerCube(start, end, [])

    monkeypatch.setattr(data, "ledger_cube", ledger_cube)
    for _ in range(2):
        for scope in SCOPES:
            assert data.report(url, START, END, "team", scope) == []
            assert data.daily(url, START, END, scope) == []
            data.spend_by_day(url, START, END, "USD", scope)
            data.breakdown(url, START, END, "job", scope)
    assert read == [{"cluster": s.cluster, "team": s.team, "partition": s.partition} for s in SCOPES]


def test_the_month_is_cached_per_scope(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[dict[str, Any]] = []

    def month_overview(session: Session, at: datetime, **filters: Any) -> MonthOverview:
        asked.append(filters)
        return MonthOverview(START, at, Decimal(0), Decimal(0), "", [])

    monkeypatch.setattr(data, "month_overview", month_overview)
    for _ in range(2):
        for scope in SCOPES:
            data.month(url, END, scope)
    assert asked == [{"cluster": s.cluster, "team": s.team, "partition": s.partition} for s in SCOPES]
