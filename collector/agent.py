"""The collector's main loop: every interval, run each source, publish to ``/metrics``, hand readings on.

One failing source never stops the others: its exception is logged and its success gauge set to 0; a sink that
fails loses that cycle's readings (logged), never the loop.
Sources are read on the agent's timer, never per scrape. Each cycle's samples pass through the job mapper
(``annotate``) and then to the sink: :meth:`collector.delivery.Delivery.enqueue` in the collector (spooled,
sent by its own thread), :meth:`collector.shipper.Shipper.ship` where there is no spool (the demo).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from collector.contract.sample import Sample, Source
from collector.exposition import LatestSamples
from collector.shipper import ShipError

log = logging.getLogger(__name__)


Sink = Callable[[list[Sample]], int]
"""Takes one cycle's samples; returns how many readings it took (spooled or accepted)."""
Annotate = Callable[[list[Sample]], list[Sample]]
"""Fills in :attr:`Sample.job_id` (:class:`collector.jobmap.JobMapper`)."""


class Agent:
    """Runs ``sources`` every ``interval_seconds``; publishes into ``latest``; hands samples to ``sink``.

    ``annotate``, when given, maps GPUs to jobs before publishing and sinking.
    """

    def __init__(
        self,
        sources: Sequence[Source],
        latest: LatestSamples,
        sink: Sink | None,
        interval_seconds: float = 10.0,
        annotate: Annotate | None = None,
    ) -> None:
        self.sources = list(sources)
        self.latest = latest
        self.sink = sink
        self.interval_seconds = interval_seconds
        self.annotate = annotate

    def collect_once(self) -> list[Sample]:
        """Run every source once; returns all samples read. Failures are logged and recorded, not raised."""
        collected: list[Sample] = []
        for source in self.sources:
            started = time.perf_counter()
            try:
                samples = source.collect()
                if self.annotate is not None:
                    samples = self.annotate(samples)
            except Exception:
                log.exception("source %s failed", source.name)
                self.latest.update(source.name, [], False, time.perf_counter() - started)
                continue
            self.latest.update(source.name, samples, True, time.perf_counter() - started)
            collected.extend(samples)
        return collected

    def cycle(self) -> int:
        """Collect once and hand the samples to the sink; returns what the sink took (0 on failure or no sink)."""
        samples = self.collect_once()
        if self.sink is None:
            return 0
        try:
            return self.sink(samples)
        except ShipError as exc:
            log.error("%s", exc)
        except Exception:  # one cycle's readings lost, never the collector
            log.exception("the cycle's readings could not be handed on")
        return 0

    def run(self, stop: threading.Event) -> None:
        """Cycle on the interval until ``stop`` is set (a slow cycle delays the next, never overlaps it)."""
        while not stop.is_set():
            started = time.monotonic()
            self.cycle()
            stop.wait(max(0.0, self.interval_seconds - (time.monotonic() - started)))
