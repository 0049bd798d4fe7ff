"""The MIG GPU instance profiles each MIG-capable NVIDIA model offers, and the smallest that holds a job's memory.

Source: NVIDIA Multi-Instance GPU User Guide, "Supported MIG Profiles"
(https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html): the profile tables of the
A30-24GB, A100-SXM4-40GB ("for A100-SXM4-80GB, the profile names will change according to the memory proportion"),
H100, H200 and B200; memory sizes from its "Supported GPUs" table. The media-extension variants (``+me``) hold the
same compute and memory as their base profile and are not listed. ``1g.10gb`` on an A100 40GB is the
``all-1g.10gb`` layout of NVIDIA's mig-parted default configuration for "A100-40GB". A profile is named
``<compute slices>g.<memory GB>gb``; its memory is the number in its name, read as GiB as NVIDIA's "GB" of HBM are
(``nvidia-smi mig -lgip`` shows 9.75 GiB usable for ``1g.10gb`` on an H100 80GB).

A model is recognised by its product name as NVML reports it (``NVIDIA H100 80GB HBM3``, ``NVIDIA A100-SXM4-40GB``,
``NVIDIA H100 NVL``) or as NVIDIA GPU feature discovery labels it (``NVIDIA-H100-80GB-HBM3``); when the name does
not say which memory size of a family it is (``NVIDIA A100-PCIE``), the GPU's memory size decides.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GIB = 2**30
"""Bytes in a GiB."""


@dataclass(frozen=True, slots=True)
class MigModel:
    """One MIG-capable model: its ``memory_gib`` (the user guide's memory size) and its ``profiles``, smallest first
    (fewest compute slices, then least memory)."""

    name: str
    memory_gib: int
    profiles: tuple[str, ...]


A30 = MigModel("A30 24GB", 24, ("1g.6gb", "2g.12gb", "4g.24gb"))
A100_40GB = MigModel("A100 40GB", 40, ("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"))
A100_80GB = MigModel("A100 80GB", 80, ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"))
H100_80GB = MigModel("H100 80GB", 80, ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"))
H100_94GB = MigModel("H100 94GB", 94, ("1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"))
H200 = MigModel("H200 141GB", 141, ("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"))
B200 = MigModel("B200 180GB", 180, ("1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"))

# (pattern on the upper-cased product name with "-" and "_" as spaces, the models it may be), first match wins;
# several models: the one whose memory size is nearest the GPU's.
_MODELS: tuple[tuple[re.Pattern[str], tuple[MigModel, ...]], ...] = (
    (re.compile(r"\bA30\b"), (A30,)),
    (re.compile(r"\bA100\b.*\b80 ?GB\b"), (A100_80GB,)),
    (re.compile(r"\bA100\b.*\b40 ?GB\b"), (A100_40GB,)),
    (re.compile(r"\bA100\b"), (A100_40GB, A100_80GB)),
    (re.compile(r"\bH100\b.*\b(?:NVL|94 ?GB)\b"), (H100_94GB,)),
    (re.compile(r"\bH100\b.*\b80 ?GB\b"), (H100_80GB,)),
    (re.compile(r"\bH100\b"), (H100_80GB, H100_94GB)),
    (re.compile(r"\bH200\b"), (H200,)),
    (re.compile(r"\bB200\b"), (B200,)),
)


def mig_model(model: str | None, memory_total_bytes: int | None = None) -> MigModel | None:
    """The MIG profiles of GPU ``model`` (its product name), or None for a model that is unknown here or not
    MIG-capable. ``memory_total_bytes`` (NVML's total memory) picks between the memory sizes of a family whose name
    does not say it (an A100 or H100 without its size); without it the first, smaller, size is taken."""
    if not model:
        return None
    name = model.replace("-", " ").replace("_", " ").upper()
    for pattern, candidates in _MODELS:
        if pattern.search(name):
            if memory_total_bytes is None or len(candidates) == 1:
                return candidates[0]
            return min(candidates, key=lambda c: abs(c.memory_gib * GIB - memory_total_bytes))
    return None


def profile_memory_gib(profile: str) -> int:
    """The memory of ``profile`` in GiB, from its name (``"3g.40gb"`` -> 40). ValueError for another name."""
    found = re.fullmatch(r"[1-9][0-9]?g\.([1-9][0-9]*)gb", profile)
    if found is None:
        raise ValueError(f"{profile!r} is not a MIG profile such as 1g.10gb")
    return int(found.group(1))


def smallest_profile(model: str | None, peak_memory_bytes: int, memory_total_bytes: int | None = None) -> str | None:
    """The smallest MIG profile of ``model`` (fewest compute slices, then least memory) whose memory holds
    ``peak_memory_bytes``: ``smallest_profile("NVIDIA H100 80GB HBM3", 6 * GIB) == "1g.10gb"``; None when the
    model has no MIG profiles here or none holds that much."""
    found = mig_model(model, memory_total_bytes)
    if found is None:
        return None
    for profile in found.profiles:
        if peak_memory_bytes <= profile_memory_gib(profile) * GIB:
            return profile
    return None
