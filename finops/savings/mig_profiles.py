"""The MIG slice that holds a job: the smallest MIG profile of its GPU's catalog model whose memory holds the job's
memory peak with headroom. Right-sizing (:mod:`finops.savings.rightsizing`) and the ``mig-candidate`` and
``low-gpu-efficiency`` nudges (:mod:`finops.savings.nudges`) both propose slices by this one rule.

The profiles and their memory are the price catalog's (``mig.profiles`` per model in ``price_catalog.yaml``,
:class:`finops.pricing.catalog.MigProfiles`, from the NVIDIA MIG user guide's "Supported MIG Profiles" tables; a
profile's memory is the number in its name, read as GiB). A GPU whose model the catalog lacks, or lists without
``mig``, gets no slice: add the model (with its ``memory`` and ``mig``) to the catalog to have its jobs judged.

The rule: the memory peak (bytes) times :data:`MEMORY_HEADROOM` (1.2, unless the caller's policy says otherwise:
readings every 10-60 s miss short peaks, so a 20 % margin) must fit the profile's memory. Of the profiles that hold
it, the one with the smallest share of the GPU is taken, then the least memory: the share is the profile's compute
slices over the GPU's (:func:`finops.jobs.mig.mig_share`, as the ledger bills a slice: ``1g.10gb`` on an H100 is
1/7). A profile that is the whole GPU (share 1, ``7g.80gb``) saves nothing and is never proposed; a profile whose
share is unknown (a model whose compute slices are not known) is passed over, with a note saying so.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from finops.jobs.mig import mig_share
from finops.pricing.catalog import GIB, GpuModel, MigProfiles

MEMORY_HEADROOM = Decimal("1.2")
"""What a memory peak is multiplied by before it is compared with a profile's memory (module docstring)."""


@dataclass(frozen=True, slots=True)
class MigFit:
    """A MIG profile that holds a job: its name (``1g.10gb``), its ``share`` of the GPU (compute slices over the
    GPU's, below 1) and its ``memory_gib``."""

    profile: str
    share: Fraction
    memory_gib: int


def smallest_profile(
    model: GpuModel | None,
    gpu_name: str,
    peak_memory_bytes: int,
    headroom: Decimal = MEMORY_HEADROOM,
    notes: list[str] | None = None,
) -> MigFit | None:
    """The smallest MIG profile of catalog ``model`` (the catalog entry of the GPU named ``gpu_name``, as NVML
    reports it) whose memory holds ``peak_memory_bytes`` × ``headroom`` (module docstring): on an H100 80GB, a peak
    of 6 GiB (7.2 GiB needed) fits ``1g.10gb`` at 1/7 of the GPU, one of 10 GiB (12 GiB needed) ``1g.20gb``.

    None when ``model`` is None, has no ``mig`` profiles, or none of them but the whole GPU holds the peak. A profile
    passed over because its share is unknown is said in ``notes`` (when given). ValueError for a ``headroom``
    below 1."""
    if not headroom.is_finite() or headroom < 1:
        raise ValueError(f"memory headroom must be at least 1, not {headroom}")
    if model is None or model.mig is None:
        return None
    need = Decimal(peak_memory_bytes) * headroom
    fits = []
    for profile in model.mig.profiles:
        memory = MigProfiles.memory_gib(profile)
        if memory * GIB < need:
            continue
        try:
            fits.append(MigFit(profile, mig_share(profile, gpu_name), memory))
        except ValueError as exc:
            if notes is not None:
                notes.append(f"MIG profile {profile}: {exc}")
    best = min(fits, key=lambda fit: (fit.share, fit.memory_gib, fit.profile), default=None)
    return best if best is not None and best.share < 1 else None
