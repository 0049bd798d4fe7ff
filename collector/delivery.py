"""At-least-once delivery: every cycle's readings go to the spool first, a sender thread drains it to the service.

A batch leaves the spool only when the service has answered for it: delivered (200/422) or refused for good
(other 4xx, counted as rejected). Failures that can pass (network, 5xx, 408, 429) keep it spooled and are retried
with :class:`collector.shipper.Backoff` (or the server's ``Retry-After``) for as long as it takes; the spool's
size bound decides what is dropped if the outage outlasts the disk. Refused credentials (401, 403: a revoked,
expired or another node's token) are retried the same way, never dropped: the shipper re-reads a changed token file
before each try, and until the service takes one, :attr:`Delivery.credentials_rejected` is set and an ERROR naming
the status and the token file is logged every :data:`CREDENTIALS_LOG_SECONDS`. The service's ingest is idempotent
(one row per GPU and timestamp), so a batch sent twice after a crash is stored once.

A ``Retry-After`` (a 429 or 503: the node over its rate, or the service past the requests it takes) also asks the
collector to slow down: it waits that long, then sends every cycle spooled meanwhile as one POST (up to
``batch_samples`` readings), and goes on spacing its POSTs by that *pace* while it decays, halving every
:data:`PACE_HALF_LIFE_SECONDS`; a cycle's readings wait in the spool meanwhile and travel with the next POST. A
refusal while paced doubles the pace (at least the new ``Retry-After``, at most :data:`PACE_GROWTH` times it), so a
fleet past the service's request rate sends fewer, larger POSTs until the service keeps up, and loses nothing. The
default ``batch_samples`` (10,000 readings, about 1.5 MB of JSON) is within what the service takes in one POST (its
body limit and a node's burst, :mod:`finops.ingest.limits`).

A cycle the spool cannot take (its disk full: ``ENOSPC``, ``EDQUOT``; or another write error) is dropped, newest
first: what is spooled stays and is still delivered, and acknowledged segments are deleted, which frees the room for
later cycles. The loss is counted per reason in :attr:`Delivery.unspooled_samples` and logged once per episode
(when it starts and when the spool takes a cycle again), never per cycle.
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections.abc import Callable, Iterable

import orjson

from collector.contract import wire
from collector.contract.sample import Sample
from collector.node_io import NodeIoRates
from collector.shipper import MAX_RETRY_AFTER_SECONDS, Backoff, Shipper
from collector.spool import Spool

log = logging.getLogger(__name__)

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
"""Write errors that mean the spool's file system (or the collector's quota on it) has no room."""
CREDENTIALS_LOG_SECONDS = 300.0
"""While the service refuses the node's credentials, the ERROR saying so is repeated at most this often."""
UNSPOOLED_REASONS = ("disk_full", "write_error")
"""Why a cycle's readings were not spooled: no room (:data:`DISK_FULL_ERRNOS`), or any other write error."""
PACE_HALF_LIFE_SECONDS = 300.0
"""The pace the service asked for (``Retry-After``) halves every this many seconds after its last request: one
5-minute ledger cycle, so that a fleet the service asked to slow down comes back to a POST per cycle over minutes,
not all at once."""
PACE_GROWTH = 8
"""Refusals while paced double the pace up to this many times the service's latest ``Retry-After`` (and
:data:`collector.shipper.MAX_RETRY_AFTER_SECONDS`): a fleet well past the service's rate slows further, and a
collector retrying through a database outage (``Retry-After: 5``) still tries every 40 s at the least."""
PACE_FLOOR_SECONDS = 1.0
"""A decayed pace below this is none: the collector sends each cycle as it comes."""


