"""The dashboard's display rules: compact headline figures and exact values (dashboards/format.py), the table columns'
headers and formats, the colours of used, unused and unallocated cost in the charts' specs (dashboards/charts.py),
and the captions that tell the two idle measures apart (dashboards/measures.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pandas as pd
import pytest

from dashboards import charts
from dashboards.format import COLUMNS, Column, compact, exact, headers, money
from dashboards.measures import EPISODE_COST, UNUSED_COST, episode_cost_caption, unused_cost_caption
from finops.analysis.dashboard_queries import DailyCost
from finops.db.models import UNALLOCATED_TEAM
from finops.settings.analysis import IdleSettings


@pytest.mark.parametrize(
    ("value", "places", "shown"),
    [
        (Decimal(0), 2, "0.00"),
        (0, 0, "0"),
        (Decimal("-0.001"), 2, "0.00"),  # no negative zero
        (Decimal("12.345"), 2, "12.34"),  # half-even
        (Decimal("-12.355"), 2, "-12.36"),
        (Decimal("999.985"), 2, "999.98"),
        (Decimal("999.99"), 2, "999.99"),
        (Decimal("999.994999"), 2, "999.99"),
        (Decimal("999.995"), 2, "1.00k"),  # 1,000.00 once rounded to cents: no "1000.00"
        (999.5, 0, "1.00k"),
        (1000, 2, "1.00k"),
        (Decimal("1000"), 0, "1.00k"),
        (Decimal("1234.5"), 2, "1.23k"),
        (9995, 2, "10.0k"),  # three significant digits, also when rounding adds a digit
        (71_234.5, 1, "71.2k"),
        (Decimal("99950"), 2, "100k"),
        (999_499, 2, "999k"),
        (999_500, 2, "1.00M"),  # not "1000k"
        (Decimal("999999.99"), 2, "1.00M"),
        (1e6, 2, "1.00M"),
        (Decimal("1030145.62"), 2, "1.03M"),
        (Decimal("-1030145.62"), 2, "-1.03M"),
        (Decimal("-1748125.47"), 2, "-1.75M"),
        (Decimal("2.5e9"), 2, "2.50B"),
        (Decimal("1e15"), 2, "1,000T"),  # past the last suffix: more digits, never an unknown suffix
    ],
)
def test_compact_figures(value: Decimal | float | int, places: int, shown: str) -> None:
    assert compact(value, places) == shown


@pytest.mark.parametrize(
    ("value", "places", "shown"),
    [
        (Decimal("1030145.625"), 2, "1,030,145.62"),
        (Decimal("1030145.635"), 2, "1,030,145.64"),
        (Decimal("-1748125.47"), 2, "-1,748,125.47"),
        (1234.5, 0, "1,234"),
        (0.1, 2, "0.10"),
        (Decimal("-0.004"), 2, "0.00"),
        (7, 0, "7"),
    ],
)
def test_exact_values_have_thousands_separators(value: Decimal | float | int, places: int, shown: str) -> None:
    assert exact(value, places) == shown


def test_money_is_the_exact_value_and_its_currency() -> None:
    assert money(Decimal("1234.565"), "USD") == "1,234.56 USD"
    assert money(Decimal("1030145.62"), "EUR") == "1,030,145.62 EUR"


def _config(name: str, currency: str | None = "USD") -> dict[str, Any]:
    config: dict[str, Any] = COLUMNS[name].config(currency)
    return config


def test_columns_have_human_headers_with_units_and_number_formats() -> None:
    assert _config("allocated_cost")["label"] == "Allocated cost (USD)"
    assert _config("allocated_cost", "EUR")["label"] == "Allocated cost (EUR)", "the currency is the table's"
    assert _config("allocated_gpu_hours")["label"] == "Allocated GPU-hours"
    for name in ("allocated_cost", "idle_cost", "budget", "episode_cost"):
        money_column = _config(name)
        assert money_column["type_config"]["format"] == "%,.2f" and money_column["alignment"] == "right"
    assert _config("per_gpu_hour")["type_config"]["format"] == "%,.4f", "a price per GPU-hour keeps its digits"
    assert _config("readings")["type_config"]["format"] == "%,d"
    assert _config("used_percent")["type_config"]["format"] == "%,.1f%%"
    assert _config("utilization")["type_config"] == {
        "type": "progress",
        "format": "percent",
        "min_value": 0.0,
        "max_value": 1.0,
        "step": None,
        "color": charts.COST_COLOURS["Used"],
    }
    for name, column in COLUMNS.items():
        label = column.header("USD")
        assert "_" not in label and label[:1] == label[:1].upper(), f"{name}: {label!r} is not a human header"
        if column.kind in ("money", "number", "count", "percent"):
            assert "," in _config(name)["type_config"]["format"], f"{name} has no thousands separator"


def test_headers_name_every_column_or_refuse() -> None:
    frame = pd.DataFrame(columns=["team", "allocated_cost", "gpu_idle (%)"])
    own = {"gpu_idle (%)": Column("GPU idle (% of readings)", "percent")}
    assert headers(frame, "USD", own) == {
        "team": "Team",
        "allocated_cost": "Allocated cost (USD)",
        "gpu_idle (%)": "GPU idle (% of readings)",
    }
    with pytest.raises(KeyError, match="gpu_idle"):
        headers(frame, "USD")
    with pytest.raises(ValueError, match="currency"):
        headers(frame, None, own)


def _colours(spec: dict[str, Any]) -> dict[str, str]:
    scale = spec["encoding"]["color"]["scale"]
    return dict(zip(scale["domain"], scale["range"], strict=True))


def test_used_unused_and_unallocated_have_their_colours_in_the_charts() -> None:
    report = pd.DataFrame(
        [
            {"team": "alpha", "allocated_cost": "10.00", "used_cost": "7.50", "idle_cost": "2.50"},
            {"team": UNALLOCATED_TEAM, "allocated_cost": "5.00", "used_cost": "0.00", "idle_cost": "0.00"},
        ]
    )
    spec = charts.team_cost_spec(report, "USD")
    assert _colours(spec) == {"Used": "#009E73", "Unused": "#E69F00", "Unallocated": "#A0A0A0"}
    assert spec["encoding"]["order"]["field"] == "order", "stacked used, then unused, then unallocated"
    start = datetime(2026, 11, 1, tzinfo=UTC)
    days = [
        DailyCost(start, team, Decimal(1), Decimal(0), Decimal(1), "USD")
        for team in ("beta", UNALLOCATED_TEAM, "alpha", *(f"team-{i}" for i in range(12)))
    ]
    teams = _colours(charts.daily_spend_spec(days, "USD", start, start + timedelta(days=1)))
    assert teams[UNALLOCATED_TEAM] == charts.COST_COLOURS["Unallocated"], "capacity no job held is grey there too"
    assert "#A0A0A0" not in [colour for team, colour in teams.items() if team != UNALLOCATED_TEAM]
    assert teams["alpha"] == charts.TEAM_COLOURS[0] and teams["beta"] == charts.TEAM_COLOURS[1]


def test_the_two_idle_measures_are_named_apart_and_point_to_each_other() -> None:
    policy = IdleSettings(
        idle_threshold_ratio=0.05,
        idle_window_seconds=1800,
        idle_max_gap_seconds=150,
        idle_grace_seconds=600,
        idle_partition_thresholds={"interactive": 0.01},
    )
    unused = unused_cost_caption(policy)
    assert unused.startswith(f"**{UNUSED_COST}**: ") and "(1 − the hour's mean utilisation)" in unused
    assert f"**{EPISODE_COST.lower()}**" in unused and "at or below 5 % utilisation for at least 30 minutes" in unused
    episodes = episode_cost_caption(policy)
    assert episodes.startswith(f"**{EPISODE_COST}**: ") and f"**{UNUSED_COST.lower()}**" in episodes
    assert "at or below 5 % utilisation for at least 30 minutes" in episodes
    assert "at most 150 seconds apart" in episodes and "first 10 minutes of a job" in episodes
    assert "partition thresholds: interactive 1 %" in episodes
    assert "partition" not in episode_cost_caption(IdleSettings(idle_threshold_ratio=0.1)), "none configured"
    assert "at or below 10 % utilisation" in episode_cost_caption(IdleSettings(idle_threshold_ratio=0.1))
