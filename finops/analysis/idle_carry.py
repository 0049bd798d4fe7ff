"""Idle runs carried from one scheduled re-judging to the next, so that the 5-minute cycle reads each GPU's readings
since the cycle before, not its whole period again.

The scheduler re-judges the hours each rollup rebuilt (:func:`finops.analysis.idle.rejudge_idle`): in the steady state
the current hour widened by the idle window and the max gap, at every 5-minute cycle the same period, read whole each
time (by key per GPU late in a UTC day). A run is made of readings alone (:mod:`finops.analysis.idle_runs`); the
episodes are the runs clipped to the allocations and judged for a reason afresh at every re-judging, so only the
reading of readings is carried.

What is carried, per read [lo, hi) of a re-judging (its period, or the GPUs read over their own spans:
:func:`finops.analysis.idle_spans.wide_reads`): the instant ``through`` it read up to, the GPUs it read
(``covered``), and per idle threshold the pieces of runs that their readings in [lo, through) make
(:class:`finops.analysis.idle_pieces.RunPiece`). The next re-judging of the same read takes those pieces for the GPUs
whose readings before ``through`` were settled, reads [lo, through) of the others and [through, hi) of all, and
joins the pieces as one read's (:func:`finops.analysis.idle_pieces.joined_runs`): the runs a read of the whole period
finds. A carried piece whose next reading was not read with it has that reading looked up again: it may lie after
``through``, where readings still arrive.

Settled: a GPU's readings before its metering cursor (:mod:`finops.ledger.metering_state`). A reading stored later
before the cursor is a late one, and the next rollup moves that GPU's cursor back to the start of the reading's hour;
so the readings of a GPU before ``through`` are those read when the cursor the next rollup finds
(:attr:`Settled.cursors`) is at or past it, and no arrival record left unsettled (on PostgreSQL, of a transaction
committed while that rollup ran: :func:`finops.ledger.metering_state.unsettled_arrivals`) has an earlier reading:
its carried pieces are taken. A reading committed after that check and before the re-judging's reads, earlier than
``through``, is not read by this cycle, as one committed after a whole read's statement is not; the next cycle reads
that GPU whole. Expiring readings (:func:`finops.ingest.partitions.prune_samples`) drop every carry. ``through`` is
the rollup's ``until`` less :data:`SETTLE_SECONDS`; a GPU whose last reading is older (a collector down, a slow
cadence) is read whole, as before. A carry is taken only by a re-judging whose rollup found the ledger's watermark at
the ``until`` of the rollup the carry followed (:attr:`Settled.previous`): a rollup in between that re-judged nothing
(the demo's) may have moved cursors back and forward again. The idle policy's thresholds, max gap and window must be
the same.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import Connection, delete, insert, select
from sqlalchemy.orm import Session

from finops.analysis.idle_pieces import IdleRun, RunPiece, joined_pieces, joined_runs
from finops.analysis.idle_runs import day_chunks, look_up_next, run_pieces
from finops.db.models import Gpu, IdleRunCarry
from finops.ledger.metering_state import unsettled_arrivals

SETTLE_SECONDS = 120
"""How far before the rollup's ``until`` a carry reads up to: a GPU whose metering cursor (the instant after its last
reading metered) is this close to ``until`` has its pieces taken by the next re-judging, as GPUs read every 10 to 60
seconds have."""


@dataclass(frozen=True, slots=True)
class Settled:
    """What the scheduler's rollup tells the idle re-judging after it: its ``until`` (epoch seconds), the ledger's
    watermark it found (``previous``, epoch seconds; None: none), and each GPU's metering cursor as it found it
    after late readings moved it back (``cursors``: GPU id -> epoch seconds; :attr:`finops.ledger.metering_state.
    Arrivals.cursors`; of two rollups in one transaction, the earlier of each)."""

    until: int
    previous: int | None
    cursors: Mapping[int, int]


@dataclass(slots=True)
class _Carried:
    """One read's carry (module docstring): the read started at ``lo``."""

    lo: int
    through: int
    covered: set[int]
    pieces: dict[float, list[RunPiece]]


