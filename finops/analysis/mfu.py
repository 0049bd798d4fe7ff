"""Model FLOPs utilisation (MFU) of inference jobs, and their cost per PFLOP beside their cost per 1M tokens.

MFU is PaLM's definition (Chowdhery et al. 2022, "PaLM: Scaling Language Modeling with Pathways", section 4.1): the
FLOP/s the model's own arithmetic achieved, divided by the hardware's peak FLOP/s. Here:

    achieved FLOP/s per GPU = mean over the job's series of increase(<FLOPs counter>[window]) / window seconds
    MFU                     = achieved FLOP/s per GPU / (dense peak TFLOPS of the GPU model, at the precision × 10¹²)
    FLOPs done              = achieved FLOP/s per GPU × the job's allocated GPU-seconds (ledger)
    cost per PFLOP          = allocated cost / (FLOPs done / 10¹⁵)

The FLOPs come only from the application: vLLM's ``vllm:estimated_flops_per_gpu_total`` and SGLang's
``sglang:estimated_flops_per_gpu_total`` (:data:`FLOPS_COUNTERS`), counters both emit when started with
``--enable-mfu-metrics``. They count the model's analytic FLOPs per GPU (vLLM, ``vllm/v1/metrics/perf.py``: matrix
products of attention and feed-forward, divided over the tensor/pipeline-parallel GPUs), whatever precision the
kernels ran in, so the peak to divide by is the model's compute precision: ``bf16_tensor`` by default (LLM serving
in BF16/FP16), ``FINOPS_MFU_PRECISION`` or ``--precision`` for another (``fp8_tensor`` for an FP8 model). Peaks are
the catalog's dense datasheet figures (:mod:`finops.pricing.peaks`). Without the counter there is no MFU (None, with
:data:`NOT_REPORTED`), never an estimate from other telemetry.

Cost per PFLOP assumes every GPU of the job runs the reporting server (a vLLM pod holding its tensor-parallel GPUs);
a job whose other GPUs do other work gets a lower cost per PFLOP than it should.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from sqlalchemy import select
from sqlalchemy.orm import Session

from finops.analysis.report import cost_report
from finops.analysis.tokens import cost_per_million_tokens, generated_tokens, job_matchers, window_range
from finops.db.ledger_tables import LedgerEntry
from finops.db.models import UNALLOCATED_TEAM, Gpu, Job
from finops.ingest.prometheus import LabelNames, PrometheusClient
from finops.ledger.costmodel import quantize
from finops.pricing.catalog import PriceCatalog
from finops.pricing.peaks import Precision

FLOPS_COUNTERS = ("vllm:estimated_flops_per_gpu_total", "sglang:estimated_flops_per_gpu_total")
"""The applications' counters of estimated FLOPs per GPU (``--enable-mfu-metrics``): vLLM's (labels ``model_name``,
``engine``) and SGLang's (labels ``model_name``, ``engine_type``, ``tp_rank``, ``pp_rank``, …)."""

DEFAULT_PRECISION: Precision = "bf16_tensor"
"""The peak MFU divides by unless told otherwise: dense BF16 Tensor Core, the precision LLMs are served in."""

NOT_REPORTED = "not reported by the application: run vLLM (or SGLang) with --enable-mfu-metrics"
"""Why a job has no MFU when no FLOPs counter of it is found."""

FLOPS_PER_TFLOP = Decimal(10) ** 12
FLOPS_PER_PFLOP = Decimal(10) ** 15


