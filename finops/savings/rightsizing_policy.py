"""Right-sizing's thresholds and what it finds: the policy, what one job could have asked for instead, and the
findings of a period (the rules: :mod:`finops.savings.rightsizing`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from finops.savings.mig_profiles import MEMORY_HEADROOM

MAX_MEMORY_HEADROOM = Decimal(100)
"""Largest ``memory_headroom``: a job's memory peak × 100 exceeds every GPU's memory already at 2 GB."""


@dataclass(frozen=True, slots=True)
class RightsizingPolicy:
    """The thresholds of :func:`rightsizing` (module docstring): ``idle_ratio`` and ``low_utilization_ratio`` are
    ratios in [0, 1] of a GPU's mean use (SM activity where measured, utilisation elsewhere); ``memory_headroom``
    from 1 to :data:`MAX_MEMORY_HEADROOM` (finite) multiplies the memory peak. ValueError otherwise."""

    idle_ratio: float = 0.05
    low_utilization_ratio: float = 0.15
    memory_headroom: Decimal = MEMORY_HEADROOM

    def __post_init__(self) -> None:
        for name in ("idle_ratio", "low_utilization_ratio"):
            value = getattr(self, name)
            if not 0 <= value <= 1:
                raise ValueError(f"{name} must be a ratio from 0 to 1, not {value!r}")
        if not self.memory_headroom.is_finite() or not 1 <= self.memory_headroom <= MAX_MEMORY_HEADROOM:
            raise ValueError(f"memory_headroom must be from 1 to {MAX_MEMORY_HEADROOM}, not {self.memory_headroom}")


@dataclass(frozen=True, slots=True)
class JobFinding:
    """What one job could have asked for instead, over the period (module docstring for every rule).

    Who and what: ``job_id`` (Slurm JobID, ``namespace/pod``), ``user``, ``account`` (Slurm account, namespace),
    ``team``, ``gpu_model`` (the catalog model, else the GPU's reported name), ``pricing_model``.
    Counts: ``gpus_requested`` (AllocTRES ``gres/gpu``, the pod's GPU limit), ``gpus_held`` (GPUs with ledger rows in
    the period), ``gpus_busy`` (mean utilisation above the idle ratio), ``gpus_unmetered`` (no reading),
    ``gpus_suggested`` (the request that suffices). ``gpu_seconds`` are the job's GPU-seconds in the period,
    ``allocated_cost`` their ledger cost (None: unpriced), ``mean_utilization`` its metered mean (None: no reading),
    ``sm_active`` its mean SM activity over the GPU-seconds that measured it (None: not measured) and
    ``sm_active_share`` the share of its metered GPU-seconds that did (None: no reading): where SM activity was
    measured, it, not utilisation, judged the GPUs' use (:attr:`measure`; module docstring of
    :mod:`finops.savings.rightsizing`).
    Savings are exact decimals in ``currency`` (None: unpriced, or not applicable): ``count_saving`` over
    ``saved_gpu_seconds``; ``mig_saving`` for ``mig_profile``; ``smaller_model_saving`` for ``smaller_model``
    (``smaller_model_in_fleet``: the database has GPUs of it). ``memory_peak_bytes``: None when not read (the job
    keeps its GPUs busy) or no reading exists (then a note says so). Fixes (``count_fix``, ``mig_fix``,
    ``model_fix``) are the lines of :mod:`finops.savings.fix_lines`; ``notes`` say what could not be judged.
    """

    job_pk: int
    job_id: str
    name: str
    scheduler: str
    cluster: str
    user: str
    account: str
    team: str
    partition: str
    start: datetime | None
    end: datetime | None
    gpu_model: str
    pricing_model: str | None
    currency: str
    gpus_requested: int
    gpus_held: int
    gpus_busy: int
    gpus_unmetered: int
    gpus_suggested: int
    gpu_seconds: int
    allocated_cost: Decimal | None
    mean_utilization: float | None
    saved_gpu_seconds: int
    count_saving: Decimal | None
    memory_peak_bytes: int | None
    mig_profile: str | None
    mig_saving: Decimal | None
    smaller_model: str | None
    smaller_model_in_fleet: bool
    smaller_model_saving: Decimal | None
    count_fix: str | None
    mig_fix: str | None
    model_fix: str | None
    notes: tuple[str, ...] = ()
    sm_active: float | None = None
    sm_active_share: float | None = None

    @property
    def measure(self) -> str:
        """What judged the job's GPUs: :data:`SM_ACTIVITY` (every metered GPU-second measured SM activity),
        :data:`UTILIZATION` (none did), or :data:`BOTH` (some did: SM activity there, utilisation over the rest)."""
        share = self.sm_active_share or 0.0
        if share <= 0:
            return UTILIZATION
        return SM_ACTIVITY if share >= 1 else BOTH

    @property
    def memory_saving(self) -> Decimal | None:
        """The larger of the MIG and smaller-model savings (None when neither applies or is priced)."""
        savings = [s for s in (self.mig_saving, self.smaller_model_saving) if s is not None]
        return max(savings) if savings else None

    @property
    def saving(self) -> Decimal | None:
        """GPU-count saving + :attr:`memory_saving`; None when neither is priced."""
        parts = [s for s in (self.count_saving, self.memory_saving) if s is not None]
        return sum(parts, Decimal(0)) if parts else None

    @property
    def fixes(self) -> tuple[str, ...]:
        """The fix lines that apply: GPU count, MIG profile, smaller model."""
        return tuple(fix for fix in (self.count_fix, self.mig_fix, self.model_fix) if fix is not None)

    @property
    def memory_unknown(self) -> bool:
        """True when the job was at low utilisation but no memory reading exists for it."""
        return any(note.startswith(NO_MEMORY_READING) for note in self.notes)


SM_ACTIVITY = "SM activity"
UTILIZATION = "utilisation"
BOTH = "SM activity and utilisation"
"""The measures a :class:`JobFinding` was judged by (:attr:`JobFinding.measure`)."""
NO_MEMORY_READING = "no memory reading"
"""How a :class:`JobFinding` note starts when the job's memory in use is unknown."""


@dataclass(frozen=True, slots=True)
class RightsizingReport:
    """The findings of a period, largest saving first; ``jobs_examined`` held whole GPUs in it, of which
    ``jobs_unmetered`` had no utilisation reading at all (not judged)."""

    start: datetime
    end: datetime
    priced_at: datetime
    policy: RightsizingPolicy
    findings: list[JobFinding]
    jobs_examined: int
    jobs_unmetered: int
