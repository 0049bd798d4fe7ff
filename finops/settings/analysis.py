"""Settings of how GPU use is judged: idle detection, the waste reasons and the efficiency bands."""

from __future__ import annotations

import typing
from typing import Annotated

from pydantic import Field, field_validator, model_validator
from pydantic_settings import NoDecode

from finops.analysis.waste import ReasonPolicy
from finops.savings.efficiency_policy import EfficiencyPolicy
from finops.settings.group import SettingsGroup, comma_list


class IdleSettings(SettingsGroup):
    """When an allocated GPU is idle, and when an idle run is an idle episode."""

    idle_threshold_ratio: float = Field(0.05, ge=0, le=1, description="Utilisation at or below this is idle.")
    idle_window_seconds: int = Field(1800, gt=0, description="An idle run this long is an idle episode.")
    idle_max_gap_seconds: int = Field(
        150, gt=0, description="Two idle samples further apart than this break an idle run."
    )
    idle_grace_seconds: int = Field(
        600, ge=0, description="Seconds after a job starts during which a GPU is not judged idle (start-up)."
    )
    idle_partition_thresholds: dict[str, float] = Field(
        default_factory=dict,
        description='Idle threshold ratio per Slurm partition, JSON: `{"interactive": 0.01}`; others use the default.',
    )


_REASONS = ReasonPolicy()


class WasteSettings(SettingsGroup):
    """Why idle GPUs are idle: the thresholds and conventions of the waste reasons (docs/waste-reasons.md)."""

    waste_low_utilization_ratio: float = Field(
        _REASONS.low_utilization_ratio,
        ge=0,
        le=1,
        description="A job whose mean utilisation is below this has its idle time given a reason (Job Defense "
        "Shield's example threshold, 25 %).",
    )
    waste_zero_utilization_ratio: float = Field(
        _REASONS.zero_utilization_ratio, ge=0, le=1, description="Over-requested: a GPU at most this over the job."
    )
    waste_busy_utilization_ratio: float = Field(
        _REASONS.busy_utilization_ratio,
        ge=0,
        le=1,
        description="Over-requested: while another GPU of the job averaged more than this.",
    )
    waste_storage_bytes_per_second: float = Field(
        _REASONS.storage_bytes_per_second,
        ge=0,
        description="Waiting on storage: the node's NFS, Lustre or disk reads or writes at this or more, bytes/s.",
    )
    waste_network_bytes_per_second: float = Field(
        _REASONS.network_bytes_per_second,
        ge=0,
        description="Waiting on the network: the node's InfiniBand traffic at this or more, bytes/s.",
    )
    waste_throttled_share: float = Field(
        _REASONS.throttled_share,
        gt=0,
        le=1,
        description="Throttled: this share of an episode's readings or more with a thermal or power clocks-event "
        "reason.",
    )
    waste_reduced_clock_ratio: float = Field(
        _REASONS.reduced_clock_ratio,
        gt=0,
        le=1,
        description="Throttled: with their SM clock at most this share of the GPU's highest in the day before.",
    )
    waste_interactive_partitions: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(_REASONS.interactive_partitions),
        description="Slurm partitions whose jobs are interactive sessions, comma-separated.",
    )
    waste_interactive_job_names: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(_REASONS.interactive_job_names),
        description="Job names of interactive sessions, comma-separated shell patterns (`*` any text; Open "
        "OnDemand's apps are `sys/dashboard/sys/<app>`).",
    )

    _interactive_lists = field_validator("waste_interactive_partitions", "waste_interactive_job_names", mode="before")(
        comma_list
    )

    @property
    def reason_policy(self) -> ReasonPolicy:
        """The settings as the waste reasons take them."""
        return ReasonPolicy(
            low_utilization_ratio=self.waste_low_utilization_ratio,
            zero_utilization_ratio=self.waste_zero_utilization_ratio,
            busy_utilization_ratio=self.waste_busy_utilization_ratio,
            storage_bytes_per_second=self.waste_storage_bytes_per_second,
            network_bytes_per_second=self.waste_network_bytes_per_second,
            throttled_share=self.waste_throttled_share,
            reduced_clock_ratio=self.waste_reduced_clock_ratio,
            interactive_partitions=tuple(self.waste_interactive_partitions),
            interactive_job_names=tuple(self.waste_interactive_job_names),
        )


