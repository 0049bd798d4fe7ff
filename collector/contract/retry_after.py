"""HTTP ``Retry-After`` (RFC 9110 §10.2.3): delay-seconds or an HTTP-date, read the same by every sender
(the collector's shipper, the alerts' Slack and webhook delivery)."""

from __future__ import annotations

import email.utils
from datetime import UTC, datetime


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delay-seconds or HTTP-date); None if absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
