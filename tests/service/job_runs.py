"""Counting the runs of an APScheduler scheduler's jobs, for tests that wait for a number of runs, not a time."""

from __future__ import annotations

import threading
from collections import Counter

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, JobExecutionEvent
from apscheduler.schedulers.base import BaseScheduler


class JobRuns:
    """Counts the finished runs (done or failed) of each job of ``scheduler`` from now on."""

    def __init__(self, scheduler: BaseScheduler) -> None:
        self._finished: Counter[str] = Counter()
        self._changed = threading.Condition()
        scheduler.add_listener(self._count, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)

    def _count(self, event: JobExecutionEvent) -> None:
        with self._changed:
            self._finished[event.job_id] += 1
            self._changed.notify_all()

    def wait(self, job_id: str, runs: int, timeout_seconds: float = 60) -> None:
        """Block until job ``job_id`` has run ``runs`` whole times after this call: ``runs`` + 1 more runs finish,
        as the first may have started before it (a job runs one at a time). AssertionError after
        ``timeout_seconds``."""
        with self._changed:
            target = self._finished[job_id] + runs + 1
            finished = self._changed.wait_for(lambda: self._finished[job_id] >= target, timeout_seconds)
            assert finished, f"{job_id} ran {self._finished[job_id]} times, not {target}, in {timeout_seconds} s"
