"""UTC time helpers. Python code only ever handles timezone-aware UTC ``datetime`` objects."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

HOUR = 3600


def utc_now() -> datetime:
    """The current instant, timezone-aware UTC."""
    return datetime.now(UTC)


def to_epoch(value: datetime) -> int:
    """Whole seconds since 1970-01-01T00:00Z (fraction dropped). Raises ValueError on a naive datetime."""
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value.isoformat()}: timestamps must be timezone-aware")
    return int(value.timestamp())


def from_epoch(seconds: int) -> datetime:
    """The UTC instant ``seconds`` after the epoch."""
    return datetime.fromtimestamp(seconds, UTC)


def floor_hour(epoch: int) -> int:
    """Start of the UTC hour holding ``epoch`` (seconds)."""
    return epoch - epoch % HOUR


def parse_utc(text: str) -> datetime:
    """ISO 8601 text to an aware UTC datetime; text without an offset is taken as UTC. ValueError when it is none,
    or when its offset moves it out of years 1–9999 (``9999-12-31T23:59:59-23:59``), or has a character that is not
    ASCII (full-width digits)."""
    if not text.isascii():
        raise ValueError(f"{text!r} is not an ISO 8601 time: only ASCII digits and signs")
    parsed = datetime.fromisoformat(text)
    try:
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except OverflowError as exc:
        raise ValueError(f"{text!r} is out of range in UTC (years 1–9999)") from exc


def month_start(at: datetime) -> datetime:
    """First instant (UTC) of the calendar month holding ``at``."""
    at = at.astimezone(UTC)
    return datetime(at.year, at.month, 1, tzinfo=UTC)


def next_month_start(at: datetime) -> datetime:
    """First instant (UTC) of the month after the one holding ``at``."""
    start = month_start(at)
    return datetime(start.year + start.month // 12, start.month % 12 + 1, 1, tzinfo=UTC)


def previous_month_start(at: datetime) -> datetime:
    """First instant (UTC) of the month before the one holding ``at``."""
    return month_start(month_start(at) - timedelta(seconds=1))


_DURATION = re.compile(r"(?:(\d{1,6})w)?(?:(\d{1,6})d)?(?:(\d{1,6})h)?(?:(\d{1,6})m)?(?:(\d{1,6})s)?", re.ASCII)


def parse_duration(text: str) -> timedelta:
    """A duration as Prometheus and Grafana spell one: numbers with units, largest unit first, each unit at most once
    (``90d``, ``2w``, ``12h``, ``1h30m``, ``45s``; units w, d, h, m, s; each number at most 6 digits), as a
    timedelta. ValueError (saying "is not a duration") otherwise."""
    found = _DURATION.fullmatch(text.strip())
    if found is None or not any(found.groups()):
        raise ValueError(f"{text!r} is not a duration (numbers with units w, d, h, m, s, largest first: 90d, 1h30m)")
    weeks, days, hours, minutes, seconds = (int(part or 0) for part in found.groups())
    return timedelta(weeks=weeks, days=days, hours=hours, minutes=minutes, seconds=seconds)


# re.ASCII: ``\d`` is 0-9 only; by default it also takes other scripts' digits (full-width ２０２６), as int() does.
_MONTH = re.compile(r"^\d{4}-\d{2}$", re.ASCII)
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$", re.ASCII)


def period_bound(text: str, *, end: bool) -> datetime:
    """One bound of a period [start, end) as an aware UTC datetime, from ISO 8601 ``text``.

    A calendar month (``2026-11``) or day (``2026-11-24``) names all of it: as a start, its first instant; as an
    end (``end=True``), the first instant after it, so ``--start 2026-11 --end 2026-11`` is November and
    ``--start 2026-11-01 --end 2026-11-07`` the first week, 7 days. Any other text is an instant (:func:`parse_utc`),
    exclusive as an end. ValueError for text that is none of these."""
    text = text.strip()
    if _MONTH.match(text):
        first = parse_utc(f"{text}-01")
        return next_month_start(first) if end else first
    day = parse_utc(text)
    try:
        return day + timedelta(days=1) if _DAY.match(text) and end else day
    except OverflowError as exc:  # the day after 9999-12-31
        raise ValueError(f"{text!r} is out of range in UTC (years 1–9999)") from exc
