"""AMD Instinct compute partitions named by a Slurm GRES type, for nodes no collector reports.

An MI300-series GPU in DPX, TPX, QPX or CPX compute-partition mode shows as 2, 3, 4 or 8 GPUs to ROCm and to Slurm (a
node of eight MI300X in CPX mode has ``Gres=gpu:mi300x:64``): each is a share of its package, and the ledger must bill
it as one (:mod:`finops.pricing.package_share`), not as a whole MI300X. Slurm's GRES does not say the mode, so the site
says it:

- in the GRES type, a suffix ``_<mode>`` or ``-<mode>`` (any case) after the board's type, as gres.conf names it
  (``Name=gpu Type=mi300x_cpx File=/dev/dri/renderD[128-191]``, so ``Gres=gpu:mi300x_cpx:64``; a job's AllocTRES
  then says ``gres/gpu:mi300x_cpx=2``);
- or, where the type is fixed (gres.conf ``AutoDetect``), by ``gpu-finops nodes import --compute-partition
  mi300x=cpx``, which reads the type ``mi300x`` as ``mi300x_cpx`` in that import (:func:`with_modes`).

A type so suffixed names the GPUs ``<board model> (<MODE> partition 1/<n>)``
(:func:`collector.contract.partitions.partition_name`), the name the amdsmi collector and the Prometheus pull give
a partition, priced at ``1 / n`` of the board's rate. ``spx`` (one partition) is the whole GPU and needs no suffix.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from collector.contract.partitions import PARTITIONS_PER_MODE, partition_name

_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
"""A GRES type as :func:`finops.jobs.inventory.parse_node_line` reads one."""
_SUFFIX = re.compile(r"[_-](" + "|".join(PARTITIONS_PER_MODE) + r")$", re.IGNORECASE)


def gres_partition(gres_type: str | None) -> tuple[str, str] | None:
    """(board type, mode in lower case) of a GRES type naming a compute partition mode: ``mi300x_cpx`` ->
    ("mi300x", "cpx"); None for any other type (``mi300x``, ``a100_1g.5gb``) or none."""
    match = _SUFFIX.search(gres_type or "")
    if match is None or match.start() == 0:
        return None
    return (gres_type or "")[: match.start()], match.group(1).lower()


def gres_gpu_name(gres_type: str) -> str:
    """The GPU name a GRES type gives a GPU without a model: for a partition type, the board type's partition
    (``mi300x_cpx`` -> ``mi300x (CPX partition 1/8)``, which the price catalog resolves and prices at 1/8); the
    type itself otherwise."""
    partition = gres_partition(gres_type)
    return gres_type if partition is None else partition_name(*partition)


def parse_modes(assignments: Iterable[str]) -> dict[str, str]:
    """``TYPE=MODE`` texts (``mi300x=cpx``) as GRES type (lower case) -> mode (lower case); ValueError naming a text
    that is not one, or whose mode is not a partitioned one (:data:`~collector.contract.partitions.
    PARTITIONS_PER_MODE`)."""
    modes = {}
    for text in assignments:
        gres_type, sep, mode = text.partition("=")
        if not sep or not _TYPE.fullmatch(gres_type) or mode.lower() not in PARTITIONS_PER_MODE:
            raise ValueError(
                f"{text!r}: expected GRES_TYPE=MODE with MODE one of {', '.join(PARTITIONS_PER_MODE)} (mi300x=cpx)"
            )
        modes[gres_type.lower()] = mode.lower()
    return modes


def with_modes(gpus: Iterable[tuple[str | None, int]], modes: Mapping[str, str]) -> tuple[tuple[str | None, int], ...]:
    """A node's ``gpu`` GRES items (type or None, count) with each type of ``modes`` (:func:`parse_modes`) given its
    mode's suffix (``mi300x`` -> ``mi300x_cpx``); other items as they are."""
    return tuple(
        (f"{gres_type}_{modes[gres_type.lower()]}" if gres_type and gres_type.lower() in modes else gres_type, count)
        for gres_type, count in gpus
    )
