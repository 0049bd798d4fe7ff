"""Efficiency bands: how well a job or a team used the SMs of the GPUs it held, from the ledger's SM activity
(``DCGM_FI_PROF_SM_ACTIVE``, NVML GPM ``SM_UTIL``), and the thresholds of the "busy but inefficient" jobs and their
bottleneck rules (:mod:`finops.savings.bottlenecks`).

NVIDIA's guidance, DCGM user guide, "Feature Overview" → "Profiling Metrics", the SM Activity row
(https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/feature-overview.html#profiling-metrics): a value of 0.8
or greater is "necessary, but not sufficient, for effective use of the GPU"; a value less than 0.5 "likely indicates
ineffective GPU usage". Hence the bands of :func:`band`:

- ``effective``: SM activity ≥ :attr:`EfficiencyPolicy.effective_ratio` (0.8);
- ``moderate``: from :attr:`EfficiencyPolicy.ineffective_ratio` (0.5) up to the effective ratio;
- ``ineffective``: below the ineffective ratio;
- ``not measured``: no SM activity (no reading of the GPU-hours carried a profiling field): unknown, never 0.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from finops.analysis.waste import ReasonPolicy

EFFECTIVE = "effective"
MODERATE = "moderate"
INEFFECTIVE = "ineffective"
NOT_MEASURED = "not measured"
BANDS: tuple[str, ...] = (EFFECTIVE, MODERATE, INEFFECTIVE, NOT_MEASURED)
"""The bands, best first; ``not measured`` last."""
DCGM_PROFILING_METRICS = (
    "https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/feature-overview.html#profiling-metrics"
)
"""NVIDIA's DCGM user guide, the profiling metrics and their interpretation (the bands' source)."""

_REASONS = ReasonPolicy()


@dataclass(frozen=True, slots=True)
class EfficiencyPolicy:
    """The thresholds of the bands and of the bottleneck rules; ratios are 0..1, rates bytes per second.

    Bands (module docstring): ``effective_ratio`` (0.8) and ``ineffective_ratio`` (0.5), DCGM's guidance.
    Busy but inefficient: mean utilisation (kernel-busy time) ≥ ``busy_utilization_ratio`` (0.8) with SM activity
    below ``ineffective_ratio``. Bottlenecks (:data:`finops.savings.bottlenecks.RULES`): memory-bound, DRAM active ≥
    ``dram_high_ratio`` (0.5) with tensor active below ``tensor_low_ratio`` (0.1); input-bound, storage reads ≥
    ``storage_bytes_per_second`` with the hourly SM means' coefficient of variation ≥ ``sawtooth_cv`` (0.3) over at
    least ``sawtooth_min_hours`` (3) hours; communication-bound, InfiniBand ≥ ``network_bytes_per_second`` (both rates
    the waste reasons' defaults, 100 MB/s); no tensor cores, FP32 pipe ≥ ``fp32_busy_ratio`` (0.3) with tensor ≤
    ``tensor_idle_ratio`` (0.01); low occupancy, SM occupancy < ``occupancy_low_ratio`` (0.2) with SM active ≥
    ``occupancy_sm_active_ratio`` (0.25). ValueError for a ratio outside [0, 1], ``effective_ratio`` below
    ``ineffective_ratio``, or a negative rate, CV or hour count."""

    effective_ratio: float = 0.8
    ineffective_ratio: float = 0.5
    busy_utilization_ratio: float = 0.8
    dram_high_ratio: float = 0.5
    tensor_low_ratio: float = 0.1
    storage_bytes_per_second: float = _REASONS.storage_bytes_per_second
    sawtooth_cv: float = 0.3
    sawtooth_min_hours: int = 3
    network_bytes_per_second: float = _REASONS.network_bytes_per_second
    fp32_busy_ratio: float = 0.3
    tensor_idle_ratio: float = 0.01
    occupancy_low_ratio: float = 0.2
    occupancy_sm_active_ratio: float = 0.25

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name.endswith("_ratio") and not 0 <= value <= 1:
                raise ValueError(f"{item.name} must be a ratio from 0 to 1, not {value!r}")
            if value < 0:
                raise ValueError(f"{item.name} must not be negative, not {value!r}")
        if self.effective_ratio < self.ineffective_ratio:
            raise ValueError(
                f"effective_ratio ({self.effective_ratio}) must be at least ineffective_ratio "
                f"({self.ineffective_ratio})"
            )

    def band(self, sm_active: float | None) -> str:
        """The band of a mean SM activity (None: ``not measured``)."""
        if sm_active is None:
            return NOT_MEASURED
        if sm_active >= self.effective_ratio:
            return EFFECTIVE
        return MODERATE if sm_active >= self.ineffective_ratio else INEFFECTIVE

    def busy_but_inefficient(self, utilization: float | None, sm_active: float | None) -> bool:
        """True when the GPUs were kernel-busy (mean utilisation ≥ :attr:`busy_utilization_ratio`) while their SM
        activity was measured and below :attr:`ineffective_ratio`; never for an unmeasured job."""
        if utilization is None or sm_active is None:
            return False
        return utilization >= self.busy_utilization_ratio and sm_active < self.ineffective_ratio
