"""Capacity-planning calculators: GPU memory for an LLM, training time and cost, inference sizing, all-reduce time,
storage bandwidth. Pure functions of their arguments; units are in the names (bytes, seconds, FLOP/s).

Sources of the formulas:

- Weights: parameters x bytes per parameter of the precision (fp32 4, bf16/fp16 2, fp8/int8 1, int4 0.5).
- KV cache: 2 (keys and values) x layers x KV heads x head dimension x bytes per element, per token of context
  and per sequence in the batch (Pope et al., "Efficiently Scaling Transformer Inference", 2022, section 2).
- Training state with Adam in mixed precision: 2 (fp16 weights) + 2 (fp16 gradients) + 12 (fp32 master weights,
  momentum, variance) = 16 bytes per parameter; ZeRO stage 1 shards the 12 optimizer bytes over the data-parallel
  GPUs, stage 2 also the gradients, stage 3 also the weights (Rajbhandari et al., "ZeRO", 2020, section 5 and
  figure 1). Activations are not included.
- Training compute: 6 x parameters x tokens FLOPs (Kaplan et al., "Scaling Laws for Neural Language Models",
  2020, section 2.1; Hoffmann et al., "Chinchilla", 2022).
- Ring all-reduce of M bytes over N GPUs with link bandwidth B bytes/s: a reduce-scatter and an all-gather of
  N-1 steps each move 2(N-1)/N x M bytes per GPU (Patarasuk and Yuan, "Bandwidth optimal all-reduce
  algorithms", 2009); with d the latency of one reduce-scatter step and its all-gather step together, the time is
  2(N-1)/N x M/B + (N-1) x d.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

BYTES_PER_PARAMETER = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
"""Bytes per weight (or KV-cache element) by precision."""

ADAM_MIXED_PRECISION_BYTES = {"weights": 2.0, "gradients": 2.0, "optimizer": 12.0}
"""Bytes per parameter of mixed-precision Adam training (ZeRO paper, section 3.1)."""


def weights_bytes(parameters: float, precision: str = "bf16") -> float:
    """Memory of the model weights, bytes. KeyError for an unknown precision."""
    return parameters * BYTES_PER_PARAMETER[precision]


def kv_cache_bytes(
    layers: int, kv_heads: int, head_dim: int, context_tokens: int, batch: int, precision: str = "bf16"
) -> float:
    """KV cache of ``batch`` sequences of ``context_tokens``, bytes: 2 x layers x kv_heads x head_dim x bytes, per
    token and sequence."""
    return 2 * layers * kv_heads * head_dim * BYTES_PER_PARAMETER[precision] * context_tokens * batch


def training_state_bytes_per_gpu(parameters: float, data_parallel_gpus: int = 1, zero_stage: int = 0) -> float:
    """Weights, gradients and Adam state per GPU in mixed precision, bytes, with ZeRO stage 0-3 sharding over
    ``data_parallel_gpus``. ValueError for another stage or fewer than one GPU."""
    if zero_stage not in (0, 1, 2, 3) or data_parallel_gpus < 1:
        raise ValueError(f"zero_stage must be 0-3 and data_parallel_gpus >= 1, got {zero_stage}, {data_parallel_gpus}")
    parts = ADAM_MIXED_PRECISION_BYTES
    sharded = {"optimizer": zero_stage >= 1, "gradients": zero_stage >= 2, "weights": zero_stage >= 3}
    per_parameter = sum(size / data_parallel_gpus if sharded[part] else size for part, size in parts.items())
    return parameters * per_parameter


@dataclass(frozen=True, slots=True)
class TrainingEstimate:
    """Compute, wall time and cost of a training run."""

    flops: float
    gpu_hours: float
    wall_seconds: float
    cost: Decimal


def training_estimate(
    parameters: float, tokens: float, gpus: int, achieved_flops_per_gpu: float, price_per_gpu_hour: Decimal
) -> TrainingEstimate:
    """6 x parameters x tokens FLOPs at ``achieved_flops_per_gpu`` FLOP/s on each of ``gpus``; cost at the price
    per GPU-hour (rounded to the cent). ValueError for non-positive GPUs or throughput."""
    if gpus < 1 or achieved_flops_per_gpu <= 0:
        raise ValueError("gpus and achieved_flops_per_gpu must be positive")
    flops = 6 * parameters * tokens
    gpu_seconds = flops / achieved_flops_per_gpu
    gpu_hours = gpu_seconds / 3600
    cost = (Decimal(repr(gpu_hours)) * price_per_gpu_hour).quantize(Decimal("0.01"))
    return TrainingEstimate(flops, gpu_hours, gpu_seconds / gpus, cost)


def inference_gpus(
    peak_qps: float, latency_seconds: float, concurrent_requests_per_gpu: float, headroom: float = 0.2, spares: int = 1
) -> int:
    """GPUs to serve ``peak_qps``: requests in flight (Little's law: QPS x latency) / requests a GPU serves at once,
    with ``headroom`` (0.2 = 20 % spare capacity), rounded up, plus ``spares`` for N+1."""
    in_flight = peak_qps * latency_seconds
    return math.ceil(in_flight / concurrent_requests_per_gpu * (1 + headroom)) + spares


def ring_allreduce_seconds(
    message_bytes: float, gpus: int, bandwidth_bytes_per_second: float, latency_seconds: float
) -> float:
    """Time of a ring all-reduce: 2(N-1)/N x M/B + (N-1) x d seconds (d: latency of a step pair); 0 for one GPU."""
    if gpus <= 1:
        return 0.0
    return 2 * (gpus - 1) / gpus * message_bytes / bandwidth_bytes_per_second + (gpus - 1) * latency_seconds


def storage_read_bytes_per_second(gpus: int, samples_per_second_per_gpu: float, bytes_per_sample: float) -> float:
    """Read bandwidth that keeps ``gpus`` fed: GPUs x samples/s each x bytes per sample."""
    return gpus * samples_per_second_per_gpu * bytes_per_sample
