"""An 8-GPU node for collector tests and benchmarks, from the real H100 capture.

DERIVED: the capture holds one H100; the node's 8 GPUs are that GPU's ``load`` row repeated, each given its own
index and a UUID made by replacing the capture's (masked) UUID's last digits with the index.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from tests.fake_pynvml import CAPTURES, FakeNvml, query_gpu_rows

H100_CAPTURE = "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
GPUS = 8


def eight_h100_rows(shared_data: Path) -> list[dict[str, str]]:
    """The capture's H100 ``load`` query-gpu row, 8 times with indices 0..7 and distinct UUIDs."""
    (row,) = query_gpu_rows(shared_data / CAPTURES / H100_CAPTURE, "load")
    return [{**row, "index": str(i), "uuid": f"{row['uuid'][:-12]}{i:012d}"} for i in range(GPUS)]


def eight_h100_nvml(shared_data: Path, clock: Callable[[], datetime]) -> FakeNvml:
    """A fake ``pynvml`` with the 8 GPUs of :func:`eight_h100_rows`, on ``clock``."""
    return FakeNvml(eight_h100_rows(shared_data), clock)