def achieved_flops_per_gpu(
    client: PrometheusClient,
    job: str,
    start: datetime,
    end: datetime,
    *,
    labels: LabelNames | None = None,
    selector: str = "",
) -> float | None:
    """The mean FLOP/s per GPU job ``job``'s inference servers report over [start, end), or None when none reports
    (no series of :data:`FLOPS_COUNTERS` for the job in the window).

    ``job``, ``labels`` and ``selector`` select the series as :func:`finops.analysis.tokens.job_matchers` says; the
    query is ``avg by (<job labels>) (increase({__name__=~"<counters>", <job>}[<end − start>]))`` evaluated 1 ms
    before ``end`` (:func:`finops.analysis.tokens.window_range`), divided by the window's seconds: each series is one
    engine's (vLLM) or rank's (SGLang) FLOPs per GPU, so their mean is the job's per GPU. ``increase`` survives
    counter resets and extrapolates to the window's edges: an estimate, like the counter itself.
    """
    inner, by = job_matchers(job, labels=labels, selector=selector)
    window, at = window_range(start, end)
    names = "|".join(FLOPS_COUNTERS)
    query = f'avg by ({by}) (increase({{__name__=~"{names}", {inner}}}[{window}]))'
    values = [sample.value for sample in client.query(query, at)]
    if not values:
        return None
    return sum(values) / len(values) / (end - start).total_seconds()


def model_flops_utilization(achieved_flops: float, peak_tflops: Decimal) -> float:
    """MFU: ``achieved_flops`` (FLOP/s) ÷ ``peak_tflops`` × 10¹² (PaLM's model FLOPs utilisation, a ratio, 1 =
    the datasheet's dense peak). ValueError for a negative achievement or a peak that is not positive."""
    if achieved_flops < 0:
        raise ValueError(f"achieved FLOP/s: {achieved_flops} is negative")
    if not peak_tflops > 0:
        raise ValueError(f"peak TFLOPS: {peak_tflops} is not positive")
    return achieved_flops / float(peak_tflops * FLOPS_PER_TFLOP)


def cost_per_pflop(cost: Decimal, flops: float) -> Decimal | None:
    """``cost`` ÷ (``flops`` / 10¹⁵): money per PFLOP done, rounded half-even to the ledger's quantum (one millionth
    of the currency unit, :func:`finops.ledger.costmodel.quantize`); None when nothing was done. ValueError for
    negative FLOPs or a cost that is not finite."""
    if flops < 0:
        raise ValueError(f"FLOPs: {flops} is negative")
    if not cost.is_finite():
        raise ValueError(f"cost: {cost} is not a finite amount")
    if flops == 0:
        return None
    return quantize(cost * FLOPS_PER_PFLOP / Decimal(repr(flops)))


@dataclass(frozen=True, slots=True)
class JobEfficiency:
    """One job over a period: its cost and GPU-seconds (ledger), tokens and FLOPs (its inference servers), and the
    efficiency figures drawn from them.

    ``gpu_model``: the catalog model of the job's GPUs (None when they are of several models or of none the catalog
    knows). ``cost`` is None when part of its GPU-seconds is unpriced. ``achieved_flops_per_gpu`` (FLOP/s),
    ``flops`` (done on all its GPUs), ``peak_tflops`` (dense, of ``precision``), ``mfu`` (ratio) and
    ``cost_per_pflop`` are None when they cannot be known; ``mfu_note`` then says why and what fixes it."""

    job: str
    team: str | None
    start: datetime
    end: datetime
    gpu_model: str | None
    gpu_seconds: int
    cost: Decimal | None
    currency: str
    tokens: int
    cost_per_million_tokens: Decimal | None
    precision: Precision
    peak_tflops: Decimal | None
    achieved_flops_per_gpu: float | None
    flops: float | None
    mfu: float | None
    cost_per_pflop: Decimal | None
    mfu_note: str | None


