"""AMD Instinct packages shown as several devices, as the collector and the service both describe them.

An MI300-series GPU in a partitioned compute mode shows as several devices, equal groups of its XCDs (AMD SMI
documentation, "GPU partitioning"; AMD Instinct "GPU partitioning" guides): DPX 2, TPX (triple) 3, QPX 4, and CPX one
per XCD, 8 on an MI300X, MI325X or MI355X (8 XCDs) and 6 on an MI300A (6 XCDs, whose modes are SPX, TPX and CPX).
Each device is named ``<product name> (<MODE> partition 1/<n>)`` (:func:`partition_name`), which the service prices at
``1 / n`` of the product's rate (:mod:`finops.pricing.package_share`).

What AMD reports once per package rather than per device (:data:`PARTITION_PACKAGE_FIELDS`,
:data:`DIE_PACKAGE_FIELDS`) is marked on the device that reports it (:class:`collector.contract.sample.Package`) by
the amdsmi source and by the service's Prometheus pull, and split over the package's devices at ingest
(:mod:`finops.ingest.package_split`).
"""

from __future__ import annotations

import re

from collector.contract import metric_names as m

PARTITIONS_PER_MODE = {"dpx": 2, "tpx": 3, "qpx": 4, "cpx": 8}
"""Compute partitions per mode (amd-smi's compute partition modes, ``gpu_compute_partition_type``, lower case) of a
GPU with 8 XCDs; CPX is one per XCD (:func:`partitions`)."""
PARTITIONED_MODES = frozenset(PARTITIONS_PER_MODE)
"""The modes that show one GPU as several devices (``spx`` and ``none``: one)."""
_SIX_XCDS = re.compile(r"\bMI300A\b", re.IGNORECASE)
"""Products with 6 XCDs, so 6 partitions in CPX mode."""
_TWO_DIES = re.compile(r"\bMI250X?\b", re.IGNORECASE)
"""Products of two dies, each a device (GCD): the MI250X and MI250."""

PARTITION_PACKAGE_FIELDS = ("utilization_ratio", "memory_utilization_ratio", "power_watts", "energy_joules")
"""What an MI300-series GPU in a partitioned mode reports on partition 0 only, for the whole GPU: activity (GFX, UMC),
socket power and the energy counter (wire field names, :data:`collector.contract.wire.PACKAGE_FIELDS`)."""
DIE_PACKAGE_FIELDS = ("power_watts", "energy_joules")
"""What a two-die package (MI250X, MI250) reports on its primary die only: socket power and energy (Linux amdgpu,
aldebaran_ppt.c: "Valid power data is available only from primary die"; the secondary die reads 0, or N/A in ROCm
6.0.2 and later)."""
PACKAGE_FIELD_METRICS = {
    "utilization_ratio": m.GPU_UTILIZATION,
    "memory_utilization_ratio": m.GPU_MEMORY_UTILIZATION,
    "power_watts": m.GPU_POWER,
    "energy_joules": m.GPU_ENERGY,
}
"""The metric (:mod:`collector.contract.metric_names`) of each wire field of :data:`PARTITION_PACKAGE_FIELDS` and
:data:`DIE_PACKAGE_FIELDS`."""


def partitions(product: str, mode: str) -> int | None:
    """How many devices ``product`` shows in compute partition ``mode`` (any case): :data:`PARTITIONS_PER_MODE`, CPX
    6 on an MI300A; None for a mode that is not partitioned (``spx``, ``none``, '')."""
    devices = PARTITIONS_PER_MODE.get(mode.lower())
    return 6 if mode.lower() == "cpx" and _SIX_XCDS.search(product) else devices


def package_devices(product: str, mode: str) -> int | None:
    """How many devices one package of ``product`` in compute partition ``mode`` shows, as its make fixes it:
    :func:`partitions` in a partitioned mode, 2 for a two-die product (MI250X, MI250); None otherwise (one device, or
    a product whose make is not known here). A count that holds whatever readings a window has: a device missing
    from it does not change the others' shares."""
    return partitions(product, mode) or (2 if _TWO_DIES.search(product) else None)


def partition_name(product: str, mode: str) -> str:
    """The GPU name of one compute partition of ``product`` in ``mode`` (``cpx`` …, any case):
    ``partition_name("AMD Instinct MI300X OAM", "cpx") == "AMD Instinct MI300X OAM (CPX partition 1/8)"``,
    ``partition_name("AMD Instinct MI300A", "tpx") == "AMD Instinct MI300A (TPX partition 1/3)"``; ``product``
    itself for a mode that is not partitioned (``spx``, ``none``, '')."""
    devices = partitions(product, mode)
    return f"{product} ({mode.upper()} partition 1/{devices})" if devices else product
