"""Nodes for collector tests and benchmarks.

- :func:`eight_h100_nvml`: 8 GPUs from the real H100 capture. DERIVED: the capture holds one H100; the node's 8
  GPUs are that GPU's ``load`` row repeated, each given its own index and a UUID made by replacing the capture's
  (masked) UUID's last digits with the index.
- :func:`fixture_node_registry`: the hand-written fixture node of ``tests/fixtures/node`` (invented values).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pynvml
from prometheus_client import CollectorRegistry

from collector.agent import Agent
from collector.contract.sample import Sample, Source
from collector.delivery import Delivery
from collector.exposition import DeliveryStats, LatestSamples
from collector.node import NodeConfig, build_source
from collector.shipper import Shipper
from collector.sources.nvml import NvmlSource
from collector.spool import Spool
from tests.support.fake_pynvml import CAPTURES, FakeNvml, ManualClock, query_gpu_rows

FIXTURE_NODE = Path(__file__).parents[1] / "fixtures" / "node"
FILE_SOURCES = ("infiniband", "diskstats", "nfs", "lustre")
H100_CAPTURE = "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
GPUS = 8


def eight_h100_rows(shared_data: Path) -> list[dict[str, str]]:
    """The capture's H100 ``load`` query-gpu row, 8 times with indices 0..7 and distinct UUIDs."""
    (row,) = query_gpu_rows(shared_data / CAPTURES / H100_CAPTURE, "load")
    return [{**row, "index": str(i), "uuid": f"{row['uuid'][:-12]}{i:012d}"} for i in range(GPUS)]


def eight_h100_nvml(shared_data: Path, clock: Callable[[], datetime]) -> FakeNvml:
    """A fake ``pynvml`` with the 8 GPUs of :func:`eight_h100_rows`, on ``clock``."""
    return FakeNvml(eight_h100_rows(shared_data), clock)


def _job_4242_on_gpu_0(samples: list[Sample]) -> list[Sample]:
    """Stands in for the job map: Slurm job 4242 holds GPU 0."""
    return [replace(s, job_id="4242") if s.entity == "gpu" and s.labels["gpu"] == "0" else s for s in samples]


def fixture_node_registry(spool_parent: Path) -> CollectorRegistry:
    """The fixture node's ``/metrics`` registry after two collections: 3 GPUs (GPU 2 lost at the second), IB,
    disks, NFS, Lustre, the job map's job on GPU 0, and the delivery counters (spool under ``spool_parent``)."""
    clock = ManualClock()
    config = NodeConfig("http://127.0.0.1:9", "", "fixture", spool_parent / "spool", proc_root=FIXTURE_NODE / "proc",
                        sys_root=FIXTURE_NODE / "sys")  # fmt: skip
    nvml = FakeNvml(query_gpu_rows(FIXTURE_NODE / "nvidia-smi.txt", "load"), clock)
    sources: list[Source] = [NvmlSource(nvml, clock), *(build_source(name, config) for name in FILE_SOURCES)]
    latest = LatestSamples()
    delivery = Delivery(Spool(config.spool_dir), Shipper(config.service_url, "", config.node))
    agent = Agent(sources, latest, delivery.enqueue, annotate=_job_4242_on_gpu_0)
    agent.collect_once()
    nvml.gpu_errors[2] = pynvml.NVML_ERROR_GPU_IS_LOST
    agent.collect_once()
    registry = CollectorRegistry()
    registry.register(latest)
    registry.register(DeliveryStats(delivery))
    return registry
