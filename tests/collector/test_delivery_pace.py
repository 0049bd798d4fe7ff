"""A service that asks the collector to slow down (429/503 with Retry-After) gets the cycles gathered meanwhile as
one POST, and the next POSTs spaced while the pace decays; every reading arrives exactly once. Through
httpx.MockTransport with a manual clock, and through the real service on a socket whose per-node rate refuses."""

from __future__ import annotations

import gzip
import itertools
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson

from collector.contract.sample import Sample
from collector.delivery import PACE_HALF_LIFE_SECONDS, Delivery
from collector.shipper import Backoff, Shipper
from collector.spool import Spool
from finops.ingest.limits import IngestLimits
from finops.web.app import create_app
from tests.support.servers import running
from tests.support.stored_readings import stored_readings

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
INTERVAL = 10
GPUS = 8
TOKEN = "pace-token"


def _cycle(n: int, start: datetime = T0) -> list[Sample]:
    """Cycle ``n`` of an 8-GPU node read every 10 s from ``start``."""
    labels = {"model": "NVIDIA H100 80GB HBM3", "mig_profile": "", "parent_uuid": ""}
    return [
        Sample(
            "gpu",
            {**labels, "gpu": str(i), "uuid": f"GPU-{i}"},
            {"gpufinops_gpu_utilization_ratio": 0.5, "gpufinops_gpu_up": 1.0},
            start + timedelta(seconds=n * INTERVAL),
        )
        for i in range(GPUS)
    ]


