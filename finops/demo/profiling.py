"""The hardware activity of the demo's GPUs: workload profiles DERIVED from real DCGM profiling captures.

The captures (``dcgm-profiling-captures`` in the shared data folder: dcgm-exporter ``/metrics`` text from public
documentation, Apache-2.0) are read in place with ``prometheus_client``'s parser, as the dcgm source reads
dcgm-exporter (:mod:`collector.sources.dcgm`), their ``DCGM_FI_PROF_*`` fields mapped to the activity metrics by
:data:`collector.contract.dcgm_fields.FIELDS`; only the whole GPU's series are kept (a MIG instance's are left out).

Derivation of a profile (:func:`profile_from_capture`): each activity field of the busy capture divided by the
capture's utilisation (``DCGM_FI_DEV_GPU_UTIL`` / 100; a capture without it is taken as at full utilisation), so
that a demo reading gets ``its utilisation × that ratio`` (at most 1). The captures carry no
``DCGM_FI_PROF_SM_ACTIVE``: the SM activity is the graphics engine's (``GR_ENGINE_ACTIVE``), an upper bound, since
an SM is active only while the engine is. Fields a capture does not have (SM occupancy, the FP64/FP32/FP16 pipes)
stay null: not measured. Each job draws its own factor per field, uniform in 1 ± :data:`JITTER` (seeded).

The profiles (:data:`PROFILES`): **tensor-core training** from the A100 busy capture (engine 0.996, tensor 0.929,
DRAM 0.691) and **kernel-busy, inefficient** from the Tesla T4 busy capture (utilisation 91 % while the engine was
active 0.156, tensor 0.0058, DRAM 0.093). An idle GPU reads the idle capture's activity (the L4's: all 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from collector.contract import metric_names as m
from collector.contract.dcgm_fields import FIELDS

CAPTURES = "dcgm-profiling-captures"
"""The captures' folder in the shared data folder."""
JITTER = 0.1
"""Half-width of each job's factor on a profile's ratios: uniform in [1 - JITTER, 1 + JITTER]."""
ACTIVITY_METRICS = (
    m.GPU_SM_ACTIVE, m.GPU_SM_OCCUPANCY, m.GPU_TENSOR_ACTIVE, m.GPU_DRAM_ACTIVE, m.GPU_FP64_ACTIVE,
    m.GPU_FP32_ACTIVE, m.GPU_FP16_ACTIVE, m.GPU_GRAPHICS_ENGINE_ACTIVE,
)  # fmt: skip
"""The activity metrics, in the order of :data:`collector.contract.wire.ACTIVITY_COLUMNS`."""
IDLE_CAPTURE = "kops-nvidia-l4-idle.prom"
PROFILES: tuple[tuple[str, str, str], ...] = (
    ("tensor-core training", "nvidia-docs-a100-mig-busy.prom", "A100, whole GPU"),
    ("kernel-busy, inefficient", "ericsson-ccd-tesla-t4-busy.prom", "Tesla T4"),
)
"""(profile name, its busy capture's file name, the GPU it was taken on as the folder's SOURCE.md names it), in the
order jobs draw them."""


@dataclass(frozen=True, slots=True)
class WorkloadProfile:
    """What a busy GPU's profiling counters read per unit of utilisation: activity metric → ratio (0..1); the
    metrics the capture lacks are absent. ``capture`` names the file and GPU the ratios came from."""

    name: str
    ratios: dict[str, float]
    capture: str


def capture_values(path: Path) -> dict[str, float]:
    """The first whole GPU's values (metric name → base-unit value) in a dcgm-exporter capture, its
    activity as measured plus the SM activity bounded by the engine's (module docstring).

    Lines that are not Prometheus text (the documentation's markup around the capture) are skipped. ValueError
    naming the file when it holds no whole-GPU DCGM series."""
    values: dict[str, float] = {}
    gpu = None
    for line in path.read_text().splitlines():
        if not line.startswith("DCGM_FI_"):
            continue
        try:
            families = list(text_string_to_metric_families(line + "\n"))
        except ValueError:
            continue
        for family in families:
            for sample in family.samples:
                labels = sample.labels
                if labels.get("GPU_I_ID") or (gpu is not None and labels.get("UUID") != gpu):
                    continue
                gpu = labels.get("UUID")
                field = FIELDS.get(family.name)
                if field is not None:
                    values[field.metric] = sample.value * field.scale
    if gpu is None:
        raise ValueError(f"{path}: no DCGM series of a whole GPU")
    engine = values.get(m.GPU_GRAPHICS_ENGINE_ACTIVE)
    if engine is not None and m.GPU_SM_ACTIVE not in values:
        values[m.GPU_SM_ACTIVE] = engine
    return values


def profile_from_capture(name: str, path: Path, gpu: str) -> WorkloadProfile:
    """The profile ``name`` from the busy capture at ``path``, taken on ``gpu`` (module docstring: activity ÷
    utilisation). ValueError naming the file when it has no whole GPU or no activity field."""
    values = capture_values(path)
    utilization = values.get(m.GPU_UTILIZATION, 1.0) or 1.0
    ratios = {metric: min(1.0, values[metric] / utilization) for metric in ACTIVITY_METRICS if metric in values}
    if not ratios:
        raise ValueError(f"{path}: no DCGM_FI_PROF_* activity field")
    return WorkloadProfile(name, ratios, f"{path.name} ({gpu})")


def idle_activity(path: Path) -> dict[str, float]:
    """The activity an idle GPU reads: the idle capture's activity fields (metric → ratio)."""
    values = capture_values(path)
    return {metric: values[metric] for metric in ACTIVITY_METRICS if metric in values}


def load_profiles(shared_data: Path) -> tuple[tuple[WorkloadProfile, ...], dict[str, float]]:
    """The :data:`PROFILES` and the idle activity from the captures under ``shared_data``; ``((), {})`` when the
    captures' folder is missing (every reading then carries no activity: not measured). ValueError naming a file
    that is missing or unreadable in a folder that exists."""
    folder = shared_data / CAPTURES
    if not folder.is_dir():
        return (), {}
    profiles = tuple(profile_from_capture(name, folder / capture, gpu) for name, capture, gpu in PROFILES)
    return profiles, idle_activity(folder / IDLE_CAPTURE)


def job_activity(profile: WorkloadProfile, utilization: float, factors: dict[str, float]) -> dict[str, float]:
    """A busy reading's activity under ``profile`` at ``utilization`` (0..1), each ratio times the job's factor of
    its metric (1 when absent), at most 1."""
    return {
        metric: min(1.0, ratio * utilization * factors.get(metric, 1.0)) for metric, ratio in profile.ratios.items()
    }
