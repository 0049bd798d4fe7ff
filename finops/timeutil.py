"""UTC time helpers. Python code only ever handles timezone-aware UTC ``datetime`` objects."""

from __future__ import annotations

from datetime import UTC, datetime

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
    """ISO 8601 text to an aware UTC datetime; text without an offset is taken as UTC."""
    parsed = datetime.fromisoformat(text)
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
