"""The exact line that fixes a job, as its user writes it: the GPU request of a Slurm job script or a pod spec, a
MIG slice, or cancelling the job. Right-sizing (:mod:`finops.savings.rightsizing`) and the nudges
(:mod:`finops.savings.nudges`) both write their fixes with these.

- Slurm (sbatch(1)): ``#SBATCH --gres=gpu:h100:2`` asks for 2 GPUs of GRES type ``h100`` per node (``--gres=gpu:2``
  for any type); a job on several nodes asks for its total with ``#SBATCH --gpus=h100:9``, since ``--gres`` counts
  per node. A MIG slice is a GRES type named by its profile (NVIDIA MIG user guide, "MIG with Slurm"; Slurm
  gres.conf ``MultipleFiles``/AutoDetect=nvml): ``#SBATCH --gres=gpu:1g.10gb:1``. Cancelling: ``scancel <job id>``.
- Kubernetes (device plugins' extended resources): ``resources.limits: nvidia.com/gpu: 2`` (``amd.com/gpu`` for AMD's
  device plugin), with ``nodeSelector: nvidia.com/gpu.product: <product>`` when a model is named (the label NVIDIA
  GPU feature discovery sets); a MIG slice under the NVIDIA device plugin's ``mixed`` strategy is the resource
  ``nvidia.com/mig-<profile>`` (``resources.limits: nvidia.com/mig-1g.10gb: 1``). Cancelling:
  ``kubectl delete pod <name> -n <namespace>`` (the job id of a pod is ``<namespace>/<name>``).
"""

from __future__ import annotations


def request_line(
    scheduler: str,
    count: int,
    *,
    gres_type: str | None = None,
    vendor: str | None = None,
    multi_node: bool = False,
    product: str | None = None,
) -> str:
    """How a job of ``scheduler`` (``slurm``, ``kubernetes``) asks for ``count`` GPUs: of Slurm GRES type
    ``gres_type`` (None: any), on several nodes when ``multi_node`` (Slurm ``--gpus``); for a pod, of ``vendor``
    (``amd``: ``amd.com/gpu``; otherwise ``nvidia.com/gpu``) and on nodes labelled with ``product`` when given
    (``NVIDIA-L40S``)."""
    if scheduler == "kubernetes":
        resource = "amd.com/gpu" if vendor == "amd" else "nvidia.com/gpu"
        line = f"resources.limits: {resource}: {count}"
        return f"{line}; nodeSelector: nvidia.com/gpu.product: {product}" if product else line
    typed = f"{gres_type}:{count}" if gres_type else str(count)
    return f"#SBATCH --gpus={typed}" if multi_node else f"#SBATCH --gres=gpu:{typed}"


def mig_line(scheduler: str, profile: str) -> str:
    """How a job of ``scheduler`` asks for one MIG slice of ``profile`` (``1g.10gb``)."""
    if scheduler == "kubernetes":
        return f"resources.limits: nvidia.com/mig-{profile}: 1"
    return f"#SBATCH --gres=gpu:{profile}:1"


def cancel_line(scheduler: str, job_id: str) -> str:
    """The command that ends job ``job_id`` (a Slurm job id, or a pod's ``<namespace>/<name>``)."""
    if scheduler == "kubernetes":
        namespace, _, name = job_id.partition("/")
        return f"kubectl delete pod {name} -n {namespace}" if name else f"kubectl delete pod {job_id}"
    return f"scancel {job_id}"
