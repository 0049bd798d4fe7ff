"""The collector's main loop: every interval, run each source, publish to ``/metrics``, ship GPU readings.

One failing source never stops the others: its exception is logged and its success gauge set to 0.
Sources are read on the agent's timer, never per scrape.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from collector.exposition import LatestSamples
from collector.sample import Sample, Source
from collector.shipper import ShipError, Shipper

log = logging.getLogger(__name__)


class Agent:
    """Runs ``sources`` every ``interval_seconds``; publishes into ``latest``; ships through ``shipper``."""

    def __init__(
        self,
        sources: Sequence[Source],
        latest: LatestSamples,
        shipper: Shipper | None,
        interval_seconds: float = 10.0,
    ) -> None:
        self.sources = list(sources)
        self.latest = latest
        self.shipper = shipper
        self.interval_seconds = interval_seconds

    def collect_once(self) -> list[Sample]:
        """Run every source once; returns all samples read. Failures are logged and recorded, not raised."""
        collected: list[Sample] = []
        for source in self.sources:
            started = time.perf_counter()
            try:
                samples = source.collect()
            except Exception:
                log.exception("source %s failed", source.name)
                self.latest.update(source.name, [], False, time.perf_counter() - started)
                continue
            self.latest.update(source.name, samples, True, time.perf_counter() - started)
            collected.extend(samples)
        return collected

    def cycle(self) -> int:
        """Collect once and ship; returns readings the service accepted (0 if shipping failed or is off)."""
        samples = self.collect_once()
        if self.shipper is None:
            return 0
        try:
            return self.shipper.ship(samples)
        except ShipError as exc:
            log.error("%s", exc)
            return 0

    def run(self, stop: threading.Event) -> None:
        """Cycle on the interval until ``stop`` is set (a slow cycle delays the next, never overlaps it)."""
        while not stop.is_set():
            started = time.monotonic()
            self.cycle()
            stop.wait(max(0.0, self.interval_seconds - (time.monotonic() - started)))