class Delivery:
    """Spool in front of a :class:`Shipper`.

    Args:
        spool: the durable queue.
        shipper: sends merged batches.
        batch_samples: at most this many readings per POST when draining a backlog.
        backoff: waits between failed tries.
        clock: monotonic seconds, for the rate of the credentials ERROR and the pace's decay (tests pass a manual
            clock).

    Counters (read by :class:`collector.exposition.DeliveryStats`): ``shipped_samples`` (accepted by the
    service), ``rejected_samples`` (refused or rejected by it), ``untimely_samples`` (of those, refused for their
    time, by reason: :data:`collector.contract.wire.UNTIMELY_REASONS`), ``failed_sends`` (POSTs that will be retried),
    ``unspooled_samples`` (readings dropped because the spool could not take their cycle, by reason: one of
    :data:`UNSPOOLED_REASONS`); ``credentials_rejected``, whether the service's last answer refused the credentials
    (401/403); :attr:`pace_seconds`, the spacing of POSTs the service asked for (module docstring).
    """

    def __init__(
        self,
        spool: Spool,
        shipper: Shipper,
        batch_samples: int = 10_000,
        backoff: Backoff = Backoff(),  # noqa: B008  # frozen dataclass: a safe default
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spool = spool
        self.shipper = shipper
        self.batch_samples = batch_samples
        self.backoff = backoff
        self.shipped_samples = 0
        self.rejected_samples = 0
        self.untimely_samples = dict.fromkeys(wire.UNTIMELY_REASONS, 0)
        self.failed_sends = 0
        self.unspooled_samples = dict.fromkeys(UNSPOOLED_REASONS, 0)
        self.credentials_rejected = False
        self._clock = clock
        self._credentials_logged_at: float | None = None
        self._unspooled_episode = 0
        self._failures_in_a_row = 0
        self._pace = 0.0
        self._paced_at = 0.0
        self._wake = threading.Event()
        self._node_io = NodeIoRates()

    def enqueue(self, samples: Iterable[Sample]) -> int:
        """Spool the shippable readings among ``samples`` (one cycle's) durably, with the node's fabric and storage
        rates since the previous cycle as their ``node_io`` entry (:class:`collector.node_io.NodeIoRates`); returns
        how many readings were spooled. A cycle without readings spools nothing, its rates included. A cycle the
        spool cannot take is dropped (0 returned), counted and logged once per episode (module docstring)."""
        collected = list(samples)
        batch = wire.batch_dict(collected)
        count = len(batch["samples"])
        node_io = self._node_io.entry(collected)
        if not count:
            return 0
        if node_io is not None:
            batch["node_io"] = [node_io]
        try:
            self.spool.append(orjson.dumps(batch), count)
        except OSError as exc:
            self._unspooled(exc, count)
            return 0
        if self._unspooled_episode:
            log.warning("the spool takes readings again; %d readings were dropped while it could not",
                        self._unspooled_episode)  # fmt: skip
            self._unspooled_episode = 0
        self._wake.set()
        return count

    def _unspooled(self, exc: OSError, count: int) -> None:
        """Count ``count`` readings dropped because appending them raised ``exc``; log the start of an episode."""
        reason = "disk_full" if exc.errno in DISK_FULL_ERRNOS else "write_error"
        self.unspooled_samples[reason] += count
        if not self._unspooled_episode:
            log.error("spool %s cannot take this cycle's readings (%s): new cycles are dropped and counted in "
                      "gpufinops_collector_unspooled_samples_total{reason=%r} until it can; the %d spooled readings "
                      "are kept and still delivered", self.spool.directory, exc.strerror or exc, reason,
                      self.spool.pending_samples)  # fmt: skip
        self._unspooled_episode += count

    @property
    def pace_seconds(self) -> float:
        """Seconds the collector leaves between two POSTs because the service asked it to slow down: the last
        ``Retry-After`` (doubled by a refusal while paced) halved every :data:`PACE_HALF_LIFE_SECONDS` since; 0 once
        under :data:`PACE_FLOOR_SECONDS`, or when the service never asked."""
        if not self._pace:
            return 0.0
        pace = self._pace * 0.5 ** ((self._clock() - self._paced_at) / PACE_HALF_LIFE_SECONDS)
        return pace if pace >= PACE_FLOOR_SECONDS else 0.0

    def _slow_down(self, retry_after: float) -> float:
        """The service asked to wait ``retry_after`` seconds: the new pace (the wait before the next POST), at least
        that, twice the current pace when already paced, at most :data:`PACE_GROWTH` times ``retry_after`` and
        :data:`MAX_RETRY_AFTER_SECONDS`."""
        doubled = min(2 * self.pace_seconds, PACE_GROWTH * retry_after)
        self._pace = min(MAX_RETRY_AFTER_SECONDS, max(retry_after, doubled))
        self._paced_at = self._clock()
        return self._pace

    def send_next(self) -> float | None:
        """One POST of the oldest spooled readings (every record up to ``batch_samples`` readings: what was spooled
        while the collector waited goes together). Returns None when the spool is empty, else the seconds to wait
        before the next POST: after an answer (delivered or refused: the batch leaves the spool) the current
        :attr:`pace_seconds` (0.0 when unpaced), after a failure the backoff, or the pace the service's
        ``Retry-After`` set."""
        records = self.spool.peek(self.batch_samples)
        if not records:
            return None
        result = self.shipper.send(wire.merge_batches(orjson.loads(r.payload) for r in records))
        if result.outcome in ("failed", "unauthorized"):
            self.failed_sends += 1
            self._failures_in_a_row += 1
            if result.retry_after is not None:
                delay = self._slow_down(result.retry_after)
            else:
                delay = self.backoff.delay(self._failures_in_a_row)
            if result.outcome == "unauthorized":
                self._credentials_refused(result.reason, delay)
            else:
                log.warning("ingest failed (%s); %d readings kept in the spool, retry in %.1f s",
                            result.reason, self.spool.pending_samples, delay)  # fmt: skip
            return delay
        if result.outcome == "refused":
            log.error("service refused %d readings, dropped: %s", result.rejected, result.reason)
        if self.credentials_rejected:
            log.warning("the service takes the credentials of %s again; delivering the %d readings kept meanwhile",
                        self.shipper.credentials, self.spool.pending_samples)  # fmt: skip
            self.credentials_rejected = False
            self._credentials_logged_at = None
        self._failures_in_a_row = 0
        self.spool.ack(records)
        self.shipped_samples += result.accepted
        self.rejected_samples += result.rejected
        for reason, count in result.untimely.items():
            self.untimely_samples[reason] += count
        return self.pace_seconds

    def _credentials_refused(self, reason: str, delay: float) -> None:
        """Record a 401/403 and log it as an ERROR, at most every :data:`CREDENTIALS_LOG_SECONDS`."""
        self.credentials_rejected = True
        now = self._clock()
        if self._credentials_logged_at is not None and now - self._credentials_logged_at < CREDENTIALS_LOG_SECONDS:
            return
        self._credentials_logged_at = now
        log.error("the service refused this node's credentials (%s) from %s; %d readings are kept in the spool and "
                  "retried, with the token file re-read, every %.0f s or so: put a live token of node %s there "
                  "(gpu-finops nodes token create %s)", reason, self.shipper.credentials,
                  self.spool.pending_samples, delay, self.shipper.node, self.shipper.node)  # fmt: skip

    def run(self, stop: threading.Event, idle_poll_seconds: float = 1.0) -> None:
        """Drain the spool until ``stop`` is set: back to back while there is a backlog (spaced by the pace, when the
        service asked for one), waiting after failures."""
        while not stop.is_set():
            self._wake.clear()
            try:
                delay = self.send_next()
            except Exception:  # a bug or a full disk must not end delivery for good
                log.exception("delivery error")
                delay = self.backoff.cap_seconds
            if delay is None:
                self._wake.wait(idle_poll_seconds)
            elif delay > 0:
                stop.wait(delay)
