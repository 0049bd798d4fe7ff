"""A node's fabric and storage throughput as a collector sends it: the ``node_io`` part of an ingest batch.

Each entry is one collector cycle: its instant (``ts``, integer epoch seconds, UTC) and, per kind, the node's rate in
bytes per second over the interval since the previous cycle, summed over its InfiniBand ports, NFS mounts, Lustre
file systems (the client's llite counters) and whole disks::

    {"ts": 1795244410, "infiniband_received_bytes_per_second": 2.4e9, "lustre_read_bytes_per_second": 2.1e9}

A kind the node has no device of (no InfiniBand, no Lustre mount) is absent (null), never 0. The rates are
computed by the collector from the byte counters it already reads for ``/metrics``
(:data:`NODE_IO_COUNTERS`; :class:`collector.node_io.NodeIoRates`), validated by
:class:`collector.contract.wire.NodeIo`, and stored by the service per node and hour
(:mod:`finops.ingest.node_io`), where the waste reasons read them (:mod:`finops.analysis.waste`).
"""

from __future__ import annotations

from collector.contract import metric_names as m

MAX_NODE_IO_BYTES_PER_SECOND = 1e13
"""Highest rate of one kind a node may report, bytes per second (10 TB/s): above twelve times the densest node's
InfiniBand today (8 ports of 800 Gb/s, 0.8 TB/s per direction) or its local NVMe (16 drives of ~14 GB/s, 0.22 TB/s);
a rate above it is a counter misread (a total since boot taken as one interval's growth), refused by the service and
left out by the collector."""

NODE_IO_COUNTERS: dict[str, tuple[str, str]] = {
    "infiniband_received": ("ib_port", m.INFINIBAND_RECEIVED_BYTES),
    "infiniband_transmitted": ("ib_port", m.INFINIBAND_TRANSMITTED_BYTES),
    "nfs_read": ("nfs_mount", m.NFS_READ_BYTES),
    "nfs_written": ("nfs_mount", m.NFS_WRITTEN_BYTES),
    "lustre_read": ("lustre_client", m.LUSTRE_CLIENT_READ_BYTES),
    "lustre_written": ("lustre_client", m.LUSTRE_CLIENT_WRITTEN_BYTES),
    "disk_read": ("disk", m.DISK_READ_BYTES),
    "disk_written": ("disk", m.DISK_WRITTEN_BYTES),
}
"""Kind → (the :class:`~collector.contract.sample.Sample` entity, its byte counter) whose growth the kind's rate is.
Lustre's per-job server counters (``lustre_job``, read on the servers) are not a node's traffic and are left out."""

RATE_SUFFIX = "_bytes_per_second"


def rate_field(kind: str) -> str:
    """The ``node_io`` entry's field of ``kind`` (``lustre_read`` → ``lustre_read_bytes_per_second``)."""
    return kind + RATE_SUFFIX