class ManualClock:
    """Monotonic seconds that move only when told."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _readings(batch: dict[str, Any]) -> list[tuple[str, int]]:
    """(uuid, ts) of every reading of a request body."""
    return [(series["uuid"], ts) for series in batch["series"] for ts in series["ts"]]


class SlowingService:
    """A MockTransport handler answering ``code`` with ``Retry-After`` to the POSTs numbered in ``refused`` (from 0),
    200 to the others; records every body and whether it was taken."""

    def __init__(self, refused: set[int], code: int = 503, retry_after: str = "30") -> None:
        self.refused, self.code, self.retry_after = refused, code, retry_after
        self.posts: list[tuple[list[tuple[str, int]], bool]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        readings = _readings(orjson.loads(gzip.decompress(request.content)))
        taken = len(self.posts) not in self.refused
        self.posts.append((readings, taken))
        if not taken:
            return httpx.Response(self.code, json={"detail": "slow down"}, headers={"Retry-After": self.retry_after})
        return httpx.Response(200, json={"accepted": len(readings), "rejected": []})

    def stored(self) -> Counter[tuple[str, int]]:
        """How many times each reading was taken."""
        return Counter(reading for readings, taken in self.posts if taken for reading in readings)


def _delivery(tmp_path: Path, handler: SlowingService, clock: ManualClock) -> Delivery:
    client = httpx.Client(transport=httpx.MockTransport(handler))
    shipper = Shipper("http://finops.test", "tok", "gpu-a-01", client=client)
    return Delivery(Spool(tmp_path), shipper, 10_000, Backoff(base_seconds=0.5, cap_seconds=4.0), clock=clock)


def _run_cycles(delivery: Delivery, clock: ManualClock, cycles: int) -> list[float]:
    """Run ``cycles`` collection cycles 10 s apart, the sender POSTing whenever its wait is over (as
    :meth:`Delivery.run` does, on the manual clock); then drain what is left. Returns the waits it asked for."""
    waits: list[float] = []
    due = 0.0
    for n in range(cycles):
        delivery.enqueue(_cycle(n))
        while clock() >= due and (wait := delivery.send_next()) is not None:
            waits.append(wait)
            due = clock() + wait
            if wait:
                break
        clock.advance(INTERVAL)
    clock.advance(max(0.0, due - clock()))
    while (wait := delivery.send_next()) is not None:
        waits.append(wait)
        clock.advance(wait)
    return waits


def test_after_retry_after_the_cycles_gathered_meanwhile_go_as_one_post(tmp_path: Path) -> None:
    clock = ManualClock(1000.0)
    service = SlowingService(refused={1})
    delivery = _delivery(tmp_path, service, clock)
    waits = _run_cycles(delivery, clock, 12)
    sizes = [len(readings) for readings, _ in service.posts]
    assert sizes[:3] == [8, 8, 32], "the refused cycle and the 3 gathered in its 30 s go together"
    assert waits[1] == 30.0, "the service's Retry-After is waited"
    assert sum(sizes[2:]) == 11 * GPUS and len(service.posts) < 12, "later cycles are coalesced while paced"
    assert all(readings for readings, _ in service.posts)
    assert service.stored() == Counter({(f"GPU-{i}", int(T0.timestamp()) + n * INTERVAL): 1 for i in range(GPUS)
                                        for n in range(12)}), "every reading stored exactly once"  # fmt: skip
    assert (delivery.shipped_samples, delivery.failed_sends, delivery.spool.pending_samples) == (96, 1, 0)


def test_the_pace_decays_to_one_post_per_cycle(tmp_path: Path) -> None:
    clock = ManualClock(1000.0)
    service = SlowingService(refused={0}, code=429, retry_after="40")
    delivery = _delivery(tmp_path, service, clock)
    delivery.enqueue(_cycle(0))
    assert delivery.send_next() == 40.0
    assert delivery.pace_seconds == 40.0
    clock.advance(PACE_HALF_LIFE_SECONDS)
    assert delivery.pace_seconds == 20.0, "halved after a half-life"
    assert delivery.send_next() == 20.0, "after a POST taken, the wait is the pace"
    clock.advance(5 * PACE_HALF_LIFE_SECONDS)
    assert delivery.pace_seconds == 0.0, "under a second: no pace"
    delivery.enqueue(_cycle(1))
    assert delivery.send_next() == 0.0


def _sends(tmp_path: Path, service: SlowingService, sends: int) -> tuple[Delivery, list[float]]:
    """One cycle enqueued, then ``sends`` sends to ``service``, the manual clock advanced by each wait asked for
    (0 when nothing was left to send); the delivery and those waits."""
    clock = ManualClock(1000.0)
    delivery = _delivery(tmp_path, service, clock)
    delivery.enqueue(_cycle(0))
    waits = []
    for _ in range(sends):
        waits.append(delivery.send_next() or 0.0)
        clock.advance(waits[-1])
    return delivery, waits


def test_a_refusal_while_paced_doubles_the_pace_within_bounds(tmp_path: Path) -> None:
    delivery, waits = _sends(tmp_path, SlowingService(refused=set(range(8)), retry_after="30"), 6)
    assert waits[0] == 30.0
    assert all(later > earlier for earlier, later in itertools.pairwise(waits[:5])), waits
    assert max(waits) <= 8 * 30.0, "at most 8 times the service's Retry-After"
    assert delivery.spool.pending_samples == 8, "nothing is dropped while refused"


def test_a_db_outage_retry_after_is_paced_but_not_past_eight_times_it(tmp_path: Path) -> None:
    _, waits = _sends(tmp_path, SlowingService(refused=set(range(20)), retry_after="5"), 10)
    assert max(waits) == 40.0, waits


def test_a_node_over_its_rate_loses_nothing_through_the_real_service(tmp_path: Path, sessions) -> None:  # type: ignore[no-untyped-def]
    """The service's per-node token bucket (12 readings every 10 s, burst 48) against a node sending its 8 GPUs
    every 10 s after a backlog of 8 cycles (POSTs of at most 40 readings, within the burst): the 429s' Retry-After
    paces the collector, which then sends what it gathered as one POST; every reading is stored once. Both clocks
    are manual: the service's bucket refills as the collector's clock goes."""
    clock = ManualClock(0.0)
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30)
    service_clock = lambda: start.timestamp() + clock()  # noqa: E731
    limits = IngestLimits(readings_per_second=1.2, readings_burst=48)
    app = create_app(sessions, TOKEN, limits=limits, clock=service_clock)
    cycles = 60
    with running(app) as base:
        shipper = Shipper(base, TOKEN, "gpu-a-01")
        delivery = Delivery(Spool(tmp_path), shipper, 40, clock=clock)
        for n in range(8):  # a backlog of 80 s: more than the burst at once
            delivery.enqueue(_cycle(n, start))
        posts, refused, due = 0, 0, 0.0
        for n in range(8, cycles):
            delivery.enqueue(_cycle(n, start))
            clock.advance(INTERVAL)
            while clock() >= due and (wait := delivery.send_next()) is not None:
                posts += 1
                refused = delivery.failed_sends
                due = clock() + wait
                if wait:
                    break
        while delivery.spool.pending_samples:
            clock.advance(max(0.0, due - clock()))
            wait = delivery.send_next()
            posts += 1
            due = clock() + (wait or 0.0)
        shipper.close()
    assert refused > 0, "the node's rate was exceeded: the service asked it to slow down"
    assert posts - refused < cycles, "cycles were coalesced"
    assert stored_readings(sessions) == (cycles * GPUS, cycles * GPUS), "every reading stored, none twice"
    assert delivery.shipped_samples == cycles * GPUS
