"""Which readings a re-judging of idle time reads, per GPU (:func:`finops.analysis.idle.detect_idle`).

A period re-judged grows, for each GPU, to take in whole that GPU's stored episodes touching it
(:func:`spans_of_stored`); the GPUs whose period grew are read apart (:func:`wide_reads`), and what is found for them is
kept within their own periods (:func:`within_spans`); the episodes taken in are deleted once the readings are read
(:func:`forget_taken`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from typing import TypeVar

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from finops.analysis.idle_pieces import IdleRun
from finops.db.models import IdleEpisode
from finops.timeutil import floor_hour, from_epoch, to_epoch

H = TypeVar("H")
"""What an episode is held by (:func:`within_spans` passes it through)."""

_DELETE_BATCH = 1000
"""Stored episodes deleted by one statement (their ids bound as parameters)."""


def spans_of_stored(session: Session, start: int, end: int, margin: int) -> tuple[dict[int, tuple[int, int]], set[int]]:
    """Per GPU with stored episodes touching [start, end) (epoch seconds): that period grown until each of the GPU's
    own stored episodes touching it lies inside it with ``margin`` seconds to spare on both sides (an episode of the
    GPU reached by the growth is taken in too); and the ids of every episode taken in. Each GPU grows by its own
    episodes alone: one GPU idle for a week widens its own re-judging, not every GPU's (grown by every GPU's
    episodes at once, the episodes of a fleet overlap each other back to its first reading)."""
    spans: dict[int, tuple[int, int]] = {}
    taken: set[int] = set()
    touching = select(IdleEpisode.id, IdleEpisode.gpu_id, IdleEpisode.start, IdleEpisode.end)
    found = session.execute(
        touching.where(IdleEpisode.end >= from_epoch(start), IdleEpisode.start <= from_epoch(end))
    ).all()
    while found:
        grown: set[int] = set()
        for episode_id, gpu_id, first, last in found:
            taken.add(episode_id)
            lo, hi = spans.get(gpu_id, (start, end))
            spans[gpu_id] = (min(lo, to_epoch(first) - margin), max(hi, to_epoch(last) + margin))
            if spans[gpu_id] != (lo, hi):
                grown.add(gpu_id)
        if not grown:
            break
        lo, hi = min(spans[g][0] for g in grown), max(spans[g][1] for g in grown)
        found = [
            row
            for row in session.execute(
                touching.where(
                    IdleEpisode.gpu_id.in_(sorted(grown)),
                    IdleEpisode.end >= from_epoch(lo),
                    IdleEpisode.start <= from_epoch(hi),
                )
            )
            if row.id not in taken
            and to_epoch(row.end) >= spans[row.gpu_id][0]
            and to_epoch(row.start) <= spans[row.gpu_id][1]
        ]
    return spans, taken


def wide_reads(wide: Mapping[int, tuple[int, int]]) -> list[tuple[int, int, list[int]]]:
    """The reads of the GPUs whose spans grew past the period (``wide``: GPU id -> [lo, hi) epoch seconds): one per
    UTC hour a span starts in and span end, [that hour's start, the end), of those GPUs. A GPU's episodes found there
    before its own span are its stored episodes, kept (:func:`within_spans`). A GPU idle for days starts its span in
    the same hour at every re-judging, so its read is carried from one to the next
    (:mod:`finops.analysis.idle_carry`)."""
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    for gpu_id, (lo, hi) in wide.items():
        groups[floor_hour(lo), hi].append(gpu_id)
    return [(hour, hi, sorted(gpus)) for (hour, hi), gpus in sorted(groups.items())]


def within_spans(
    held_runs: Iterable[tuple[H, IdleRun, int, int]], wide: Mapping[int, tuple[int, int]], window: int
) -> Iterator[tuple[H, IdleRun, int, int]]:
    """The episodes of ``held_runs`` (:func:`finops.analysis.idle._held_runs`) of the GPUs read over their own spans
    (``wide``: GPU id -> [lo, hi) epoch seconds; read from the start of lo's hour on: :func:`wide_reads`) starting no
    earlier than lo, left out where what is left is shorter than ``window``: the stored episodes before a span are
    kept, so an episode found reaching back past its start (readings or thresholds changed there since they were
    judged) would bill that time twice. Others as they are."""
    for held, run, lo, hi in held_runs:
        span = wide.get(run.gpu_id)
        if span is not None:
            lo = max(lo, span[0])
            if hi - lo < window:
                continue
        yield held, run, lo, hi


def forget_taken(session: Session, taken: Iterable[int]) -> None:
    """Delete the stored episodes of ids ``taken`` (:func:`spans_of_stored`), :data:`_DELETE_BATCH` a statement."""
    ids = sorted(taken)
    for first in range(0, len(ids), _DELETE_BATCH):
        session.execute(delete(IdleEpisode).where(IdleEpisode.id.in_(ids[first : first + _DELETE_BATCH])))
