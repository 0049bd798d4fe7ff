"""A collector process whose clock is off: ``python -m tests.support.skewed_node CONFIG_JSON``.

The real collector loop (:func:`collector.node.run`: spool, sender thread, ``/metrics``) over 8 fake H100s
(:func:`tests.support.node_fixture.eight_h100_nvml`) whose readings are stamped by the wall clock plus
``offset_seconds``, as NVML on a node with a clock that far off would stamp them. ``CONFIG_JSON``: ``service_url``,
``token``, ``node``, ``spool_dir``, ``metrics_port``, ``offset_seconds``. Runs until SIGTERM.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from datetime import datetime, timedelta
from pathlib import Path

from collector import node as node_process
from collector.sources.nvml import NvmlSource
from finops.timeutil import utc_now
from tests.support.environment import shared_data_dir
from tests.support.node_fixture import eight_h100_nvml

INTERVAL_SECONDS = 0.2


def main(config_json: str) -> None:
    options = json.loads(config_json)
    offset = timedelta(seconds=float(options["offset_seconds"]))

    def clock() -> datetime:
        return utc_now() + offset

    config = node_process.NodeConfig(
        service_url=options["service_url"], token=options["token"], node=options["node"],
        spool_dir=Path(options["spool_dir"]), interval_seconds=INTERVAL_SECONDS, metrics_address="127.0.0.1",
        metrics_port=int(options["metrics_port"]),
    )  # fmt: skip
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    source = NvmlSource(eight_h100_nvml(shared_data_dir(), clock), clock)
    node_process.run(config, [source], stop, lambda samples: samples)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    main(sys.argv[1])
