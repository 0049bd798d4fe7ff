"""The bookings of GPUs over time, in memory: which shares of a GPU jobs hold over [start, end), and whether more
fits. Instants are epoch seconds (int); an open end is :data:`OPEN_END`."""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction

from finops.db.models import Gpu

OPEN_END = 2**62
"""End of an allocation that is still open (a running job), in epoch seconds."""

WHOLE = Fraction(1)


@dataclass(frozen=True, slots=True)
class Unit:
    """One device a job holds on a node: a whole GPU (``share`` 1, no profile) or a MIG instance
    (``share`` = its compute slices over the GPU's, ``mig_profile`` such as ``1g.10gb``)."""

    share: Fraction = WHOLE
    mig_profile: str | None = None


@dataclass(slots=True)
class Booking:
    """A job holding ``share`` of one GPU over [start, end). ``allocation_id`` None: not written yet."""

    start: int
    end: int
    share: Fraction
    job_pk: int
    keys: frozenset[str]
    mig_profile: str | None = None
    allocation_id: int | None = None


class GpuCalendar:
    """The bookings of one GPU, sorted by start, with the furthest end reached so far at each position, so
    the bookings overlapping an interval are found scanning back from it and stopping early."""

    def __init__(self, gpu: Gpu) -> None:
        self.gpu = gpu
        self.bookings: list[Booking] = []
        self._starts: list[int] = []
        self._reach: list[int] = []  # _reach[i] = max end of bookings[0..i]

    def overlapping(self, start: int, end: int) -> Iterator[Booking]:
        """Bookings that overlap [start, end), latest start first."""
        i = bisect.bisect_left(self._starts, end) - 1
        while i >= 0 and self._reach[i] > start:
            if self.bookings[i].end > start:
                yield self.bookings[i]
            i -= 1

    def held(self, start: int, end: int) -> Fraction:
        """The largest share booked at any instant of [start, end)."""
        events: list[tuple[int, Fraction]] = []
        for booking in self.overlapping(start, end):
            events.append((max(booking.start, start), booking.share))
            events.append((min(booking.end, end), -booking.share))
        events.sort(key=lambda event: (event[0], event[1] > 0))  # at one instant, ends before starts
        peak = current = Fraction(0)
        for _, change in events:
            current += change
            peak = max(peak, current)
        return peak

    def fits(self, start: int, end: int, share: Fraction) -> bool:
        """Whether ``share`` more of the GPU is free over the whole of [start, end)."""
        if share >= WHOLE:
            return next(self.overlapping(start, end), None) is None
        return self.held(start, end) + share <= WHOLE

    def book(self, booking: Booking) -> None:
        """Add a booking (no check: see :meth:`fits`)."""
        i = bisect.bisect_right(self._starts, booking.start)
        self._starts.insert(i, booking.start)
        self.bookings.insert(i, booking)
        self._reach.insert(i, max(booking.end, self._reach[i - 1] if i else booking.end))
        for j in range(i + 1, len(self._reach)):
            if self._reach[j] >= booking.end:
                break
            self._reach[j] = booking.end

    def remove(self, booking: Booking) -> None:
        """Drop a booking and recompute the reach after it."""
        i = next(k for k, b in enumerate(self.bookings) if b is booking)
        del self.bookings[i], self._starts[i], self._reach[i]
        reach = self._reach[i - 1] if i else 0
        for j in range(i, len(self._reach)):
            reach = max(reach, self.bookings[j].end)
            self._reach[j] = reach
