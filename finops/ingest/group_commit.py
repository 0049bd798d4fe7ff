"""Group commit: the work items of concurrent callers done together in one transaction.

A single-cycle ingest POST (8 readings) costs far more in its transaction (pool checkout, ``BEGIN``, the
GPU-ownership query, ``COPY`` set-up, ``COMMIT`` and its WAL flush) than in its rows. :class:`GroupCommit` lets
the requests that hold such items at the same moment share one transaction, by flat combining (Hendler, Incze,
Shavit and Tzafrir, "Flat combining and the synchronization-parallelism tradeoff", SPAA 2010) on the event loop:
the first caller to find no transaction under way becomes the combiner and runs every item waiting, its own
included, in one worker thread; callers arriving meanwhile wait on the loop for the next round, which one of them
leads. No task of its own, no timer: an item alone is run at once, and items group only as far as they arrive
while a transaction is under way. A round costs one worker thread's wake-up, not one per item.

One item never fails another: when a round raises, each of its items is run again alone (in the same thread), so
the caller whose item is at fault gets the exception and the others their results.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import anyio
import anyio.to_thread

T = TypeVar("T")
R = TypeVar("R")


@dataclass(eq=False, slots=True)
class _Waiter(Generic[T, R]):
    item: T
    done: anyio.Event = field(default_factory=anyio.Event)
    leads: bool = False
    result: R | None = None
    error: BaseException | None = None


class GroupCommit(Generic[T, R]):
    """Runs ``run(items) -> results`` (one transaction, a result per item in their order) for the items that
    concurrent :meth:`submit` calls hand in, up to ``max_items`` a round (≥ 1).

    ``run`` must be all or nothing for its items (one transaction it commits or rolls back); it is called in a
    worker thread (:func:`anyio.to_thread.run_sync`). Rounds never overlap: one transaction at a time per instance.
    :meth:`submit` is called from one event loop, the instance's.
    """

    def __init__(self, run: Callable[[Sequence[T]], Sequence[R]], max_items: int) -> None:
        if max_items < 1:
            raise ValueError(f"max_items must be at least 1, not {max_items}")
        self._run, self._max_items = run, max_items
        self._waiting: list[_Waiter[T, R]] = []
        self._busy = False

    @property
    def waiting(self) -> int:
        """Items handed in and not yet taken by a round."""
        return len(self._waiting)

    async def submit(self, item: T) -> R:
        """``item``'s result once its round has committed; raises what running ``item`` alone raised when its round
        failed. The wait is shielded from cancellation: a round, once its items are handed in, is seen through (and
        the lead passed on), whatever happens to the callers."""
        waiter: _Waiter[T, R] = _Waiter(item)
        self._waiting.append(waiter)
        waiter.leads = not self._busy
        self._busy = True
        with anyio.CancelScope(shield=True):
            while True:  # woken either to lead the next round (its item among them) or with its item done
                if waiter.leads:
                    waiter.leads = False
                    await self._lead()
                elif waiter.done.is_set():
                    break
                else:
                    await waiter.done.wait()
        if waiter.error is not None:
            raise waiter.error
        return waiter.result  # type: ignore[return-value]

    async def _lead(self) -> None:
        """Run one round of the waiting items, then hand the lead to the next waiter, if any."""
        batch, self._waiting = self._waiting[: self._max_items], self._waiting[self._max_items :]
        try:
            outcomes = await anyio.to_thread.run_sync(self._run_round, [waiter.item for waiter in batch])
        except Exception as failure:  # no worker thread to be had: every item fails with it
            outcomes = [(None, failure)] * len(batch)
        for waiter, (result, error) in zip(batch, outcomes, strict=True):
            waiter.result, waiter.error = result, error
            waiter.done.set()
        if self._waiting:
            successor = self._waiting[0]
            successor.leads = True
            successor.done.set()  # wakes it to lead; it then waits for its own item on a new event
            successor.done = anyio.Event()
        else:
            self._busy = False

    def _run_round(self, items: list[T]) -> list[tuple[R | None, BaseException | None]]:
        """(result, error) per item: ``run`` of them all, or of each alone when that raised. In a worker thread."""
        try:
            return [(result, None) for result in self._run(items)]
        except BaseException as failure:
            if len(items) == 1:
                return [(None, failure)]
        return [self._run_alone(item) for item in items]

    def _run_alone(self, item: T) -> tuple[R | None, BaseException | None]:
        try:
            return self._run([item])[0], None
        except BaseException as failure:
            return None, failure
