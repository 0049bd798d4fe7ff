"""Planning calculators against worked examples from their sources."""

from __future__ import annotations

from decimal import Decimal

import pytest

from finops.analysis import planning

GB = 1e9
GIB = 2**30


def test_llama_2_7b_weights_and_kv_cache() -> None:
    # Llama 2 7B (Touvron et al. 2023): 6.74e9 parameters, 32 layers, 32 heads of dimension 128, 4,096 context.
    assert planning.weights_bytes(6.74e9, "fp16") == pytest.approx(13.48 * GB)
    assert planning.weights_bytes(6.74e9, "int4") == pytest.approx(3.37 * GB)
    # 2 x 32 x 32 x 128 x 2 bytes = 0.5 MiB per token; a full 4,096-token context: 2 GiB per sequence.
    assert planning.kv_cache_bytes(32, 32, 128, context_tokens=1, batch=1) == 512 * 1024
    assert planning.kv_cache_bytes(32, 32, 128, context_tokens=4096, batch=8) == 16 * GIB


def test_zero_paper_figure_1_memory_per_gpu() -> None:
    # ZeRO (Rajbhandari et al. 2020), figure 1: 7.5B parameters, 64 data-parallel GPUs, K = 12:
    # baseline 120 GB, P_os 31.4 GB, P_os+g 16.6 GB, P_os+g+p 1.9 GB.
    expected = {0: 120, 1: 31.4, 2: 16.6, 3: 1.9}
    for stage, gigabytes in expected.items():
        assert planning.training_state_bytes_per_gpu(7.5e9, 64, stage) / GB == pytest.approx(gigabytes, abs=0.05)
    with pytest.raises(ValueError):
        planning.training_state_bytes_per_gpu(7.5e9, 64, 4)


def test_chinchilla_training_compute_time_and_cost() -> None:
    # Chinchilla (Hoffmann et al. 2022): 70B parameters on 1.4T tokens = 5.88e23 FLOPs (6ND).
    estimate = planning.training_estimate(70e9, 1.4e12, gpus=1024, achieved_flops_per_gpu=400e12,
                                          price_per_gpu_hour=Decimal("2.50"))  # fmt: skip
    assert estimate.flops == pytest.approx(5.88e23)
    assert estimate.gpu_hours == pytest.approx(5.88e23 / 400e12 / 3600)  # 408,333.3 GPU-hours
    assert estimate.wall_seconds == pytest.approx(5.88e23 / 400e12 / 1024)  # about 16.6 days
    assert estimate.cost == Decimal("1020833.33")


def test_inference_sizing_with_headroom_and_a_spare() -> None:
    # 200 requests/s at 2 s each: 400 in flight; 32 per GPU -> 12.5 GPUs; +20 % -> 15 GPUs; N+1 -> 16.
    assert planning.inference_gpus(200, 2.0, 32, headroom=0.2, spares=1) == 16
    assert planning.inference_gpus(200, 2.0, 32, headroom=0.0, spares=0) == 13


def test_ring_allreduce_time() -> None:
    # 1 GB of gradients over 8 GPUs at 100 GB/s and 10 us per step pair: 2*7/8*0.01 s + 7*10 us = 17.57 ms.
    assert planning.ring_allreduce_seconds(1 * GB, 8, 100 * GB, 10e-6) == pytest.approx(0.01757)
    assert planning.ring_allreduce_seconds(1 * GB, 1, 100 * GB, 10e-6) == 0.0


def test_storage_bandwidth_to_keep_gpus_fed() -> None:
    # 64 GPUs each reading 2,000 images/s of 110 KB (ImageNet average JPEG): 14.08 GB/s.
    assert planning.storage_read_bytes_per_second(64, 2000, 110e3) == pytest.approx(14.08 * GB)