class RunCarry:
    """The carries of the re-judging that follows one scheduled rollup: those the last one left (:meth:`runs` takes
    them), and those it leaves (:meth:`store`).

    ``policy``: what a run is (thresholds, max gap, window), as JSON values; a carry of another policy is not taken.
    """

    def __init__(self, session: Session, settled: Settled, policy: Sequence[Any]) -> None:
        self._policy = orjson.loads(orjson.dumps(policy))
        self._settled = settled
        self._through = settled.until - SETTLE_SECONDS
        self._every: set[int] | None = None
        self._taken: dict[tuple[int, int], _Carried] = {}
        self._left: dict[tuple[int, int], _Carried] = {}
        carries = session.execute(select(IdleRunCarry.lo, IdleRunCarry.hi, IdleRunCarry.document)).all()
        arrived = unsettled_arrivals(session) if carries else {}
        for lo, hi, document in carries:
            carried = orjson.loads(document)
            if carried["policy"] != self._policy or carried["until"] != settled.previous:
                continue
            through = int(carried["through"])
            covered = {
                g
                for g in carried["covered"]
                if settled.cursors.get(g, through - 1) >= through and arrived.get(g, through) >= through
            }
            pieces = {float(t): [RunPiece(*fields) for fields in found] for t, found in carried["pieces"]}
            self._taken[lo, hi] = _Carried(lo, through, covered, pieces)

    def runs(
        self,
        connection: Connection,
        read: tuple[int, int, Sequence[int] | None],
        thresholds: Sequence[float],
        max_gap: int,
        window: int,
        *,
        exclude: Collection[int] = (),
        helpers: int = 0,
    ) -> dict[float, list[IdleRun]]:
        """Per threshold, the idle runs of ``read`` (lo, hi epoch seconds, and the GPU ids read, None: every GPU)
        in ``gpu_samples``, as :func:`finops.analysis.idle_runs.idle_runs` finds them over its UTC days, using the
        carry the last re-judging left of the same read; the carry this read leaves is kept for :meth:`store`,
        without the GPUs of ``exclude`` (read elsewhere: their runs here are not used). ``helpers`` as for
        ``idle_runs``."""
        lo, hi, only = read
        chosen = None if only is None else set(only)
        carried = self._carried(lo, hi, chosen)
        start = lo if carried is None else carried.through
        through = max(start, min(hi, self._through))
        covered = set() if carried is None else carried.covered if chosen is None else carried.covered & chosen
        every = self._every_gpu(connection) if chosen is None else chosen
        judged = every - set(exclude)

        def pieces(t: float, a: int, b: int, gpus: Sequence[int] | None) -> list[RunPiece]:
            chunks = list(day_chunks(a, b))
            if not chunks or (gpus is not None and not gpus):
                return []
            return run_pieces(connection, chunks, t, max_gap, window, helpers=helpers, only=gpus)

        found: dict[float, list[IdleRun]] = {}
        left: dict[float, list[RunPiece]] = {}
        for t in thresholds:
            carried_pieces = [] if carried is None else carried.pieces.get(t, [])
            # Carried from a read that started earlier: a run crossing this read's start starts there when read whole.
            crossing = {p.gpu_id for p in carried_pieces if p.first_ts < lo <= p.last_ts + max_gap}
            taken = covered - crossing
            kept = [RunPiece(*p.as_row()) for p in carried_pieces if p.gpu_id in taken and p.first_ts >= lo]
            uncovered = sorted(judged - taken) if start > lo else []
            look_up_next(connection, [p for p in kept if not p.next_seen])
            before = joined_pieces([*kept, *pieces(t, lo, start, uncovered), *pieces(t, start, through, only)], max_gap)
            left[t] = [RunPiece(*p.as_row()) for p in before if p.gpu_id in judged]
            found[t] = joined_runs([*before, *pieces(t, through, hi, only)], max_gap, window)
        self._left[lo, hi] = _Carried(lo, through, judged, left)
        return found

    def _carried(self, lo: int, hi: int, chosen: set[int] | None) -> _Carried | None:
        """The carry for a read [lo, hi) of the GPUs ``chosen`` (None: every GPU): the one left by the same read, else
        the one of a read that started at or before ``lo`` and read up to it or further (the next hour's first
        cycles: a period that ends, or starts, an hour later) holding the most of those GPUs."""
        same = self._taken.get((lo, hi))
        if same is not None:
            return same
        fits = [c for c in self._taken.values() if c.lo <= lo <= c.through <= hi]
        return max(fits, key=lambda c: len(c.covered if chosen is None else c.covered & chosen), default=None)

    def _every_gpu(self, connection: Connection) -> set[int]:
        """Every GPU's id, read once."""
        if self._every is None:
            self._every = set(connection.execute(select(Gpu.id)).scalars())
        return self._every

    def store(self, session: Session) -> None:
        """Replace the stored carries by those this re-judging leaves (the reads it did not do have none)."""
        session.execute(delete(IdleRunCarry))
        rows = [
            {
                "lo": lo,
                "hi": hi,
                "document": orjson.dumps(
                    {
                        "policy": self._policy,
                        "until": self._settled.until,
                        "through": carried.through,
                        "covered": sorted(carried.covered),
                        "pieces": [[t, [p.as_row() for p in found]] for t, found in carried.pieces.items()],
                    }
                ).decode(),
            }
            for (lo, hi), carried in self._left.items()
        ]
        if rows:
            session.execute(insert(IdleRunCarry), rows)
