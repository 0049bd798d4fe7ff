"""Idle runs as the statements of :mod:`finops.analysis.idle_runs` find them, a chunk at a time (:class:`RunPiece`),
and joined across chunks, days and carried reads into whole runs (:class:`IdleRun`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class IdleRun:
    """An idle run of one GPU: [``first_ts``, ``covered_until``) epoch seconds, its last reading at ``last_ts``; the
    most memory in use (``max_mem``, bytes; 0 without a value), how many readings, and of them with a thermal, a power,
    either clocks-event reason, and the sum (Hz) and count of the SM clocks of those with either."""

    gpu_id: int
    first_ts: int
    last_ts: int
    covered_until: int
    max_mem: float
    readings: int
    thermal_readings: int
    power_readings: int
    throttled_readings: int
    sm_sum: float
    sm_n: int


@dataclass(slots=True)
class RunPiece:
    """A run as one day's statement found it: its first and last reading, the next reading of the GPU after the
    last (``next_ts``; None: none at all) and whether the statement read that one (``next_seen``: else it may be
    the first of a run of a later day), and the sums."""

    gpu_id: int
    first_ts: int
    last_ts: int
    next_ts: int | None
    next_seen: bool
    max_mem: float
    readings: int
    thermal: int
    power: int
    throttled: int
    sm_sum: float
    sm_n: int

    def join(self, later: RunPiece) -> None:
        """Take in ``later``, the run that goes on from this one in a later day."""
        self.last_ts, self.next_ts, self.next_seen = later.last_ts, later.next_ts, later.next_seen
        self.max_mem = max(self.max_mem, later.max_mem)
        self.readings += later.readings
        self.thermal += later.thermal
        self.power += later.power
        self.throttled += later.throttled
        self.sm_sum += later.sm_sum
        self.sm_n += later.sm_n

    def as_row(self) -> list[Any]:
        """The piece's fields in their order, as :class:`RunPiece` takes them back (``RunPiece(*row)``)."""
        return [self.gpu_id, self.first_ts, self.last_ts, self.next_ts, self.next_seen, self.max_mem, self.readings,
                self.thermal, self.power, self.throttled, self.sm_sum, self.sm_n]  # fmt: skip

    def covered_until(self, max_gap: int) -> int:
        """Until when the run's last reading stands: the next reading, at most the max gap after it; the reading
        itself when no reading follows."""
        if self.next_ts is None:
            return self.last_ts
        return min(self.next_ts, self.last_ts + max_gap)


def joined_pieces(pieces: Iterable[RunPiece], max_gap: int) -> list[RunPiece]:
    """``pieces`` of consecutive chunks joined where one goes on in the next (its next reading, within the max gap, is
    the first of the other), sorted by GPU and start: each a whole run of those chunks, or one that may go on in a
    later chunk. The pieces are changed (joined into)."""
    starting = {(piece.gpu_id, piece.first_ts): piece for piece in pieces}
    heads = []
    joined: set[tuple[int, int]] = set()
    for key in sorted(starting):
        if key in joined:
            continue
        piece = starting[key]
        while not piece.next_seen and piece.next_ts is not None and piece.next_ts - piece.last_ts <= max_gap:
            later = starting.get((piece.gpu_id, piece.next_ts))
            if later is None:  # a busy reading, or one past the period
                break
            joined.add((piece.gpu_id, piece.next_ts))
            piece.join(later)
        heads.append(piece)
    return heads


def joined_runs(pieces: Iterable[RunPiece], max_gap: int, window: int) -> list[IdleRun]:
    """The runs that ``pieces`` of consecutive chunks make (:func:`joined_pieces`) that last at least ``window``
    seconds; sorted by GPU and start. The pieces are changed (joined into)."""
    return [
        IdleRun(
            piece.gpu_id, piece.first_ts, piece.last_ts, covered, piece.max_mem, piece.readings, piece.thermal,
            piece.power, piece.throttled, piece.sm_sum, piece.sm_n,
        )
        for piece in joined_pieces(pieces, max_gap)
        if (covered := piece.covered_until(max_gap)) - piece.first_ts >= window
    ]  # fmt: skip