def job_efficiency(
    session: Session,
    client: PrometheusClient,
    catalog: PriceCatalog,
    start: datetime,
    end: datetime,
    *,
    jobs: Sequence[str] = (),
    cluster: str | None = None,
    team: str | None = None,
    precision: Precision = DEFAULT_PRECISION,
    labels: LabelNames | None = None,
    selector: str = "",
) -> list[JobEfficiency]:
    """:class:`JobEfficiency` of every job the ledger holds in the hours starting in [start, end) (only ``jobs``,
    when given; ``cluster``, ``team`` as :func:`finops.analysis.report.cost_report`), by cost descending.

    Each job's window is its run clipped to [start, end); its tokens (:func:`~finops.analysis.tokens.generated_tokens`)
    and FLOPs (:func:`achieved_flops_per_gpu`) are read from ``client`` over that window. Raises PrometheusError
    when the Prometheus fails."""
    wanted = set(jobs)
    rows = [
        row
        for row in cost_report(session, start, end, "job", cluster=cluster, team=team)
        if row.key != UNALLOCATED_TEAM and (not wanted or row.key in wanted)
    ]
    gpu_names = _gpu_names(session, start, end, [row.key for row in rows])
    found: list[JobEfficiency] = []
    for row in rows:
        job_start = max(start, row.job.start) if row.job and row.job.start else start
        job_end = min(end, row.job.end) if row.job and row.job.end else end
        if job_end <= job_start:
            job_start, job_end = start, end
        cost = None if row.unpriced_gpu_seconds else row.allocated_cost
        tokens = generated_tokens(client, row.key, job_start, job_end, labels=labels, selector=selector)
        achieved = achieved_flops_per_gpu(client, row.key, job_start, job_end, labels=labels, selector=selector)
        model, peak, note = _peak(catalog, gpu_names.get(row.key, set()), precision)
        flops = achieved * row.allocated_gpu_seconds if achieved is not None else None
        found.append(
            JobEfficiency(
                job=row.key,
                team=row.team,
                start=job_start,
                end=job_end,
                gpu_model=model,
                gpu_seconds=row.allocated_gpu_seconds,
                cost=cost,
                currency=row.currency,
                tokens=tokens,
                cost_per_million_tokens=cost_per_million_tokens(cost, tokens) if cost is not None else None,
                precision=precision,
                peak_tflops=peak,
                achieved_flops_per_gpu=achieved,
                flops=flops,
                mfu=model_flops_utilization(achieved, peak) if achieved is not None and peak is not None else None,
                cost_per_pflop=cost_per_pflop(cost, flops) if cost is not None and flops is not None else None,
                mfu_note=NOT_REPORTED if achieved is None else (note or None),
            )
        )
    return found


def _gpu_names(session: Session, start: datetime, end: datetime, jobs: Sequence[str]) -> dict[str, set[str]]:
    """The GPU names (:attr:`Gpu.model`) each of ``jobs`` held in the ledger hours starting in [start, end)."""
    names: dict[str, set[str]] = {}
    if not jobs:
        return names
    query = (
        select(Job.job_id, Gpu.model)
        .join(LedgerEntry, LedgerEntry.job_pk == Job.id)
        .join(Gpu, Gpu.id == LedgerEntry.gpu_id)
        .where(LedgerEntry.hour >= start, LedgerEntry.hour < end, Job.job_id.in_(sorted(set(jobs))))
        .group_by(Job.job_id, Gpu.model)
    )
    for job_id, model in session.execute(query):
        names.setdefault(job_id, set()).add(model)
    return names


def _peak(catalog: PriceCatalog, gpu_names: set[str], precision: Precision) -> tuple[str | None, Decimal | None, str]:
    """The catalog model of ``gpu_names``, its dense peak at ``precision``, and why there is none (the note shown
    when MFU cannot be computed)."""
    unknown = sorted(name for name in gpu_names if catalog.resolve(name) is None)
    if unknown:
        return None, None, f"GPU {unknown[0]!r} is not in the price catalog: add its model with peak_tflops"
    models = sorted({key for name in gpu_names if (key := catalog.resolve(name)) is not None})
    if len(models) != 1:
        return None, None, f"GPUs of several models ({', '.join(models)}): no one peak" if models else "no GPU"
    model = models[0]
    peaks = catalog.models[model].peak_tflops
    if peaks is None:
        return model, None, f"{model} has no peak_tflops in the price catalog: add its datasheet's dense figures"
    peak = peaks.of(precision)
    if peak is None:
        given = ", ".join(peaks.figures())
        return model, None, f"{model} has no {precision} peak in the price catalog (it has {given})"
    return model, peak, ""
