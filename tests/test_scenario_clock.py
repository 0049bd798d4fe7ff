"""The scenario slice's start T (tests/support/scenario.py) at any instant: hour-aligned UTC, three hours before the
current hour, and the slice with its end [T, T+2h] in one calendar month, also in a month's first hours."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from finops.timeutil import month_start
from tests.support import scenario


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (datetime(2026, 12, 1, 0, 0, 30, tzinfo=UTC), datetime(2026, 11, 30, 21, tzinfo=UTC)),
        (datetime(2026, 12, 1, 1, 30, tzinfo=UTC), datetime(2026, 11, 30, 21, tzinfo=UTC)),
        (datetime(2026, 12, 1, 2, 59, 59, tzinfo=UTC), datetime(2026, 11, 30, 21, tzinfo=UTC)),
        (datetime(2026, 12, 1, 3, 0, tzinfo=UTC), datetime(2026, 12, 1, 0, tzinfo=UTC)),
        (datetime(2027, 1, 1, 0, 0, 30, tzinfo=UTC), datetime(2026, 12, 31, 21, tzinfo=UTC)),
        (datetime(2026, 11, 30, 23, 59, 59, tzinfo=UTC), datetime(2026, 11, 30, 20, tzinfo=UTC)),
        (datetime(2026, 11, 17, 14, 25, tzinfo=UTC), datetime(2026, 11, 17, 11, tzinfo=UTC)),
        (datetime(2026, 12, 1, 1, 30, tzinfo=timezone(timedelta(hours=-5))), datetime(2026, 12, 1, 3, tzinfo=UTC)),
    ],
)
def test_the_slice_lies_in_one_month_hour_aligned_in_utc(now: datetime, expected: datetime) -> None:
    t0 = scenario.start_hour(now)
    end = scenario.slice_end(t0)
    assert t0 == expected
    assert t0.utcoffset() == timedelta(0) and (t0.minute, t0.second, t0.microsecond) == (0, 0, 0)
    assert month_start(t0) == month_start(end), "the slice and its end in one month"
    assert end <= now - timedelta(minutes=now.minute, seconds=now.second), "closed hours only, before the current one"
