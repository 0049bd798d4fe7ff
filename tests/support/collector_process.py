"""A collector process for fault tests: 8 fake H100s on a fast clock, spooling to a service that may be down.

``python -m tests.support.collector_process SPOOL_DIR SERVICE_URL``: each cycle advances the fake clock by 10 s,
collects, spools, and prints the cycle number once the spool has it on disk. No sender thread: delivery is
left to the test, so a cycle printed is a cycle that must reach the service.
"""

from __future__ import annotations

import sys
from pathlib import Path

from collector.agent import Agent
from collector.delivery import Delivery
from collector.exposition import LatestSamples
from collector.shipper import Shipper
from collector.sources.nvml import NvmlSource
from collector.spool import Spool
from tests.support.environment import shared_data_dir
from tests.support.fake_pynvml import ManualClock
from tests.support.node_fixture import eight_h100_nvml

INTERVAL_SECONDS = 10.0


def main(spool_dir: str, service_url: str) -> None:
    clock = ManualClock()
    delivery = Delivery(Spool(Path(spool_dir)), Shipper(service_url, "unused", "gpu-fault-01"))
    agent = Agent([NvmlSource(eight_h100_nvml(shared_data_dir(), clock), clock)], LatestSamples(), delivery.enqueue)
    cycle = 0
    while True:
        clock.advance(INTERVAL_SECONDS)
        agent.cycle()
        print(cycle, flush=True)
        cycle += 1


if __name__ == "__main__":
    main(*sys.argv[1:3])
