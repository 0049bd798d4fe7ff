"""Useful work as the hardware measures it: the dashboard's two measures of used cost, the bands of SM activity,
and the activity columns of the Teams and Jobs tables.

- **Kernel-busy cost** (the reports' ``used_cost``): allocated cost × utilisation, the share of time a kernel ran
  on the GPU (NVML ``utilization.gpu``, ``DCGM_FI_DEV_GPU_UTIL``). NVIDIA calls it a coarse measure: one kernel on
  one of the GPU's SMs makes the GPU busy.
- **SM-active cost** (the reports' ``sm_active_cost``): allocated cost × SM activity, the share of the SMs that had
  work (at least one warp), averaged over time (``DCGM_FI_PROF_SM_ACTIVE``, NVML GPM ``SM_UTIL``). Only GPU-hours
  whose readings carried profiling fields have it (docs/collector.md, "Hardware activity"); the rest are "not
  measured", never 0.

NVIDIA's guidance (DCGM user guide, "Profiling Metrics") sorts SM activity into bands: 0.8 or more is necessary, but
not sufficient, for effective use; below 0.5 likely means ineffective use. The thresholds are the site's
(:class:`finops.savings.efficiency_policy.EfficiencyPolicy`, ``FINOPS_EFFICIENCY_*``), passed in by the pages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Literal

import pandas as pd

from finops.analysis.report import ACTIVITY_FIELDS, NOT_MEASURED, ReportRow
from finops.analysis.report_format import report_dicts
from finops.db.models import UNALLOCATED_TEAM
from finops.savings.efficiency_policy import EfficiencyPolicy

HOW_TO_MEASURE = "docs/collector.md#hardware-activity"
"""Where the documentation says how to have the collectors read the profiling fields."""
KERNEL_BUSY_COST = "Kernel-busy cost"
SM_ACTIVE_COST = "SM-active cost"
ACTIVITY_COLUMNS = [
    "sm_active_ratio",
    "sm_active_band",
    "sm_active_cost",
    "tensor_active_ratio",
    "dram_active_ratio",
    "profiled_share",
]
"""The activity columns of the Teams and Jobs tables (:func:`activity_frame`)."""


def _percent(ratio: float) -> str:
    """``78 %``; a share that is neither 0 nor 1 never rounds to either (``under 1 %``, ``over 99 %``)."""
    if 0 < ratio < 0.005:
        return "under 1 %"
    if 0.995 <= ratio < 1:
        return "over 99 %"
    return f"{ratio * 100:.0f} %"


def total(rows: Sequence[ReportRow]) -> ReportRow:
    """One row whose GPU-seconds, profiled seconds, activity sums and SM-active cost are those of ``rows`` (a cost
    report, not empty; None sums left out, and None when all are): its :meth:`ReportRow.activity_ratio` and
    :attr:`ReportRow.profiled_share` are those of all the rows together, weighted as a row's are."""
    known = ["sm_active_cost", *(f"{field.removesuffix('_ratio')}_gpu_seconds" for field in ACTIVITY_FIELDS)]
    summed = [
        "allocated_gpu_seconds",
        "held_gpu_seconds",
        "profiled_gpu_seconds",
        *(f"{field.removesuffix('_ratio')}_measured_gpu_seconds" for field in ACTIVITY_FIELDS),
    ]
    values: dict[str, object] = {name: sum(getattr(row, name) for row in rows) for name in summed}
    for name in known:
        present = [getattr(row, name) for row in rows if getattr(row, name) is not None]
        values[name] = sum(present[1:], present[0]) if present else None
    return replace(rows[0], key="TOTAL", **values)  # type: ignore[arg-type]


def kernel_busy_caption(utilization: float) -> str:
    """What the kernel-busy cost measures, with the period's utilisation (Markdown, one paragraph)."""
    return (
        f"**{KERNEL_BUSY_COST}**: allocated cost × utilisation ({utilization * 100:.1f} % here), the share of time "
        "a kernel ran on the GPU. NVIDIA calls utilisation a coarse measure: a kernel on one SM of a GPU's hundred "
        "or more counts the whole GPU as busy."
    )


