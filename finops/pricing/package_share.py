"""The share of a GPU package that a device shown as part of it is, as its name says, for pricing.

An AMD Instinct MI300X in DPX, QPX or CPX compute-partition mode shows as 2, 4 or 8 devices, an MI300-series GPU in
TPX mode as 3 (AMD Instinct "GPU partitioning" documentation: the XCDs split in equal partitions;
:mod:`collector.contract.partitions`), each a GPU to ROCm, amd-smi, Slurm's GRES and
the Kubernetes device plugin (``amd.com/gpu``). The price catalogue prices the whole MI300X, so a partition is named
``<product name> (<MODE> partition 1/<n>)`` (:func:`collector.contract.partitions.partition_name`, written by the
amdsmi collector source and by the pull; ``AMD Instinct MI300X OAM (CPX partition 1/8)``) and priced at ``1 / n``
of the product's rate (:func:`package_share`). The name still matches the product's catalogue row
(``\\bMI300X\\b``), and says in every report what the device is.

An MI250X's two GCDs need no share: the catalogue prices the MI250X per GCD (its row's description), as ROCm and
Slurm count it (``gres gpu:mi250x:8`` for four modules). SPX mode (one partition) is the whole GPU.
"""

from __future__ import annotations

import re
from fractions import Fraction

from collector.contract.partitions import PARTITIONED_MODES, partition_name

__all__ = ["package_share", "partition_name"]

_SHARE = re.compile(r"\((?:" + "|".join(PARTITIONED_MODES).upper() + r") partition 1/([1-9][0-9]?)\)\s*$")


def package_share(gpu_name: str) -> Fraction:
    """The share of its package a GPU named ``gpu_name`` is: ``1/n`` for a :func:`partition_name`, else 1."""
    match = _SHARE.search(gpu_name)
    return Fraction(1, int(match.group(1))) if match else Fraction(1)
