"""Group commit of concurrent items: items waiting while a round runs go together in the next, and one failing
item fails only itself."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import anyio
import pytest

from finops.ingest.group_commit import GroupCommit
from tests.support.ingest_in_process import wait_until

TIMEOUT = 30.0

pytestmark = pytest.mark.anyio


class _Recorder:
    """A ``run`` that records each call's items, answers item × 10, refuses items below 0, and holds its first call
    until released (it runs in a worker thread)."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []
        self.release = threading.Event()

    def __call__(self, items: Sequence[int]) -> list[int]:
        self.calls.append(list(items))
        if len(self.calls) == 1:
            assert self.release.wait(TIMEOUT)
        if any(item < 0 for item in items):
            raise ValueError(f"negative item among {list(items)}")
        return [item * 10 for item in items]


async def _submit_while_first_round_runs(
    items: list[int], max_items: int
) -> tuple[_Recorder, dict[int, int | BaseException]]:
    """Item 0 starts a round that holds; ``items`` are handed in meanwhile; then the round is released. Returns the
    recorder and each item's result or exception."""
    run = _Recorder()
    commits: GroupCommit[int, int] = GroupCommit(run, max_items)
    outcomes: dict[int, int | BaseException] = {}

    async def submit(item: int) -> None:
        try:
            outcomes[item] = await commits.submit(item)
        except ValueError as exc:
            outcomes[item] = exc

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(submit, 0)
        await wait_until(lambda: len(run.calls) == 1, TIMEOUT)
        for count, item in enumerate(items, start=1):
            tasks.start_soon(submit, item)
            await wait_until(lambda: commits.waiting == count, TIMEOUT)  # noqa: B023 - called at once, in this iteration
        run.release.set()
    return run, outcomes


async def test_items_handed_in_during_a_round_share_the_next() -> None:
    run, outcomes = await _submit_while_first_round_runs([1, 2, 3, 4], max_items=16)
    assert run.calls == [[0], [1, 2, 3, 4]], "one transaction for the four items that waited"
    assert outcomes == {0: 0, 1: 10, 2: 20, 3: 30, 4: 40}


async def test_a_round_takes_at_most_max_items() -> None:
    run, outcomes = await _submit_while_first_round_runs([1, 2, 3, 4, 5], max_items=2)
    assert run.calls == [[0], [1, 2], [3, 4], [5]]
    assert outcomes == {0: 0, 1: 10, 2: 20, 3: 30, 4: 40, 5: 50}


async def test_a_failing_item_fails_alone_and_the_others_are_stored() -> None:
    run, outcomes = await _submit_while_first_round_runs([1, -2, 3], max_items=16)
    assert run.calls == [[0], [1, -2, 3], [1], [-2], [3]], "the failed round is run again item by item"
    assert {item: outcomes[item] for item in (0, 1, 3)} == {0: 0, 1: 10, 3: 30}
    failure = outcomes[-2]
    assert isinstance(failure, ValueError) and str(failure) == "negative item among [-2]"


async def test_an_item_alone_runs_at_once_and_its_error_reaches_its_caller() -> None:
    calls: list[list[int]] = []

    def run(items: Sequence[int]) -> list[int]:
        calls.append(list(items))
        if items[0] < 0:
            raise ValueError("refused")
        return [items[0] + 1]

    commits: GroupCommit[int, int] = GroupCommit(run, 4)
    assert await commits.submit(1) == 2
    with pytest.raises(ValueError, match="refused"):
        await commits.submit(-1)
    assert await commits.submit(5) == 6, "a failure leaves no round under way"
    assert calls == [[1], [-1], [5]]


async def test_many_callers_each_get_their_own_result() -> None:
    commits: GroupCommit[int, int] = GroupCommit(lambda items: [item * item for item in items], 8)
    results: dict[int, int] = {}

    async def submit(item: int) -> None:
        results[item] = await commits.submit(item)

    async with anyio.create_task_group() as tasks:
        for item in range(2000):
            tasks.start_soon(submit, item)
    assert results == {item: item * item for item in range(2000)}


async def test_callers_cancelled_while_waiting_still_see_their_round_through() -> None:
    """A request cancelled while its item waits (its client gone) neither loses the item's round nor the lead: the
    round runs, and later items are stored."""
    run = _Recorder()
    commits: GroupCommit[int, int] = GroupCommit(run, 16)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(commits.submit, 0)
        await wait_until(lambda: len(run.calls) == 1, TIMEOUT)
        with anyio.CancelScope() as waiting:
            async with anyio.create_task_group() as cancelled:
                cancelled.start_soon(commits.submit, 1)
                cancelled.start_soon(commits.submit, 2)
                await wait_until(lambda: commits.waiting == 2, TIMEOUT)
                waiting.cancel()
                run.release.set()
    assert run.calls == [[0], [1, 2]]
    assert await commits.submit(3) == 30, "the lead was handed on"


def test_max_items_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="max_items must be at least 1, not 0"):
        GroupCommit(lambda items: list(items), 0)
