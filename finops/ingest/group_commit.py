"""Group commit: the work items of concurrent callers done together in one transaction.

A single-cycle ingest POST (8 readings) costs far more in its transaction (pool checkout, ``BEGIN``, the
GPU-ownership query, ``COPY`` set-up, ``COMMIT`` and its WAL flush) than in its rows. :class:`GroupCommit` lets
the threads that hold such items at the same moment share one transaction, by flat combining (Hendler, Incze,
Shavit and Tzafrir, "Flat combining and the synchronization-parallelism tradeoff", SPAA 2010): the first caller to
find no transaction under way becomes the combiner and runs every item waiting, its own included; callers arriving
meanwhile wait for the next round, which one of them leads. No thread of its own, no timer: an item alone is run
at once, and items group only as far as they arrive while a transaction is under way.

One item never fails another: when a round raises, each of its items is run again alone, so the caller whose
item is at fault gets the exception and the others their results.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


@dataclass(eq=False, slots=True)
class _Waiter(Generic[T, R]):
    item: T
    done: threading.Event = field(default_factory=threading.Event)
    leads: bool = False
    result: R | None = None
    error: BaseException | None = None


class GroupCommit(Generic[T, R]):
    """Runs ``run(items) -> results`` (one transaction, a result per item in their order) for the items that
    concurrent :meth:`submit` calls hand in, up to ``max_items`` a round (≥ 1).

    ``run`` must be all or nothing for its items (one transaction it commits or rolls back) and may be called from
    any submitting thread. Rounds never overlap: one transaction at a time per instance.
    """

    def __init__(self, run: Callable[[Sequence[T]], Sequence[R]], max_items: int) -> None:
        if max_items < 1:
            raise ValueError(f"max_items must be at least 1, not {max_items}")
        self._run, self._max_items = run, max_items
        self._lock = threading.Lock()
        self._waiting: list[_Waiter[T, R]] = []
        self._busy = False

    @property
    def waiting(self) -> int:
        """Items handed in and not yet taken by a round."""
        with self._lock:
            return len(self._waiting)

    def submit(self, item: T) -> R:
        """``item``'s result once its round has committed; raises what running ``item`` alone raised when its round
        failed. Blocks the calling thread meanwhile."""
        waiter: _Waiter[T, R] = _Waiter(item)
        with self._lock:
            self._waiting.append(waiter)
            waiter.leads = not self._busy
            self._busy = True
        while True:  # woken either to lead the next round (its item among them) or with its item done
            if waiter.leads:
                waiter.leads = False
                self._lead()
            elif waiter.done.is_set():
                break
            else:
                waiter.done.wait()
        if waiter.error is not None:
            raise waiter.error
        return waiter.result  # type: ignore[return-value]

    def _lead(self) -> None:
        """Run one round of the waiting items, then hand the lead to the next waiter, if any."""
        with self._lock:
            batch, self._waiting = self._waiting[: self._max_items], self._waiting[self._max_items :]
        try:
            self._run_round(batch)
        finally:
            with self._lock:
                if self._waiting:
                    successor = self._waiting[0]
                    successor.leads = True
                    successor.done.set()
                else:
                    self._busy = False
            for waiter in batch:
                waiter.done.set()

    def _run_round(self, batch: list[_Waiter[T, R]]) -> None:
        try:
            results = self._run([waiter.item for waiter in batch])
        except BaseException as failure:
            if len(batch) == 1:
                batch[0].error = failure
                return
            for waiter in batch:
                self._run_alone(waiter)
            return
        for waiter, result in zip(batch, results, strict=True):
            waiter.result = result

    def _run_alone(self, waiter: _Waiter[T, R]) -> None:
        try:
            waiter.result = self._run([waiter.item])[0]
        except BaseException as failure:
            waiter.error = failure
