"""What ingest accepts of a node's batch beyond its format: the time window a reading must fall in.

A reading stamped too far in the future, or older than the raw-sample retention, is refused one by one (the rest of
the batch is stored): a clock gone wrong on a node, or a forged ``ts=0``, would otherwise move a GPU's
``in_service_from`` (its capacity cost) back to 1970 and write samples the retention job drops at once, or pin
hours far ahead as dirty.
"""

from __future__ import annotations

from dataclasses import dataclass

from finops.ingest.partitions import DAY, floor_day

FUTURE_GRACE_SECONDS = 600
"""How far ahead of the service's clock a reading may be stamped: 10 minutes, Grafana Mimir's default
``-validation.create-grace-period`` ("Controls how far into the future incoming samples and exemplars are
accepted compared to the wall clock", default ``10m``; Mimir's configuration reference), for the same reason:
collectors' clocks drift a little, never by hours."""
DEFAULT_RETENTION_DAYS = 35
"""``FINOPS_SAMPLE_RETENTION_DAYS``' default (:class:`finops.settings.StorageSettings`)."""


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """Readings at epoch seconds in [``earliest``, ``latest``] are accepted; others are refused with :meth:`reason`.

    ``earliest`` is the retention cutoff (:func:`finops.ingest.partitions.retention_cutoff` without its allowance
    for hours awaiting a ledger rebuild): the UTC midnight ``retention_days`` whole days before today's, before which
    the retention job drops samples; ``latest`` is now plus :data:`FUTURE_GRACE_SECONDS`.
    """

    earliest: int
    latest: int
    grace_seconds: int = FUTURE_GRACE_SECONDS

    @classmethod
    def at(cls, now: float, retention_days: int, grace_seconds: int = FUTURE_GRACE_SECONDS) -> TimeWindow:
        """The window at ``now`` (epoch seconds)."""
        return cls(floor_day(int(now)) - retention_days * DAY, int(now) + grace_seconds, grace_seconds)

    def holds(self, ts: int) -> bool:
        return self.earliest <= ts <= self.latest

    def reason(self, ts: int) -> str:
        """Why ``ts`` (outside the window) is refused."""
        if ts < self.earliest:
            return (
                f"ts {ts} is older than the sample retention (readings from {self.earliest} on are kept; "
                "FINOPS_SAMPLE_RETENTION_DAYS)"
            )
        return (
            f"ts {ts} is more than {self.grace_seconds} s in the future "
            f"(latest accepted now: {self.latest}); check the node's clock"
        )


@dataclass(frozen=True, slots=True)
class IngestLimits:
    """What ingest accepts of a node beyond the wire format (``serve`` builds it from the settings).

    ``retention_days``: readings older than the retention are refused (``FINOPS_SAMPLE_RETENTION_DAYS``);
    ``future_grace_seconds``: how far ahead of the service's clock a reading may be stamped.
    """

    retention_days: int = DEFAULT_RETENTION_DAYS
    future_grace_seconds: int = FUTURE_GRACE_SECONDS
