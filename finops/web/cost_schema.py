"""The response of ``GET /api/v1/costs`` as pydantic models, for the OpenAPI description.

The route returns :func:`finops.analysis.report_format.report_dicts` as they are (the same rows as ``gpu-finops report
--format json``); these models document every field of them, and the REST tests validate real responses against
them (unknown fields refused), so the description cannot drift from what is sent.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

_NOT_MEASURED = " Null when no GPU-second of the group measured it (not measured, never 0)."


class CostRowOut(BaseModel):
    """One group's costs over the period. The key field is the ``group_by`` one (``team``, ``job``, ``user``, ``node``
    or ``gpu_model``); by job also ``name``, ``team``, ``user``, ``start``, ``end``, ``state``, ``gpus``. Money is
    decimal text in cents, rounded so the rows add up to the rounded total (largest remainder per column)."""

    model_config = ConfigDict(extra="forbid")

    team: str | None = Field(None, description="The team (the key by team; the job's team by job).")
    job: str | None = Field(None, description="The job id (by job); __unallocated__: capacity no job held.")
    user: str | None = Field(
        None, description="The user (by user; the job's user by job); claimed:<name>: a pod's user label, unverified."
    )
    node: str | None = Field(None, description="The node's hostname (by node).")
    gpu_model: str | None = Field(None, description="The price catalog model (by gpu_model).")
    name: str | None = Field(None, description="The job's name (by job).")
    start: str | None = Field(None, description="The job's start, ISO 8601 UTC (by job).")
    end: str | None = Field(None, description="The job's end, ISO 8601 UTC; null while it runs (by job).")
    state: str | None = Field(
        None,
        description="The job's state as its scheduler last reported it (by job): Slurm's State (COMPLETED, FAILED, "
        "CANCELLED, TIMEOUT, RUNNING…) or a pod's phase (Running, Succeeded, Failed…); null for __unallocated__.",
    )
    gpus: int | None = Field(None, description="GPUs the job requested (by job).")
    allocated_gpu_hours: float = Field(description="GPU-hours held (capacity, for __unallocated__).")
    allocated_gpu_seconds: int = Field(description="The same in GPU-seconds.")
    used_gpu_hours: float = Field(description="GPU-hours × utilisation.")
    idle_gpu_hours: float = Field(description="Metered GPU-hours less used GPU-hours.")
    unmetered_gpu_hours: float = Field(description="Held GPU-hours without a reading: neither used nor idle.")
    unmetered_share: float | None = Field(
        description="Unmetered ÷ held GPU-hours (0..1): the share of the GPU time the group's jobs held that has no "
        "reading (no collector or pull reading reached the service). Null when jobs held none (__unallocated__)."
    )
    unpriced_gpu_hours: float = Field(description="GPU-hours whose GPU model has no price (not in the money).")
    allocated_cost: str | None = Field(description="Allocated cost; null when all GPU-hours are unpriced.")
    used_cost: str | None = Field(description="Allocated cost × utilisation; null when all are unpriced.")
    idle_cost: str | None = Field(description="Allocated less used cost; null when all are unpriced.")
    energy_kwh: float = Field(description="Energy drawn, kWh.")
    energy_cost: str = Field(description="Energy × tariff × PUE.")
    currency: str = Field(description="ISO 4217 currency of the money fields.")
    sm_active_ratio: float | None = Field(
        description="Mean SM activity (DCGM_FI_PROF_SM_ACTIVE, 0..1) over the profiled GPU-seconds that measured it, "
        "weighted by profiled seconds." + _NOT_MEASURED
    )
    tensor_active_ratio: float | None = Field(
        description="Mean tensor-pipe activity (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, 0..1), weighted likewise."
        + _NOT_MEASURED
    )
    dram_active_ratio: float | None = Field(
        description="Mean DRAM activity (DCGM_FI_PROF_DRAM_ACTIVE, 0..1), weighted likewise." + _NOT_MEASURED
    )
    sm_active_cost: str | None = Field(
        description="SM-active cost: Σ allocated cost × SM activity of the ledger rows that measured it, in cents "
        "rounded so the rows that have one add up to their rounded total." + _NOT_MEASURED + " Null also when those "
        "GPU-hours are unpriced."
    )
    profiled_share: float | None = Field(
        description="Profiled ÷ held GPU-seconds (0..1): the share of the GPU-seconds jobs held that were metered "
        "with readings carrying a profiling field. Null when jobs held none (__unallocated__)."
    )


class UnpricedOut(BaseModel):
    """GPU-hours of one GPU model without a price, and how to price it."""

    model_config = ConfigDict(extra="forbid")

    model: str
    gpu_hours: float
    fix: str


class PriceEstimateOut(BaseModel):
    """A price behind the period's costs that rests on an estimate (:class:`finops.analysis.price_estimates.
    EstimatedPrice`): the catalog ``model`` and ``pricing_model`` whose rows cite a source marked ``estimate: true``,
    those sources' URLs, and the ``note`` the cost report prints."""

    model_config = ConfigDict(extra="forbid")

    model: str
    pricing_model: str
    sources: list[str]
    note: str


class CostsOut(BaseModel):
    """``GET /api/v1/costs?format=json``: the period, the grouping and one row per group (by cost, descending;
    ``__unallocated__`` last); the GPU-hours left unpriced by model, and the prices that rest on an estimate."""

    model_config = ConfigDict(extra="forbid")

    group_by: str
    start: str
    end: str
    rows: list[CostRowOut]
    unpriced: list[UnpricedOut]
    price_estimates: list[PriceEstimateOut] = Field(
        description="The prices of the period's ledger hours that rest on an estimate (a catalog source marked "
        "estimate: true): replace them with your own rate. Empty when every price is cited."
    )
