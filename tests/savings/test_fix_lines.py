"""The fix lines right-sizing and the nudges write: GPU requests of a Slurm job script or a pod spec, MIG slices and
cancelling."""

from __future__ import annotations

from finops.savings.fix_lines import cancel_line, mig_line, request_line


def test_request_lines() -> None:
    assert request_line("slurm", 2, gres_type="h100") == "#SBATCH --gres=gpu:h100:2"
    assert request_line("slurm", 3) == "#SBATCH --gres=gpu:3"
    assert request_line("slurm", 9, gres_type="h100", multi_node=True) == "#SBATCH --gpus=h100:9"
    assert request_line("slurm", 2, gres_type="mi300x", vendor="amd") == "#SBATCH --gres=gpu:mi300x:2"
    assert request_line("kubernetes", 1) == "resources.limits: nvidia.com/gpu: 1"
    assert request_line("kubernetes", 2, vendor="amd") == "resources.limits: amd.com/gpu: 2"
    assert request_line("kubernetes", 2, multi_node=True) == "resources.limits: nvidia.com/gpu: 2", "per pod"
    assert (
        request_line("kubernetes", 1, product="NVIDIA-L40S")
        == "resources.limits: nvidia.com/gpu: 1; nodeSelector: nvidia.com/gpu.product: NVIDIA-L40S"
    )


def test_mig_lines() -> None:
    assert mig_line("slurm", "1g.10gb") == "#SBATCH --gres=gpu:1g.10gb:1"
    assert mig_line("kubernetes", "3g.40gb") == "resources.limits: nvidia.com/mig-3g.40gb: 1"


def test_cancel_lines() -> None:
    assert cancel_line("slurm", "7401") == "scancel 7401"
    assert cancel_line("kubernetes", "ml/train-0") == "kubectl delete pod train-0 -n ml"
    assert cancel_line("kubernetes", "train-0") == "kubectl delete pod train-0"
