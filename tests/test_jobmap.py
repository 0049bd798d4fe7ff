"""GPU → job: the shipped Slurm prolog/epilog, the mapping directory, cgroups, and the mapper on NVML samples."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from collector.jobmap.cgroup import job_of_cgroup
from collector.jobmap.mapper import JobMapper
from collector.jobmap.mapping_dir import read_mapping_dir
from collector.sample import Sample
from collector.sources.nvml import NvmlSource
from tests.fake_pynvml import CAPTURES, ManualClock, fake_nvml_from_capture

SCRIPTS = Path(__file__).resolve().parents[1] / "collector" / "jobmap" / "slurm"
PROC = Path(__file__).parent / "fixtures" / "jobmap" / "proc"
H100_MIG = "linux-x86_64__nvidia-h100-mig__590.48.01.txt"
MASKED_UUID = "GPU-00000000-0000-0000-0000-000000000000"


def _run(script: str, directory: Path, tmp_path: Path, **env: str) -> None:
    fake_smi = tmp_path / "nvidia-smi"
    fake_smi.write_text("#!/bin/sh\nprintf '0, GPU-aaaa\\n1, GPU-bbbb\\n2, GPU-cccc\\n'\n")
    fake_smi.chmod(0o755)
    environment = {"PATH": os.environ["PATH"], "GPU_JOB_MAPPING_DIR": str(directory), "NVIDIA_SMI": str(fake_smi)}
    subprocess.run(["sh", str(SCRIPTS / script)], env=environment | env, check=True)


def test_prolog_writes_by_index_and_uuid_and_epilog_removes_only_its_job(tmp_path: Path) -> None:
    directory = tmp_path / "gpustat"
    _run("prolog.sh", directory, tmp_path, SLURM_JOB_ID="7301", SLURM_JOB_UID="1000", SLURM_JOB_GPUS="0,2")
    _run("prolog.sh", directory, tmp_path, SLURM_JOB_ID="7302", SLURM_JOB_UID="1001", SLURM_JOB_GPUS="1",
         CUDA_VISIBLE_DEVICES="MIG-1111,MIG-2222")  # fmt: skip
    assert sorted(p.name for p in directory.iterdir()) == ["0", "1", "2", "GPU-aaaa", "GPU-bbbb", "GPU-cccc",
                                                            "MIG-1111", "MIG-2222"]  # fmt: skip
    assert (directory / "2").read_text() == "7301 1000\n", "jobstats' /run/gpustat line: job id and uid"
    first = {"0": "7301", "2": "7301", "GPU-aaaa": "7301", "GPU-cccc": "7301"}
    second = {"1": "7302", "GPU-bbbb": "7302", "MIG-1111": "7302", "MIG-2222": "7302"}
    assert read_mapping_dir(directory) == first | second
    _run("epilog.sh", directory, tmp_path, SLURM_JOB_ID="7301")
    assert sorted(p.name for p in directory.iterdir()) == ["1", "GPU-bbbb", "MIG-1111", "MIG-2222"]


def test_prolog_of_a_job_without_gpus_writes_nothing(tmp_path: Path) -> None:
    _run("prolog.sh", tmp_path / "gpustat", tmp_path, SLURM_JOB_ID="9")
    assert not (tmp_path / "gpustat").exists()


def test_mapping_dir_formats(tmp_path: Path) -> None:
    (tmp_path / "0").write_text("4242\n")  # dcgm-exporter: job ids one per line
    (tmp_path / "1").write_text("4243 1000\n")  # jobstats: job id and uid
    (tmp_path / "2").write_text("4244\n4245\n")  # shared by two jobs: no single job
    (tmp_path / "3").write_text("")
    assert read_mapping_dir(tmp_path) == {"0": "4242", "1": "4243"}
    assert read_mapping_dir(tmp_path / "absent") == {}


def test_cgroup_paths_of_slurm_and_kubernetes() -> None:
    assert job_of_cgroup((PROC / "21180" / "cgroup").read_text()) == "7301"  # v1 /slurm/uid_1000/job_7301/…
    assert job_of_cgroup((PROC / "21181" / "cgroup").read_text()) == "7301"  # v2 slurmstepd.scope/job_7301/…
    pod = "pod/6f1c2a9e-3b4d-4e5f-8a7b-0c1d2e3f4a5b"
    assert job_of_cgroup((PROC / "4000" / "cgroup").read_text()) == pod  # systemd driver, _ for -
    assert job_of_cgroup((PROC / "4001" / "cgroup").read_text()) == pod  # cgroupfs driver
    assert job_of_cgroup("0::/user.slice/user-1000.slice/session-3.scope\n") is None


def _h100_mig_samples(shared_data: Path) -> list[Sample]:
    clock = ManualClock()
    return NvmlSource(fake_nvml_from_capture(shared_data / CAPTURES / H100_MIG, "load", clock), clock).collect()


def test_mapping_dir_wins_by_uuid_then_index(shared_data: Path, tmp_path: Path) -> None:
    samples = _h100_mig_samples(shared_data)
    (tmp_path / "0").write_text("500 1000\n")
    (tmp_path / "MIG-00000002-0000-0000-0000-000000000002").write_text("501 1000\n")
    annotated = JobMapper(tmp_path, PROC).annotate(samples)
    jobs = {s.labels["uuid"]: s.job_id for s in annotated if s.entity == "gpu"}
    assert jobs[MASKED_UUID] == "500", "the whole GPU by its index"
    assert jobs["MIG-00000002-0000-0000-0000-000000000002"] == "501"
    assert jobs["MIG-00000000-0000-0000-0000-000000000000"] is None, "an index never names a MIG instance"


def test_processes_cgroups_name_the_job_and_two_jobs_name_none(shared_data: Path) -> None:
    samples = _h100_mig_samples(shared_data)
    # the capture's processes 21180, 21181 (job 7301) and 21198 (job 7302) all run on the GPU
    (gpu,) = [s for s in JobMapper(None, PROC).annotate(samples) if s.labels.get("mig_profile") == ""]
    assert gpu.job_id is None, "processes of two jobs: no single job"
    without_7302 = [s for s in samples if s.labels.get("pid") != "21198"]
    (gpu,) = [s for s in JobMapper(None, PROC).annotate(without_7302) if s.labels.get("mig_profile") == ""]
    assert gpu.job_id == "7301"


def test_a_job_already_on_the_sample_is_kept_and_vanished_pids_map_to_nothing(
    shared_data: Path, tmp_path: Path
) -> None:
    samples = _h100_mig_samples(shared_data)
    labelled = [
        s if s.entity != "gpu" else Sample(s.entity, s.labels, s.values, s.timestamp, "dcgm-42") for s in samples
    ]
    assert {s.job_id for s in JobMapper(None, PROC).annotate(labelled) if s.entity == "gpu"} == {"dcgm-42"}
    empty_proc = tmp_path / "proc"
    empty_proc.mkdir()
    assert {s.job_id for s in JobMapper(None, empty_proc).annotate(samples) if s.entity == "gpu"} == {None}