_EFFICIENCY = EfficiencyPolicy()


class EfficiencySettings(SettingsGroup):
    """SM activity bands and the busy-but-inefficient jobs' bottleneck rules (docs/efficiency.md). The band defaults
    are NVIDIA's DCGM guidance (user guide, "Profiling Metrics"): SM activity ≥ 0.8 is necessary for effective use,
    below 0.5 likely ineffective."""

    efficiency_effective_ratio: float = Field(
        _EFFICIENCY.effective_ratio,
        ge=0,
        le=1,
        description='SM activity at or above this is `effective` (DCGM: 0.8 is "necessary, but not sufficient, for '
        'effective use of the GPU").',
    )
    efficiency_ineffective_ratio: float = Field(
        _EFFICIENCY.ineffective_ratio,
        ge=0,
        le=1,
        description='SM activity below this is `ineffective` (DCGM: below 0.5 "likely indicates ineffective GPU '
        'usage"); from it up to the effective ratio, `moderate`.',
    )
    efficiency_busy_utilization_ratio: float = Field(
        _EFFICIENCY.busy_utilization_ratio,
        ge=0,
        le=1,
        description="Busy but inefficient: a job whose mean utilisation (kernel-busy time) is at least this while its "
        "SM activity is ineffective.",
    )
    efficiency_dram_high_ratio: float = Field(
        _EFFICIENCY.dram_high_ratio, ge=0, le=1, description="Memory-bound: DRAM active at least this …"
    )
    efficiency_tensor_low_ratio: float = Field(
        _EFFICIENCY.tensor_low_ratio, ge=0, le=1, description="Memory-bound: … with tensor active below this."
    )
    efficiency_storage_bytes_per_second: float = Field(
        _EFFICIENCY.storage_bytes_per_second,
        ge=0,
        description="Input-bound: the job's nodes' NFS, Lustre or disk reads at this or more, bytes/s …",
    )
    efficiency_sawtooth_cv: float = Field(
        _EFFICIENCY.sawtooth_cv,
        ge=0,
        description="Input-bound: … with the coefficient of variation of the job's hourly SM activity at least this …",
    )
    efficiency_sawtooth_min_hours: int = Field(
        _EFFICIENCY.sawtooth_min_hours, ge=2, description="Input-bound: … over at least this many measured hours."
    )
    efficiency_network_bytes_per_second: float = Field(
        _EFFICIENCY.network_bytes_per_second,
        ge=0,
        description="Communication-bound: the job's nodes' InfiniBand traffic at this or more, bytes/s (the waste "
        "reasons' default).",
    )
    efficiency_fp32_busy_ratio: float = Field(
        _EFFICIENCY.fp32_busy_ratio, ge=0, le=1, description="No tensor cores: FP32 pipe active at least this …"
    )
    efficiency_tensor_idle_ratio: float = Field(
        _EFFICIENCY.tensor_idle_ratio, ge=0, le=1, description="No tensor cores: … with tensor active at most this."
    )
    efficiency_occupancy_low_ratio: float = Field(
        _EFFICIENCY.occupancy_low_ratio, ge=0, le=1, description="Low occupancy: SM occupancy below this …"
    )
    efficiency_occupancy_sm_active_ratio: float = Field(
        _EFFICIENCY.occupancy_sm_active_ratio, ge=0, le=1, description="Low occupancy: … with SM active at least this."
    )

    @model_validator(mode="after")
    def _bands_in_order(self) -> typing.Self:
        if self.efficiency_effective_ratio < self.efficiency_ineffective_ratio:
            raise ValueError("FINOPS_EFFICIENCY_EFFECTIVE_RATIO must be at least FINOPS_EFFICIENCY_INEFFECTIVE_RATIO")
        return self

    @property
    def efficiency_policy(self) -> EfficiencyPolicy:
        """The settings as the efficiency report takes them."""
        return EfficiencyPolicy(
            **{name.removeprefix("efficiency_"): getattr(self, name) for name in EfficiencySettings.model_fields}
        )
