"""Group commit of concurrent items: items waiting while a round runs go together in the next, and one failing
item fails only itself."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from finops.ingest.group_commit import GroupCommit

TIMEOUT = 30.0


def _wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


class _Recorder:
    """A ``run`` that records each call's items, answers item × 10, refuses items below 0, and holds its first call
    until released."""

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


def _submit_while_first_round_runs(items: list[int], max_items: int) -> tuple[_Recorder, list[Future[int]]]:
    """Item 0 starts a round that holds; ``items`` are handed in meanwhile; then the round is released."""
    run = _Recorder()
    commits: GroupCommit[int, int] = GroupCommit(run, max_items)
    pool = ThreadPoolExecutor(len(items) + 1)
    first = pool.submit(commits.submit, 0)
    _wait_for(lambda: len(run.calls) == 1)
    futures = [first]
    for count, item in enumerate(items, start=1):
        futures.append(pool.submit(commits.submit, item))
        _wait_for(lambda: commits.waiting == count)  # noqa: B023 - called at once, in this iteration
    run.release.set()
    pool.shutdown(wait=True)
    return run, futures


def test_items_handed_in_during_a_round_share_the_next() -> None:
    run, futures = _submit_while_first_round_runs([1, 2, 3, 4], max_items=16)
    assert run.calls == [[0], [1, 2, 3, 4]], "one transaction for the four items that waited"
    assert [f.result() for f in futures] == [0, 10, 20, 30, 40]


def test_a_round_takes_at_most_max_items() -> None:
    run, futures = _submit_while_first_round_runs([1, 2, 3, 4, 5], max_items=2)
    assert run.calls == [[0], [1, 2], [3, 4], [5]]
    assert [f.result() for f in futures] == [0, 10, 20, 30, 40, 50]


def test_a_failing_item_fails_alone_and_the_others_are_stored() -> None:
    run, futures = _submit_while_first_round_runs([1, -2, 3], max_items=16)
    assert run.calls == [[0], [1, -2, 3], [1], [-2], [3]], "the failed round is run again item by item"
    assert [futures[i].result() for i in (0, 1, 3)] == [0, 10, 30]
    with pytest.raises(ValueError, match=r"negative item among \[-2\]"):
        futures[2].result()


def test_an_item_alone_runs_at_once_and_its_error_reaches_its_caller() -> None:
    calls: list[list[int]] = []

    def run(items: Sequence[int]) -> list[int]:
        calls.append(list(items))
        if items[0] < 0:
            raise ValueError("refused")
        return [items[0] + 1]

    commits: GroupCommit[int, int] = GroupCommit(run, 4)
    assert commits.submit(1) == 2
    with pytest.raises(ValueError, match="refused"):
        commits.submit(-1)
    assert commits.submit(5) == 6, "a failure leaves no round under way"
    assert calls == [[1], [-1], [5]]


def test_many_threads_each_get_their_own_result() -> None:
    commits: GroupCommit[int, int] = GroupCommit(lambda items: [item * item for item in items], 8)
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(commits.submit, range(2000)))
    assert results == [item * item for item in range(2000)]


def test_max_items_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="max_items must be at least 1, not 0"):
        GroupCommit(lambda items: list(items), 0)