def sm_active_caption(overall: ReportRow, policy: EfficiencyPolicy) -> str:
    """What the SM-active cost measures, with the SM activity of ``overall`` (:func:`total` of the rows shown) and
    the share of held GPU-hours that had profiling data; without any, that it was not measured and where the
    documentation says how to measure it (Markdown, one paragraph); the bands are ``policy``'s."""
    what = (
        f"**{SM_ACTIVE_COST}**: allocated cost × SM activity, the share of the GPU's SMs that had work. NVIDIA's "
        f"guidance: {_percent(policy.effective_ratio)} or more is needed for effective use, below "
        f"{_percent(policy.ineffective_ratio)} "
        "use is likely ineffective."
    )
    sm_active = overall.activity_ratio("sm_active_ratio")
    if sm_active is None:
        return (
            f"{what} **Not measured**: no GPU-hour a job held in this view had profiling data. The collectors read "
            f"it from NVML GPM (Hopper and newer) or dcgm-exporter's profiling fields: see `{HOW_TO_MEASURE}`."
        )
    share = overall.profiled_share or 0.0
    measured = f"Measured on {_percent(share)} of held GPU-hours"
    if share < 1:
        measured += " (the cost counts those only; the rest are not measured)"
    return f"{what} {measured}; SM activity there {sm_active * 100:.1f} % ({policy.band(sm_active)})."


def table_caption(policy: EfficiencyPolicy) -> str:
    """What the activity columns of a table say, and what an empty one means, with ``policy``'s bands (Markdown,
    one paragraph)."""
    return (
        "Means over the GPU-hours whose readings had profiling data (**Profiled**: their share of the held "
        "GPU-hours). **SM activity**: share of the GPU's SMs with work; its band is NVIDIA's guidance, effective at "
        f"{_percent(policy.effective_ratio)} or more, likely ineffective below {_percent(policy.ineffective_ratio)}. "
        "**Tensor** and "
        "**DRAM activity**: share of cycles the tensor pipes and the memory interface were busy. "
        f"**{SM_ACTIVE_COST}**: allocated cost × SM activity. *{NOT_MEASURED}*: no profiling data (see "
        f"`{HOW_TO_MEASURE}`), not 0."
    )


def scatter_caption(drawn: int, left_out: int, left_out_cost: str) -> str:
    """How to read the chart of utilisation against SM activity of ``drawn`` jobs, and which jobs it leaves out:
    ``left_out`` jobs without SM activity, whose allocated cost is ``left_out_cost`` (text with its currency)
    (Markdown, one paragraph)."""
    if not drawn:
        return (
            f"No job's SM activity was measured in this view ({left_out:,} jobs, {left_out_cost}): the collectors read "
            f"it from NVML GPM (Hopper and newer) or dcgm-exporter's profiling fields, see `{HOW_TO_MEASURE}`."
        )
    text = (
        f"One point per job ({drawn:,} jobs), its area the job's allocated cost. On the dashed diagonal SM activity "
        "equals utilisation; a job far below it kept its GPUs busy with kernels that used few of their SMs, so its "
        "kernel-busy cost overstates its useful work."
    )
    if left_out:
        jobs = "job" if left_out == 1 else "jobs"
        text += f" Left out: {left_out:,} {jobs} without SM activity ({NOT_MEASURED}), allocated cost {left_out_cost}."
    return text


def utilization(row: ReportRow) -> float | None:
    """Used ÷ allocated GPU-seconds that have readings (0..1); None when none has (not measured)."""
    metered = row.allocated_gpu_seconds - row.unmetered_gpu_seconds
    return row.used_gpu_seconds / metered if metered > 0 else None


def activity_frame(rows: Sequence[ReportRow], by: Literal["team", "job"], policy: EfficiencyPolicy) -> pd.DataFrame:
    """The hardware activity of report rows by team or job (capacity no job held, ``__unallocated__``, left out),
    in their order: ``by`` (the row's key) and :data:`ACTIVITY_COLUMNS`, the fields of
    :func:`finops.analysis.report_format.report_dicts` (ratios 0..1 to 6 decimals, SM-active cost a Decimal in cents
    adding up to the rounded total, None where nothing measured it) and ``sm_active_band`` (``policy``'s band of the
    SM activity)."""
    held = [row for row in rows if row.key != UNALLOCATED_TEAM]
    frame = pd.DataFrame(report_dicts(held, by), columns=[by, *ACTIVITY_COLUMNS])
    frame["sm_active_band"] = [policy.band(row.activity_ratio("sm_active_ratio")) for row in held]
    frame["sm_active_cost"] = [None if cost is None else Decimal(cost) for cost in frame["sm_active_cost"]]
    return frame
