"""The collector process on one node: sources, job map, ``/metrics``, spool and sender, wired together.

``gpu-finops collector`` builds a :class:`NodeConfig` from its options and calls :func:`run`. Two threads: the
agent reads the sources every interval and spools the readings; the sender drains the spool to the service.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, start_http_server

from collector.agent import Agent, Annotate
from collector.contract.sample import Closable, Source
from collector.delivery import Delivery
from collector.exposition import DeliveryStats, LatestSamples
from collector.jobmap.mapper import JobMapper
from collector.shipper import Shipper
from collector.spool import Spool

log = logging.getLogger(__name__)

SOURCE_NAMES = ("nvml", "amdsmi", "nvidia_smi", "dcgm", "infiniband", "diskstats", "nfs", "lustre", "replay")
"""Every source ``--source`` accepts, each a module of :mod:`collector.sources`."""


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """Everything the collector process needs.

    Attributes:
        service_url: base URL of the gpu-finops service (``http://`` or ``https://``).
        token: ingest bearer token.
        token_file: the file ``token`` was read from, re-read when it changes (:class:`collector.shipper.Shipper`);
            None: the token came from the environment.
        ca_file: PEM CA bundle an https:// service's certificate is verified against; None: the system's trust
            store.
        node: this host's name as Slurm's NodeList spells it.
        spool_dir: the durable queue's directory; ``spool_max_bytes`` bounds it.
        interval_seconds: time between collections.
        metrics_address / metrics_port: where ``/metrics`` listens; port None serves none.
        proc_root / sys_root: procfs and sysfs mount points (``/proc``, ``/sys``; a container mounts the host's
            elsewhere).
        dcgm_url: the dcgm-exporter sidecar's ``/metrics``.
        nvidia_smi: the ``nvidia-smi`` command for the fallback source.
        job_mapping_dir: the Slurm prolog's GPU → job directory, None for none.
        replay_file: the nvidia-smi capture the ``replay`` source plays (:mod:`collector.sources.replay`).
    """

    service_url: str
    token: str
    node: str
    spool_dir: Path
    spool_max_bytes: int = 256 * 2**20
    interval_seconds: float = 10.0
    metrics_address: str = "0.0.0.0"
    metrics_port: int | None = 9835
    proc_root: Path = Path("/proc")
    sys_root: Path = Path("/sys")
    dcgm_url: str = "http://127.0.0.1:9400/metrics"
    nvidia_smi: str = "nvidia-smi"
    job_mapping_dir: Path | None = None
    ca_file: Path | None = None
    token_file: Path | None = None
    replay_file: Path | None = None


def build_source(name: str, config: NodeConfig) -> Source:
    """The source called ``name`` (one of :data:`SOURCE_NAMES`), rooted where ``config`` says.

    Raises ValueError for an unknown name, for ``amdsmi`` without AMD SMI installed (the ``amd`` extra), and for
    ``replay`` without a readable capture in ``config.replay_file``.
    """
    if name == "nvml":
        from collector.sources.nvml import NvmlSource

        return NvmlSource()
    if name == "amdsmi":
        from collector.sources.amdsmi import AmdSmiSource

        return AmdSmiSource()
    if name == "nvidia_smi":
        from collector.sources.nvidia_smi import NvidiaSmiSource

        return NvidiaSmiSource(config.nvidia_smi, interval_seconds=config.interval_seconds)
    if name == "dcgm":
        from collector.sources.dcgm import DcgmSource

        return DcgmSource(config.dcgm_url)
    if name == "infiniband":
        from collector.sources.infiniband import InfinibandSource

        return InfinibandSource(config.sys_root)
    if name == "diskstats":
        from collector.sources.diskstats import DiskstatsSource

        return DiskstatsSource(config.proc_root, sys_root=config.sys_root)
    if name == "nfs":
        from collector.sources.nfs import NfsSource

        return NfsSource(config.proc_root / "self" / "mountstats")
    if name == "lustre":
        from collector.sources.lustre import LustreSource

        return LustreSource(config.proc_root)
    if name == "replay":
        from collector.sources.replay import ReplaySource, capture_steps, live

        if config.replay_file is None:
            raise ValueError("replay plays an nvidia-smi capture: give --replay-file (docs/collector.md)")
        return ReplaySource(live(capture_steps(config.replay_file)))
    raise ValueError(f"unknown source {name!r} (one of {', '.join(SOURCE_NAMES)})")


def run(config: NodeConfig, sources: Sequence[Source], stop: threading.Event, annotate: Annotate | None = None) -> None:
    """Serve ``/metrics``, start the sender thread and collect every interval until ``stop`` is set; then close the
    sources that hold resources (:class:`collector.contract.sample.Closable`) and, once the sender has stopped
    (within 5 s), the connections to the service.

    ``annotate`` maps GPUs to jobs; default: :class:`JobMapper` over ``config.job_mapping_dir`` and the
    processes' cgroups under ``config.proc_root``.
    """
    annotate = annotate or JobMapper(config.job_mapping_dir, config.proc_root).annotate
    latest = LatestSamples()
    delivery = Delivery(
        Spool(config.spool_dir, max_bytes=config.spool_max_bytes),
        Shipper(config.service_url, config.token, config.node, ca_file=config.ca_file, token_file=config.token_file),
    )
    if config.metrics_port is not None:
        registry = CollectorRegistry()
        registry.register(latest)
        registry.register(DeliveryStats(delivery))
        start_http_server(config.metrics_port, addr=config.metrics_address, registry=registry)
    sender = threading.Thread(target=delivery.run, args=(stop,), name="sender", daemon=True)
    sender.start()
    log.info(
        "collecting %s every %.0f s; spool %s (%d readings pending)",
        ", ".join(s.name for s in sources),
        config.interval_seconds,
        config.spool_dir,
        delivery.spool.pending_samples,
    )
    Agent(sources, latest, delivery.enqueue, config.interval_seconds, annotate).run(stop)
    for source in sources:
        if isinstance(source, Closable):
            source.close()
    sender.join(timeout=5)
    if not sender.is_alive():
        delivery.shipper.close()
