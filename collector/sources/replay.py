"""Replays recorded GPU readings as if they came from live GPUs (the demo's workload, or a capture)."""

from __future__ import annotations

from collections.abc import Iterable

from collector.contract.sample import Sample


class ReplaySource:
    """Each ``collect`` returns the next recorded step (a list of samples, e.g. an hour of one node's GPUs).

    ``exhausted`` turns True once every step has been played; ``collect`` then returns ``[]``.
    """

    name = "replay"

    def __init__(self, steps: Iterable[list[Sample]]) -> None:
        self._steps = iter(steps)
        self.exhausted = False

    def collect(self) -> list[Sample]:
        """The next step's samples, or ``[]`` once the recording is over."""
        try:
            return next(self._steps)
        except StopIteration:
            self.exhausted = True
            return []
