"""The share of a physical GPU that a MIG (Multi-Instance GPU) instance holds.

A MIG GPU instance profile is named ``<g>g.<m>gb`` (NVIDIA MIG user guide, "Supported MIG Profiles"): ``g``
compute slices and ``m`` GB of memory, optionally with a media-extension suffix (``1g.10gb+me``). The
Kubernetes device plugin with ``--mig-strategy=mixed`` exposes each profile as the extended resource
``nvidia.com/mig-<profile>`` with ``+`` written as ``.`` (``nvidia.com/mig-1g.10gb.me``); Slurm names MIG GRES
types by the same profile (``gres/gpu:3g.40gb``).

An instance holds ``g`` of its GPU's compute slices, so its share of the physical GPU is ``g / slices``, where
``slices`` is the GPU's number of compute slices from the user guide's profile tables ("Fraction of SMs"):
7 on A100, H100, H20, H200, GH200, B200 and GB200 (``1g.10gb`` on an H100 is 1/7, ``3g.40gb`` 3/7, ``7g.80gb``
7/7), 4 on A30 and RTX PRO 6000 Blackwell, 2 on RTX PRO 5000 Blackwell. The share follows compute slices, not
memory: ``1g.20gb`` on an H100 is 1/7 although it holds 2/8 of the memory.
"""

from __future__ import annotations

import re
from fractions import Fraction

_PROFILE_RE = re.compile(r"([1-9][0-9]?)g\.([0-9]+)gb(?:[+.\-][a-z][a-z.]*)?")

# (pattern on the GPU's product name, compute slices), first match wins. NVML names the product
# "NVIDIA H100 80GB HBM3"; NVIDIA GPU feature discovery labels it "NVIDIA-H100-80GB-HBM3".
_SLICES_BY_MODEL: tuple[tuple[re.Pattern[str], int], ...] = (
    (re.compile(r"\bA30\b"), 4),
    (re.compile(r"\bRTX PRO 6000\b"), 4),
    (re.compile(r"\bRTX PRO 5000\b"), 2),
    (re.compile(r"\b(?:A100|H100|H20|H200|GH200|B200|GB200)\b"), 7),
)

# GPU instance profiles of the user guide's tables, for a GPU whose model is not known yet. Only names that
# belong to GPUs of one slice count are listed (``1g.24gb`` exists on both a 7-slice H100 94GB and the 4-slice
# RTX PRO 6000, so it is not).
_SLICES_BY_PROFILE: dict[str, int] = {
    # A100 40GB, A100 80GB / H100 80GB, H100 94GB, H200 141GB, B200 180GB: 7 compute slices.
    **dict.fromkeys(("1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"), 7),
    **dict.fromkeys(("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"), 7),
    **dict.fromkeys(("1g.12gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"), 7),
    **dict.fromkeys(("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"), 7),
    **dict.fromkeys(("1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"), 7),
    # A30 24GB: 4 compute slices.
    **dict.fromkeys(("1g.6gb", "2g.12gb", "4g.24gb"), 4),
}


def parse_profile(text: str) -> tuple[int, str]:
    """``(compute slices, base profile)`` of a MIG GPU instance profile as Kubernetes or Slurm name it:
    ``"3g.40gb"`` -> ``(3, "3g.40gb")``, ``"1g.10gb.me"`` or ``"1g.10gb+me"`` -> ``(1, "1g.10gb")``.

    Raises ValueError for anything else (compute-instance profiles such as ``1c.3g.40gb`` included: the
    device plugin does not expose them as resources).
    """
    match = _PROFILE_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a MIG profile such as 1g.10gb or 3g.40gb")
    return int(match.group(1)), f"{match.group(1)}g.{match.group(2)}gb"


def gpu_slices(model: str | None) -> int | None:
    """Compute slices of a MIG-capable GPU model (``"NVIDIA H100 80GB HBM3"`` -> 7, ``"NVIDIA-A30"`` -> 4), or
    None for a model that is unknown or not MIG-capable."""
    if not model:
        return None
    name = model.replace("-", " ").replace("_", " ").upper()
    for pattern, slices in _SLICES_BY_MODEL:
        if pattern.search(name):
            return slices
    return None


def mig_share(profile: str, model: str | None) -> Fraction:
    """The fraction of the physical GPU a ``profile`` instance holds on a GPU of ``model`` (None: unknown).

    The GPU's slice count comes from its model, else (a model missing from the table, or not known yet) from
    the profile's name when only GPUs of one slice count have it: ``mig_share("1g.10gb", "NVIDIA H100 80GB
    HBM3") == Fraction(1, 7)``, ``mig_share("2g.12gb", None) == Fraction(1, 2)`` (A30).

    Raises ValueError for a name that is not a profile, a profile with more slices than the GPU has, or a
    model-less profile whose slice count is ambiguous or unknown.
    """
    compute, base = parse_profile(profile)
    slices = gpu_slices(model)
    if slices is None:
        slices = _SLICES_BY_PROFILE.get(base)
        if slices is None:
            known = f"GPU model {model!r}" if model else "an unknown GPU model"
            raise ValueError(f"MIG profile {profile!r} on {known}: the GPU's number of compute slices is unknown")
    if compute > slices:
        raise ValueError(f"MIG profile {profile!r} has {compute} compute slices; GPU model {model!r} has {slices}")
    return Fraction(compute, slices)


_GRES_TYPE_RE = re.compile(r"(?:^|_)([1-9][0-9]?g\.[0-9]+gb(?:[+.][a-z][a-z.]*)?)$")


def gres_mig_type(gres_type: str | None) -> tuple[str, str] | None:
    """(board type, MIG profile) of a Slurm GRES type that names a MIG profile: ``3g.40gb`` -> ("", "3g.40gb"),
    ``a100_1g.5gb`` -> ("a100", "1g.5gb"); None for a whole-GPU type (``a100``) or no type (gres.conf ``Type=``,
    profiles as the NVIDIA MIG user guide names them)."""
    match = _GRES_TYPE_RE.search(gres_type or "")
    if match is None:
        return None
    return (gres_type or "")[: match.start()], match.group(1)
